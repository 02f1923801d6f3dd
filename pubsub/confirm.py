"""Confirming a subscription: `subscribe()` returns once every known publisher holds our filter.

ZeroMQ propagates a SUB socket's filter to its publishers asynchronously, so a message published
right after `subscribe()` could be missed. For each publisher known when the subscription is made,
the io loop asks the publisher (its service endpoint) for a probe; the publisher promises a token
and sends a probe on the topic's own frame, and the filter is in place once a probe with at least
that token arrives (pubsub/subscription.py's `Stream.see_probe`). A probe that does not come is
asked again, with backoff; a publisher that does not answer is given up on (it is dead, or about
to be), and the subscription returns anyway at its deadline, saying which publishers did not
confirm.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from dht.transport import Reply, RpcClient
from pubsub.subscription import Stream, TopicState

log = logging.getLogger(__name__)

PROBE_RETRY = 0.02  # seconds before a probe that did not come is asked again (doubling, to 0.5 s)


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
                 flush: Callable[[TopicState], None] = lambda _ts: None) -> None:
        self.rpc, self.later, self.alive, self.flush = rpc, later, alive, flush
        self.waiters: dict[str, Waiter] = {}

    def wait(self, ts: TopicState, streams: list[Stream], future: Future, result: object, timeout: float) -> None:
        # a publisher that is gone and served by its archive (no PUB endpoint) sends nothing live:
        # there is no subscription of ours at it to confirm
        live = [st for st in streams if st.entry.endpoint]
        self.waiters[ts.topic] = Waiter(future, result, {st.id for st in live}, time.monotonic() + timeout, ts)
        for st in live:
            st.probing = True
        for st in live:
            self._probe(ts, st, PROBE_RETRY)
        self.check(time.monotonic())

    def seen(self, ts: TopicState, st: Stream) -> None:
        """A probe confirmed `st` (or it is no longer a publisher of the topic)."""
        waiter = self.waiters.get(ts.topic)
        self._release(ts, st)
        if waiter is not None:
            waiter.pending.discard(st.id)
            self.check(time.monotonic())

    def _release(self, ts: TopicState, st: Stream) -> None:
        if st.probing:
            ts.release_start(st, time.time_ns())
            self.flush(ts)

    def cancel(self, topic: str) -> None:
        waiter = self.waiters.pop(topic, None)
        if waiter is not None and not waiter.future.done():
            waiter.future.set_exception(RuntimeError(f"unsubscribed from {topic!r} before it was in place"))

    def next_deadline(self) -> float | None:
        return min((w.deadline for w in self.waiters.values()), default=None)

    def check(self, now: float) -> None:
        for topic, waiter in list(self.waiters.items()):
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
            if not isinstance(token, int) or isinstance(token, bool):
                self._unconfirmable(ts, st, reply.err or "no token in the probe reply")
                return
            st.probe_token = token if st.probe_token is None else min(st.probe_token, token)
            if st.see_probe(-1):
                self.seen(ts, st)
                return
            self.later(backoff, lambda: self._probe(ts, st, min(backoff * 2, 0.5)))

        if self.alive(ts, st) and not st.confirmed and ts.topic in self.waiters:
            self.rpc.send(st.entry.repair, "probe", on_reply=on_reply, timeout=1.0, topic=ts.topic)

    def _unconfirmable(self, ts: TopicState, st: Stream, why: str) -> None:
        waiter = self.waiters.get(ts.topic)
        self._release(ts, st)
        if waiter is not None and st.id in waiter.pending:
            waiter.pending.discard(st.id)
            waiter.missing[st.id] = why
            log.warning("%s: publisher %s did not confirm our subscription: %s", ts.topic, st.id, why)
            self.check(time.monotonic())
