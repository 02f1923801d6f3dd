"""The subscribing side: find publishers through the ring, connect to each one directly.

One thread delivers, polling three sockets: the SUB socket connected straight to every matched
publisher's PUB socket, a notify ROUTER on which the topic's owner says when a publisher appears
or goes, and the wake-up of the RecordReader thread, which renews our lease and reads the record
every heartbeat (so nothing is missed when the owner changes), off the delivery path
(record_reader.py says why). A hint (a push, a stranger's message) is acted on at once, here: one
read of the record, only when the publishers change. Every read carries the time it started, and
an older one never overrides a newer one. Per publisher:
- history on join (`history` > 0): the last k messages, marked recovered. A publisher that offers
  fewer than k is not matched, and we say so (offered >= requested);
- reliable mode: in-order delivery by sequence number from 1, duplicates dropped, gaps (the slow
  joiner's start included, and the tail, checked once a stream stalls for a heartbeat) repaired
  from the publisher's history; what fell out of it goes to the dead-letter trace with its range
  and counts in `gaps`;
- ownership strength: on an exclusive topic only the strongest live publisher is delivered.
In relay mode the SUB socket is connected to the topic owner's relay instead, which may forward a
publisher's first messages before the record has told us of it: those are held (bounded) and the
record re-read at once, so relay mode loses no more of a new publisher's start than direct mode.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import zmq

from dht import wire
from dht.client import DhtClient, DhtError
from dht.transport import RejectLog, RpcClient, RpcServer, SocketSetup
from pubsub.directory import Directory, PublisherEntry, leader
from pubsub.envelope import Envelope, EnvelopeError
from pubsub.record_reader import RecordReader
from pubsub.relay import SERVICE_OUT, DirectRoute, RelayRoute, Route

log = logging.getLogger(__name__)

NOTIFY_SCHEMAS = wire.WATCHER_SCHEMAS
PENDING_LIMIT = 10_000  # messages held for publishers the record has not told us of yet


@dataclass
class Delivery:
    env: Envelope
    recv_ns: int
    recovered: bool

    @property
    def latency_ms(self) -> float:
        return (self.recv_ns - self.env.sent_ns) / 1e6


@dataclass
class PublisherState:
    entry: PublisherEntry
    expected: int = 1  # reliable mode: the next sequence number to deliver
    buffer: dict[int, tuple[Envelope, bool]] = field(default_factory=dict)
    seen: set[int] = field(default_factory=set)  # best-effort mode: for duplicate and gap counts
    highest: int = 0
    first_available: int = 1  # the oldest seq its history still held at the last fetch
    expected_at_beat: int = 0  # reliable mode: `expected` at the previous heartbeat


@dataclass
class Stats:
    received: int = 0
    duplicates: int = 0
    gaps: int = 0
    recovered: int = 0
    publishers: set[str] = field(default_factory=set)
    latencies_ms: list[float] = field(default_factory=list)
    unmatched: dict[str, str] = field(default_factory=dict)


class Subscriber:
    def __init__(self, via: str, topic: str, host: str = "127.0.0.1", history: int = 0,
                 reliable: bool = False, heartbeat: float = 1.0, setup: SocketSetup | None = None,
                 on_delivery: Callable[[Delivery], None] | None = None,
                 on_dead_letter: Callable[[dict], None] | None = None, rcvhwm: int = 100_000,
                 mode: str = "direct") -> None:
        wire.parse_endpoint(via)
        if history < 0:
            raise ValueError("--history cannot be negative")
        self.via, self.topic, self.history, self.reliable = via, topic, history, reliable
        self.heartbeat = heartbeat
        self.on_delivery = on_delivery
        self.on_dead_letter = on_dead_letter
        self.context = zmq.Context.instance()
        self.sub = self.context.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.RCVHWM, rcvhwm)
        self.sub.setsockopt(zmq.MAXMSGSIZE, wire.MAX_MESSAGE_BYTES)  # larger frames: the peer is dropped
        self.reject_log = RejectLog("malformed message")
        if setup is not None:
            setup(self.sub, False)
        self.sub.setsockopt(zmq.SUBSCRIBE, topic.encode("utf-8"))
        self.notify = RpcServer(host, 0, self._on_notify, setup=setup, schemas=NOTIFY_SCHEMAS)
        self.id = self.notify.endpoint
        self.client = DhtClient(via, timeout=1.0, retries=1, setup=setup)
        self.directory = Directory(self.client, heartbeat)  # hint-driven reads, on this thread
        self.reader = RecordReader(via, topic, self.id, self.notify.endpoint, heartbeat, self.context, setup)
        self._read_at = float("-inf")  # when the read last applied started
        self.repair = RpcClient(timeout=1.0, retries=1, setup=setup)
        self.states: dict[str, PublisherState] = {}
        if mode not in ("direct", "relay"):
            raise ValueError(f"mode must be direct or relay, got {mode!r}")
        self.mode = mode
        self.route: Route = (DirectRoute(self.sub) if mode == "direct"
                             else RelayRoute(self.sub, self.client, topic, SERVICE_OUT))
        self.stats = Stats()
        # relay mode: messages of a publisher the relay forwards before the record has told us of it,
        # kept until the next read of the record matches (or drops) it
        self.pending: dict[str, list[Envelope]] = {}
        self._pending_count = 0
        self._changed = False
        self._stranger_reread_at = 0.0
        self._next_heartbeat = 0.0

    # -- the loop ---------------------------------------------------------------------------------
    def run(self, count: int | None = None, duration: float | None = None,
            stop: Callable[[], bool] | None = None) -> Stats:
        """Receive until `count` messages were delivered, `duration` passed, or `stop()` says so."""
        deadline = None if duration is None else time.monotonic() + duration
        poller = zmq.Poller()
        poller.register(self.sub, zmq.POLLIN)
        poller.register(self.notify.socket, zmq.POLLIN)
        poller.register(self.reader.wakeup, zmq.POLLIN)
        self.reader.start()
        while True:
            if count is not None and self.stats.received >= count:
                break
            now = time.monotonic()
            if (deadline is not None and now >= deadline) or (stop is not None and stop()):
                break
            if now >= self._next_heartbeat:
                self._check_tails()
                self._next_heartbeat = time.monotonic() + self.heartbeat
            wait = self._next_heartbeat - time.monotonic()
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
            events = dict(poller.poll(max(int(wait * 1000), 0) + 1))
            if self.reader.wakeup in events:
                read = self.reader.latest()
                if read is not None:
                    self._apply(*read)
            if self.notify.socket in events:
                self._drain_notify()
            if self.sub in events:
                self._drain_sub(count)
            if self._changed:
                self._reread()
        return self.stats

    def _apply(self, started: float, publishers: list[PublisherEntry]) -> None:
        if started > self._read_at:
            self._read_at = started
            self._reconcile(publishers)

    def _reread(self) -> None:
        """Act on a hint by reading the record back from the ring (never trusting the hint itself)."""
        self._changed = False
        started = time.monotonic()
        try:
            self._apply(started, self.directory.publishers(self.topic))
        except DhtError as exc:
            log.warning("directory unavailable: %s", exc)

    def close(self, unregister: bool = True) -> None:
        self.reader.close(unregister)
        self.sub.close()
        self.notify.close()
        self.client.close()
        self.repair.close()

    def _check_tails(self) -> None:
        """Reliable mode, every heartbeat: repair the tail of every stream that stalled."""
        if self.reliable:
            for st in list(self.states.values()):
                self._check_tail(st)

    def _drain_notify(self) -> None:
        while True:
            try:
                frames = self.notify.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            reply = self.notify.handle_frames(frames)
            if reply is not None:
                self.notify.socket.send_multipart(reply, zmq.NOBLOCK)

    def _on_notify(self, req: dict) -> dict:
        if req["key"] != self.topic:
            raise wire.WireError(f"not watching {req['key']!r}")
        # a hint, never trusted: a forged or stale one costs a read of the record, nothing more
        self._changed = True  # acted on after the reply, outside the handler
        return {}

    def _drain_sub(self, count: int | None) -> None:
        while count is None or self.stats.received < count:
            try:
                frames = self.sub.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self.on_message(frames)

    def on_message(self, frames: list[bytes]) -> None:
        """One message from the SUB socket: checked (frame count, envelope types, topic) before
        anything is touched; a matched publisher's goes to delivery, a stranger's is held."""
        if len(frames) != 2:
            self.reject_log(f"{len(frames)} frames, expected topic and envelope")
            return
        try:
            env = Envelope.decode(frames[1])
        except EnvelopeError as exc:
            self.reject_log(str(exc))
            return
        if env.topic != self.topic:
            return  # a prefix match on another topic
        st = self.states.get(env.publisher)
        if st is not None:
            self._accept(st, env, recovered=False)
        elif env.publisher not in self.stats.unmatched:
            self._hold(env)

    def _hold(self, env: Envelope) -> None:
        """Keep a not-yet-matched publisher's message (bounded) and ask the ring about it soon."""
        if self._pending_count < PENDING_LIMIT:
            self.pending.setdefault(env.publisher, []).append(env)
            self._pending_count += 1
        now = time.monotonic()
        if now >= self._stranger_reread_at:
            self._stranger_reread_at = now + self.heartbeat / 10
            self._changed = True

    # -- publishers come and go --------------------------------------------------------------------
    def _reconcile(self, publishers: list[PublisherEntry]) -> None:
        """Match new publishers, drop gone ones, point the route at them, then catch up the new."""
        current = {p.id: p for p in publishers}
        for pid in list(self.states):
            if pid not in current:
                log.info("publisher %s left %s", pid, self.topic)
                del self.states[pid]
        new: list[PublisherState] = []
        for pid, entry in current.items():
            if pid in self.states or pid in self.stats.unmatched:
                continue
            if self.history > entry.history:
                why = (f"publisher {pid} offers history {entry.history} < requested {self.history}: "
                       "not matched")
                self.stats.unmatched[pid] = why
                log.warning(why)
                continue
            st = PublisherState(entry)
            self.states[pid] = st
            self.stats.publishers.add(pid)
            new.append(st)
        self._sync_route()  # connect before catching up, so nothing falls between the two
        for st in new:
            self._catch_up(st)
            for env in self.pending.pop(st.entry.id, []):
                self._accept(st, env, recovered=False)
        for pid in [p for p in self.pending if p not in current or p in self.stats.unmatched]:
            del self.pending[pid]  # the record does not know it: a stranger, or one that already left
        self._pending_count = sum(len(v) for v in self.pending.values())

    def _sync_route(self) -> None:
        try:
            self.route.sync([st.entry for st in self.states.values()])
        except DhtError as exc:
            log.warning("%s route: %s", self.mode, exc)

    def _catch_up(self, st: PublisherState) -> None:
        """On matching a publisher: reliable mode takes everything from seq 1, history mode the last k."""
        if self.reliable:
            self._repair(st, 1, None)
        elif self.history:
            head = self.repair.call(st.entry.repair, "last", topic=self.topic, count=0)
            if head.ok:
                last = int(head.get("last", 0))
                for env in self._fetch(st, max(last - self.history + 1, 1), last):
                    self._accept(st, env, recovered=True)

    # -- delivery -----------------------------------------------------------------------------------
    def _accept(self, st: PublisherState, env: Envelope, recovered: bool) -> None:
        if not self.reliable:
            if env.seq in st.seen:
                self.stats.duplicates += 1  # counted, never delivered twice (history overlaps live)
                return
            if env.seq > st.highest + 1 and st.highest and not recovered:
                self.stats.gaps += env.seq - st.highest - 1
            st.seen.add(env.seq)
            st.highest = max(st.highest, env.seq)
            self._deliver(st, env, recovered)
            return
        if env.seq < st.expected or env.seq in st.buffer:
            return  # already delivered or waiting: a duplicate never reaches the application
        st.buffer[env.seq] = (env, recovered)
        if env.seq > st.expected and not recovered:
            self._repair(st, st.expected, env.seq - 1)
        self._drain(st)

    def _drain(self, st: PublisherState) -> None:
        while st.expected in st.buffer:
            env, recovered = st.buffer.pop(st.expected)
            st.expected += 1
            self._deliver(st, env, recovered)

    def _deliver(self, st: PublisherState, env: Envelope, recovered: bool) -> None:
        chosen = leader([s.entry for s in self.states.values()])
        if chosen is not None and chosen.id != st.entry.id:
            return  # exclusive topic: only the strongest publisher is delivered
        d = Delivery(env, time.time_ns(), recovered)
        self.stats.received += 1
        self.stats.recovered += recovered
        self.stats.latencies_ms.append(d.latency_ms)
        if self.on_delivery is not None:
            self.on_delivery(d)

    # -- repair ---------------------------------------------------------------------------------------
    def _fetch(self, st: PublisherState, lo: int, hi: int | None) -> list[Envelope]:
        """Messages lo..hi (None: to the newest) from the publisher's history, paging as needed."""
        out: list[Envelope] = []
        while True:
            reply = self.repair.call(st.entry.repair, "range", topic=self.topic, **{"from": lo, "to": hi})
            if not reply.ok:
                return out
            got = []
            for raw in reply.get("messages", []):
                try:
                    got.append(Envelope.decode(raw))
                except EnvelopeError:
                    continue
            got = [e for e in got if e.topic == self.topic and e.publisher == st.entry.id]
            out += got
            st.first_available = int(reply.get("first", 1))
            last = int(reply.get("last", 0))
            if not got or got[-1].seq >= (last if hi is None else min(hi, last)):
                return out
            lo = got[-1].seq + 1

    def _repair(self, st: PublisherState, lo: int, hi: int | None) -> None:
        """Ask for lo..hi; what the history no longer holds is dead-lettered and skipped."""
        if hi is not None and hi < lo:
            return
        st.first_available = lo
        for env in self._fetch(st, lo, hi):
            if env.seq >= st.expected and env.seq not in st.buffer:
                st.buffer[env.seq] = (env, True)
        if st.first_available > st.expected:
            missing_to = st.first_available - 1 if hi is None else min(st.first_available - 1, hi)
            self._dead_letter(st, st.expected, missing_to, "fell out of the publisher's history")
        self._drain(st)

    def _check_tail(self, st: PublisherState) -> None:
        """A lost last message shows no gap behind it: once a stream stalls for a beat, ask the head.

        While messages keep arriving, the next one reveals any gap, so a stream that progressed since
        the last beat is left alone (repairing it would only re-fetch what is already queued to us).
        """
        if st.expected != st.expected_at_beat:
            st.expected_at_beat = st.expected
            return
        head = self.repair.call(st.entry.repair, "last", topic=self.topic, count=0)
        if head.ok and int(head.get("last", 0)) >= st.expected:
            self._repair(st, st.expected, None)
        st.expected_at_beat = st.expected

    def _dead_letter(self, st: PublisherState, lo: int, hi: int, reason: str) -> None:
        if hi < lo:
            return
        self.stats.gaps += hi - lo + 1
        st.expected = max(st.expected, hi + 1)
        row = {"topic": self.topic, "publisher": st.entry.id, "subscriber": self.id, "from_seq": lo,
               "to_seq": hi, "reason": reason, "ts": time.time()}
        log.warning("dead letter: %s", row)
        if self.on_dead_letter is not None:
            self.on_dead_letter(row)
