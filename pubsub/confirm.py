"""Confirming a subscription: `subscribe()` returns once every known publisher holds our filter.

ZeroMQ propagates a SUB socket's filter to its publishers asynchronously, so a message published
right after `subscribe()` could be missed. For each publisher known when the subscription is made,
the io loop asks the publisher (its service endpoint) for a probe; the publisher promises a token
and sends a probe on the topic's own frame, and the filter is in place once a probe with at least
that token arrives (pubsub/subscription.py's `Stream.see_probe`). A probe that does not come is
asked again, with backoff; a publisher that does not answer is given up on (it is dead, or about
to be), and the subscription returns anyway at its deadline, saying which publishers did not
confirm.

Probe requests to one publisher are batched and windowed: the topics asked about in one turn of the
io loop go together (`probes`, up to PROBE_BATCH topics a request), at most PROBE_WINDOW requests
await their reply, and the rest wait their turn in order. A pattern that matches 10,000 topics of one
publisher at once sent 10,000 requests together, the publisher answered them slower than their
timeout, and every retry added to the pile; one at a time in a window, they still cost a round trip
and a request's handling each. A publisher of an older version, which knows no `probes`, is asked one
topic a request (`probe`). A probe's
reply also names the topic's newest seq, which is where a stream joining a running publisher starts
(`Stream.start_on_probe`): asked on its own, outside the window, those 10,000 questions piled up the
same way (their answers timed out, and the streams started from seq 1, fetching what no one owed them).
"""

from __future__ import annotations

import heapq
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from dht.transport import Reply, RpcClient
from pubsub.subscription import Stream, TopicState

log = logging.getLogger(__name__)

PROBE_RETRY = 0.02  # seconds before a probe that did not come is asked again (doubling, to 0.5 s)
PROBE_WINDOW = 8  # probe requests awaiting their reply at one publisher; the rest wait their turn here
PROBE_BATCH = 256  # topics one probe request asks about (the publisher's `probes` takes up to MAX_HEADS)
PROBE_QUEUE = 100_000  # topics waiting for the window at one publisher; beyond, a stream goes unconfirmed
MAX_SINGLES = 1024  # publishers remembered as asked one topic a request (a version without `probes`)


@dataclass
class Waiter:
    """A subscribe() waiting for its publishers' probes; `future` gets `result` when they are in."""

    future: Future
    result: object
    pending: set[str]
    deadline: float
    ts: TopicState | None = None
    missing: dict[str, str] = field(default_factory=dict)  # publisher -> why it could not confirm


class Confirmations:
    """The waiting subscriptions of one io loop (used on its thread only)."""

    def __init__(self, rpc: RpcClient, later: Callable[[float, Callable[[], None]], None],
                 alive: Callable[[TopicState, Stream], bool],
                 flush: Callable[[TopicState], None] = lambda _ts: None,
                 ask_start: Callable[[TopicState, Stream], None] = lambda _ts, _st: None) -> None:
        """`ask_start`: ask a stream's publisher for its newest seq on its own (its probe told none)."""
        self.rpc, self.later, self.alive, self.flush, self.ask_start = rpc, later, alive, flush, ask_start
        self.waiters: dict[str, Waiter] = {}
        self._deadlines: list[tuple[float, str]] = []  # (deadline, topic) of the waiters: a heap
        self.in_flight: dict[str, int] = {}  # publisher's service endpoint -> probe requests unanswered
        self.queued: dict[str, deque[tuple[str, Callable[[Reply], None]]]] = {}  # -> topics not yet asked
        self.singles: OrderedDict[str, None] = OrderedDict()  # publishers that do not know `probes`

    def wait(self, ts: TopicState, streams: list[Stream], future: Future, result: object, timeout: float) -> None:
        # a publisher that is gone and served by its archive (no PUB endpoint) sends nothing live:
        # there is no subscription of ours at it to confirm
        live = [st for st in streams if st.entry.endpoint]
        deadline = time.monotonic() + timeout
        self.waiters[ts.topic] = Waiter(future, result, {st.id for st in live}, deadline, ts)
        heapq.heappush(self._deadlines, (deadline, ts.topic))
        for st in live:
            st.probing = True
        for st in live:
            self._probe(ts, st, PROBE_RETRY)
        if ts.topic in self.waiters:
            self.check(time.monotonic(), ts.topic)

    def seen(self, ts: TopicState, st: Stream) -> None:
        """A probe confirmed `st` (or it is no longer a publisher of the topic)."""
        waiter = self.waiters.get(ts.topic)
        self._release(ts, st)
        if waiter is not None:
            waiter.pending.discard(st.id)
            self.check(time.monotonic(), ts.topic)

    def _release(self, ts: TopicState, st: Stream) -> None:
        if st.probing:
            ts.release_start(st, time.time_ns())
        if st.confirmed:
            ts.probe_passed(st, time.time_ns())
        if st.start_on_probe:  # no probe reply told where it starts: asked on its own
            st.start_on_probe = False
            self.ask_start(ts, st)
        self.flush(ts)

    def cancel(self, topic: str) -> None:
        waiter = self.waiters.pop(topic, None)
        if waiter is not None and not waiter.future.done():
            waiter.future.set_exception(RuntimeError(f"unsubscribed from {topic!r} before it was in place"))

    def next_deadline(self) -> float | None:
        self._drop_stale()
        return self._deadlines[0][0] if self._deadlines else None

    def _drop_stale(self) -> None:
        while self._deadlines:
            deadline, topic = self._deadlines[0]
            waiter = self.waiters.get(topic)
            if waiter is not None and waiter.deadline == deadline:
                return
            heapq.heappop(self._deadlines)  # finished (or waiting again, with a deadline of its own)

    def expire(self, now: float) -> None:
        """Finish the waiters whose time is up (the io loop, every turn: the earliest deadline alone is
        looked at until one passes)."""
        while (deadline := self.next_deadline()) is not None and deadline <= now:
            _deadline, topic = heapq.heappop(self._deadlines)
            self.check(now, topic)

    def check(self, now: float, topic: str | None = None) -> None:
        """Finish the waiters whose publishers all confirmed or whose time is up: `topic`'s alone (one
        of its publishers just confirmed: a look at every waiter each time made 10,000 topics quadratic)."""
        waiters = list(self.waiters.items()) if topic is None else [(topic, self.waiters[topic])]
        for topic, waiter in waiters:
            if waiter.pending and now < waiter.deadline:
                continue
            del self.waiters[topic]
            for pid in waiter.pending:
                if waiter.ts is not None and (st := waiter.ts.streams.get(pid)) is not None:
                    self._release(waiter.ts, st)  # without its probe: the newest seq as it came
                waiter.missing[pid] = "no probe came back in time"
                log.warning("%s: publisher %s did not confirm our subscription in time", topic, pid)
            if not waiter.future.done():
                waiter.future.set_result(waiter.result)

    def _probe(self, ts: TopicState, st: Stream, backoff: float) -> None:
        def on_reply(reply: Reply) -> None:
            if not self.alive(ts, st) or st.confirmed:
                return
            token = reply.get("token") if reply.ok else None
            waiter = self.waiters.get(ts.topic)
            if reply.timed_out and waiter is not None and time.monotonic() < waiter.deadline:
                # a publisher busy past the request's timeout is asked again until the subscribe gives up
                # on it (many new topics of one publisher at once, on a loaded machine)
                self.later(backoff, lambda: self._probe(ts, st, min(backoff * 2, 0.5)))
                return
            if not isinstance(token, int) or isinstance(token, bool):
                self._unconfirmable(ts, st, reply.err or "no token in the probe reply")
                return
            st.promised(token, reply.get("last"))
            if st.start_on_probe:  # the first reply's newest seq: what precedes its (lowest) token
                st.start_on_probe = False
                last = reply.get("last")
                if isinstance(last, int) and not isinstance(last, bool) and last >= 0:
                    ts.on_start(st, {"last": last}, time.time_ns())  # applied once the probe has come
                else:
                    self.ask_start(ts, st)
            if st.see_probe(-1):
                self.seen(ts, st)
                return
            self.later(backoff, lambda: self._probe(ts, st, min(backoff * 2, 0.5)))

        if self.alive(ts, st) and not st.confirmed and ts.topic in self.waiters:
            if not st.entry.endpoint:  # gone meanwhile, now served by its archive: nothing live to confirm
                self.seen(ts, st)
                return
            self._ask(st.entry.repair, ts.topic, on_reply)

    def _ask(self, endpoint: str, topic: str, on_reply: Callable[[Reply], None]) -> None:
        """Ask `endpoint` for a probe on `topic`: with the other topics asked for this turn, in one request
        once fewer than PROBE_WINDOW of ours await its answer."""
        waiting = self.queued.get(endpoint)
        if waiting is None:
            waiting = self.queued[endpoint] = deque()
            self.later(0, lambda: self._send(endpoint))  # after this turn: what it asks for goes together
        if len(waiting) >= PROBE_QUEUE:
            on_reply(Reply(False, err=f"{PROBE_QUEUE} probe requests wait at this publisher already"))
            return
        waiting.append((topic, on_reply))

    def _send(self, endpoint: str) -> None:
        """Send what waits for `endpoint`, PROBE_BATCH topics a request, while the window allows."""
        waiting = self.queued.get(endpoint)
        while waiting and self.in_flight.get(endpoint, 0) < PROBE_WINDOW:
            self.in_flight[endpoint] = self.in_flight.get(endpoint, 0) + 1
            if endpoint in self.singles:
                topic, on_reply = waiting.popleft()
                self.rpc.send(endpoint, "probe", timeout=1.0, topic=topic,
                              on_reply=lambda reply, o=on_reply: self._answered(endpoint, [], reply, o))
                continue
            batch = [waiting.popleft() for _ in range(min(PROBE_BATCH, len(waiting)))]
            self.rpc.send(endpoint, "probes", on_reply=lambda reply, b=batch: self._answered(endpoint, b, reply),
                          timeout=1.0, topics=[topic for topic, _ in batch])
        if waiting is not None and not waiting and self.queued.get(endpoint) is waiting:
            del self.queued[endpoint]  # (a request refused at once answered within the loop, which sent the rest)

    def _answered(self, endpoint: str, batch: list[tuple[str, Callable[[Reply], None]]], reply: Reply,
                  single: Callable[[Reply], None] | None = None) -> None:
        left = self.in_flight[endpoint] - 1
        if left:
            self.in_flight[endpoint] = left
        else:
            del self.in_flight[endpoint]
        if single is not None:
            single(reply)
        elif not reply.ok and "unknown op 'probes'" in (reply.err or ""):  # a publisher of an older version
            self.singles[endpoint] = None
            while len(self.singles) > MAX_SINGLES:
                self.singles.popitem(last=False)
            self.queued.setdefault(endpoint, deque()).extendleft(reversed(batch))  # asked again, one by one
        else:
            self._dispatch(batch, reply)
        if endpoint in self.queued:
            self._send(endpoint)

    @staticmethod
    def _dispatch(batch: list[tuple[str, Callable[[Reply], None]]], reply: Reply) -> None:
        """Each topic of a `probes` request its own reply, as `probe` would have given it."""
        token, lasts, refused = reply.get("token"), reply.get("lasts"), reply.get("refused")
        if reply.ok and not (isinstance(lasts, dict) and isinstance(refused, dict)):
            reply = Reply(False, err="a malformed probes reply")
        for topic, on_reply in batch:
            if not reply.ok:
                on_reply(reply)
            elif topic in lasts:
                on_reply(Reply(True, {"token": token, "last": lasts[topic]}))
            else:
                on_reply(Reply(False, err=str(refused.get(topic, "the publisher left the topic unanswered"))))

    def _unconfirmable(self, ts: TopicState, st: Stream, why: str) -> None:
        waiter = self.waiters.get(ts.topic)
        self._release(ts, st)
        if waiter is not None and st.id in waiter.pending:
            waiter.pending.discard(st.id)
            waiter.missing[st.id] = why
            log.warning("%s: publisher %s did not confirm our subscription: %s", ts.topic, st.id, why)
            self.check(time.monotonic(), ts.topic)
