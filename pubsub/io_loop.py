"""The client's io loop: one thread that receives every topic the client follows and serves every
topic it publishes, and never waits on a peer.

It polls:
- the SUB sockets: `direct`, connected to the PUB socket of every matched publisher of a direct-mode
  topic, and `relay`, connected to the relay of each relay-mode topic's owner;
- the service ROUTER (pubsub/service.py), the client's one listening endpoint besides its PUB:
  other clients ask it for history and repair of our publications, and for probes;
- the RPC ROUTER on which we ask publishers the same (dht/transport.py's asynchronous face:
  requests go out, replies come back as callbacks, a dead publisher costs a timeout, not a stall);
- a pipe on which other threads wake it after posting work with `call()`.
All per-topic logic is pubsub/subscription.py's; this module moves bytes and carries out what a
`TopicState` asks for (deliveries, fetches, dead letters, re-reads of the record).

Subscribing is confirmed by probes (pubsub/confirm.py): `subscribe()` returns once every publisher
known at that moment holds our filter.

Long because it is the one thread that owns the client's receiving and serving sockets: every
handler of what arrives on them lives here, and the per-topic logic is already elsewhere
(pubsub/subscription.py, pubsub/member_links.py).
"""

from __future__ import annotations

import gc
import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

import zmq

from dht import wire
from dht.rpc_server import RejectLog, RpcServer
from dht.transport import Reply, RpcClient, SocketSetup
from pubsub.confirm import Confirmations
from pubsub.delivery import Subscription
from pubsub.directory import LEASE_HEARTBEATS, PublisherEntry
from pubsub.envelope import (
    DISPATCH_PREFIX,
    PATTERN_PREFIX,
    EnvelopeError,
    Run,
    decode_frame,
    inner_frames,
    pattern_filter,
    topic_filter,
)
from pubsub.links import Connections, Pointers
from pubsub.mailbox import Mailbox
from pubsub.member import GroupMembership
from pubsub.member_links import MemberLinks
from pubsub.message import DeadLetter, Message
from pubsub.pattern_intake import PROVISIONAL_BEATS, PatternIntake, PatternTaker
from pubsub.publishing import PublishingSide
from pubsub.service import MAX_ACKS, MAX_HEADS, Service
from pubsub.subscription import RESUME_TOPICS, Stream, TopicState

log = logging.getLogger(__name__)

RCVHWM = 1000  # frames per publisher: a frame may be a run of 64 messages / 4 KiB, so this bounds a slow
# subscriber's own memory (the publisher's SNDHWM, 10,000 frames, holds the rest of what it is behind)
BATCH = 2000  # messages read from one socket before the others get a turn
FLOOD_GAP_NS = 200_000  # frames read twice within this: a flood, and the loop naps FLOOD_NAP before looking again
FLOOD_NAP = 0.0003  # (frames then come several a read: one wake-up for several, not one for each, which left a
# publisher of 16 subscribers on two cores a seventeenth of the CPU while they read its every frame as it came)
LEAVE_HEARTBEAT = 1.0  # a pattern leaves a topic a lease after it is no longer announced, counted in
# heartbeats of at least this (a publisher's default): long enough for its next renewal to announce it again
FETCH_TIMEOUT = 2.0
UNREAD_DEFER_S = 20.0  # seconds the tail checks wait at most while our own sockets keep holding unread
# messages (a backlog of 10,000 new topics' frames takes a CPU-starved subscriber more than ten beats)
HEAD_TRIES = 3  # times a publisher's newest seq is asked for when it does not answer within FETCH_TIMEOUT
FETCH_HELD = 0.05  # seconds between looks whether a full subscription can take a repair now
ACK_REFRESH_BEATS = 10
GROUP_TICK = 0.02  # seconds between looks at our consumer groups (members' connections, ack waits) and,
# under a policy, at the subscriptions waiting to be let through
POLICY_CHECK = 0.25  # seconds between looks at the policy file (at most half a heartbeat)


class IoLoop:
    def __init__(self, server: RpcServer, publishing: PublishingSide, context: zmq.Context,
                 setup: SocketSetup | None, heartbeat: float,
                 on_reread: Callable[[str], None] = lambda _t: None,
                 on_dead_letter: Callable[[DeadLetter], None] | None = None,
                 on_delivered: Callable[[str, list[Message]], None] | None = None,
                 client_id: str | None = None,
                 on_archive: Callable[..., None] | None = None, receive_hwm: int = RCVHWM) -> None:
        self.service = Service(server, publishing)
        self.publishing = publishing
        self.context, self.setup, self.heartbeat = context, setup, heartbeat
        self.on_reread, self.on_dead_letter, self.on_delivered = on_reread, on_dead_letter, on_delivered
        self.id = client_id or server.endpoint
        self.on_archive = on_archive  # (topic, publisher, op, lo, hi, then(Reply)): a fetch from the archive
        self.receive_hwm = receive_hwm
        self.rpc = RpcClient(timeout=1.0, retries=0, setup=setup, context=context)
        self.subs: dict[str, zmq.Socket] = {"direct": self._sub_socket()}
        self.topics: dict[str, TopicState] = {}
        self.handles: dict[str, Subscription] = {}
        self._reliable_handles: list[Subscription] | None = None  # the distinct ones of `handles`, reliable
        self.shared: dict[str, list[Subscription]] = {}  # further subscriptions a topic's messages go to
        self._leaving: dict[tuple[str, int], int] = {}  # (topic, id of a pattern's handle) -> its leave's token
        self._tails_deferred_since: float | None = None  # the tail checks wait for our unread messages since
        self._held_back = False  # a reliable subscription's application lags: nothing is taken in
        self._resume_at: dict[str, dict[str, int]] = {}  # topics patterns stopped following -> positions
        self.intake = PatternIntake()  # the patterns taken by their own frames
        self.direct = Connections(lambda: self.subs.get("direct"))  # to each matched publisher's PUB
        self.relays = Pointers(Connections(lambda: self.subs.get("relay")))  # topic -> its owner's relay
        self._lost_told: dict[str, int] = {}  # best-effort losses already reported, by topic
        self._acked: dict[tuple[str, str], int] = {}  # (topic, publisher) -> the position we last acked
        self._beats = 0
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        # topics a pattern's frame met, in the order met: each let go if still unannounced at its
        # deadline (one tuple a topic, not a timer and a closure: a burst meets them by the thousand)
        self._met: deque[tuple[float, str, TopicState]] = deque()
        self._timer_ids = itertools.count()
        self.confirmations = Confirmations(self.rpc, self._later, self._alive, self._flush,
                                           lambda ts, st: self._ask_head(ts, st, ts.on_start))
        self.members = MemberLinks(self.rpc, self.direct, lambda: self.subs["direct"], self._later, heartbeat, self.id)
        self._next_group_tick = 0.0
        self._next_policy_check = 0.0
        self.mailbox = Mailbox()
        self._held = threading.local()  # `together`: the calls a thread holds back until its block ends
        publishing.runs.wake = self.mailbox.wake  # a coalesced run that did not fill is sent by us, soon
        self._stopping = threading.Event()
        self._poller = zmq.Poller()
        self._reading: dict[zmq.Socket, bool] = {}
        self._read_ns, self._flooded = 0, False  # when frames were last read; whether the last two reads were close
        self.reject_log = RejectLog("malformed message")
        self.unplaced = RejectLog("a pattern's message on a topic not followed yet")  # counted and logged: never
        # dropped unseen
        self.thread = threading.Thread(target=self._run, name=f"chordpub-io-{self.id}", daemon=True)

    def _sub_socket(self) -> zmq.Socket:
        sock = self.context.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, self.receive_hwm)
        sock.setsockopt(zmq.SNDHWM, 0)  # our filters, to every peer: never dropped (publishing.py says why)
        sock.setsockopt(zmq.MAXMSGSIZE, wire.MAX_MESSAGE_BYTES)  # a larger frame: the peer is dropped
        if self.setup is not None:
            self.setup(sock, False)
        return sock

    # -- other threads' door -------------------------------------------------------------------------
    def call(self, fn: Callable[[], None]) -> None:
        """Run `fn` on the io thread, soon (thread-safe)."""
        held = getattr(self._held, "calls", None)
        if held is not None:
            held.append(fn)
        else:
            self.mailbox.call(fn)

    @contextmanager
    def together(self) -> Iterator[None]:
        """The calls this thread makes inside the block run on the io thread in one go, with nothing
        received between them: two patterns of ours that meet a new topic in one announcement both take
        it before its first message is delivered (one after the other, the second missed what the io
        loop delivered to the first in between)."""
        if getattr(self._held, "calls", None) is not None:
            yield  # within an outer block: its calls go with the outer ones
            return
        held: list[Callable[[], None]] = []
        self._held.calls = held
        try:
            yield
        finally:
            self._held.calls = None
            self.mailbox.call_all(held)

    def wake(self) -> None:
        self.mailbox.wake()

    def start(self) -> IoLoop:
        self.thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self.wake()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout)

    # -- the loop --------------------------------------------------------------------------------------
    def _run(self) -> None:
        poller, publishing = self._poller, self.publishing
        for sock in (self.service.socket, self.rpc.socket):
            poller.register(sock, zmq.POLLIN)
        poller.register(self.mailbox.fd, zmq.POLLIN)
        self._read(self.subs["direct"], True)
        next_beat = time.monotonic() + self.heartbeat
        try:
            while not self._stopping.is_set():
                now = time.monotonic()
                wait = next_beat - now
                for deadline in (self.rpc.next_deadline(), self._timers[0][0] if self._timers else None,
                                 self._met[0][0] if self._met else None,
                                 self.confirmations.next_deadline(), self.members.next_deadline(),
                                 self._next_group_tick if self._ticking else None):
                    if deadline is not None:
                        wait = min(wait, deadline - now)
                runs = publishing.runs
                runs.watched = runs.busy
                if runs.busy:  # (read after `watched` is set: a run added since woke us)
                    wait = 0.0  # look again in a millisecond
                napped = self._flooded and wait > FLOOD_NAP
                if napped:
                    time.sleep(FLOOD_NAP)
                events = dict(poller.poll(max(int(wait * 1000), 0) + 1))
                if runs.busy:
                    publishing.send_paused(time.time_ns())
                if self.mailbox.fd in events:
                    self.mailbox.run()
                if self.rpc.socket in events:
                    self.rpc.on_readable()
                if self.service.socket in events:
                    self.service.serve()
                read = False
                for sock in self.subs.values():
                    if sock in events and self._reading.get(sock):
                        self._drain_sub(sock)
                        read = True
                if read:
                    now_ns = time.monotonic_ns()
                    gap = now_ns - self._read_ns - (int(FLOOD_NAP * 1e9) if napped else 0)  # (our own nap aside)
                    self._flooded, self._read_ns = gap < FLOOD_GAP_NS, now_ns
                else:
                    self._flooded = False
                now = time.monotonic()
                self.rpc.expire(now)
                self._run_timers(now)
                self.confirmations.expire(now)
                self.members.check()
                if self._ticking and now >= self._next_group_tick:
                    self._next_group_tick = now + GROUP_TICK
                    if self.publishing.policy is not None and now >= self._next_policy_check:
                        self._next_policy_check = now + min(POLICY_CHECK, self.heartbeat / 2)
                        self.publishing.check_policy()
                    for letter in self.publishing.tick_groups():
                        if self.on_dead_letter is not None:
                            self.on_dead_letter(letter)
                if now >= next_beat:
                    self._beat()
                    next_beat = now + self.heartbeat
                elif self.members.states:
                    self.members.send_acks()
                self._update_reading()
        except Exception:
            log.exception("the io loop stopped")
            raise
        finally:
            self._shutdown()

    @property
    def _ticking(self) -> bool:
        return bool(self.publishing.groups.groups) or self.publishing.policy is not None

    def _read(self, sock: zmq.Socket, on: bool) -> None:
        if self._reading.get(sock) != on:
            self._poller.register(sock, zmq.POLLIN if on else 0)
            self._reading[sock] = on

    def _update_reading(self) -> None:
        """A reliable subscription whose application fell behind stops our intake (back-pressure)."""
        if self._reliable_handles is None:  # (one handle serves every topic of a pattern: each once)
            distinct = {id(h): h for t, h in self.handles.items() if self.topics[t].reliable}
            distinct.update((id(h), h) for t, hs in self.shared.items() if self.topics[t].reliable for h in hs)
            self._reliable_handles = list(distinct.values())
        full = any(h.full for h in self._reliable_handles)
        self._held_back = full
        for sock in self.subs.values():
            self._read(sock, not full)

    def _later(self, delay: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (time.monotonic() + delay, next(self._timer_ids), fn))

    def _run_timers(self, now: float) -> None:
        while self._timers and self._timers[0][0] <= now:
            heapq.heappop(self._timers)[2]()
        met = self._met
        while met and met[0][0] <= now:
            _due, topic, ts = met.popleft()
            if self.topics.get(topic) is ts and ts.provisional:
                log.info("%s: met by a frame of %s, never announced: no longer followed", topic, ts.via_pattern)
                self.detach(topic, close=False, handle=self.handles.get(topic))

    # -- receiving -------------------------------------------------------------------------------------
    def _drain_sub(self, sock: zmq.Socket) -> None:
        collecting = gc.isenabled()
        if collecting:  # a batch of new topics' first frames makes objects by the thousand: the collector
            gc.disable()  # ran every 700 of them, walking every topic's state (half the io thread's time
        try:  # in a flood of 1000 new topics); it runs once the batch is taken
            self._drain_batch(sock)
        finally:
            if collecting:
                gc.enable()

    def _drain_batch(self, sock: zmq.Socket) -> None:
        touched: set[TopicState] = set()
        groups: set[GroupMembership] = set()
        mode = "direct" if sock is self.subs["direct"] else "relay"
        recv, on_frame, now = sock.recv, self.on_frame, time.time_ns
        for n in range(BATCH):
            try:
                frame = recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            if frame.startswith(DISPATCH_PREFIX):  # a consumer group's message, for us alone
                state = self.members.on_frame(frame, now(), self.reject_log)
                if state is not None:
                    groups.add(state)
                continue
            if frame.startswith(PATTERN_PREFIX):  # one topic's frame, or a bundle of several topics'
                taken = self.on_pattern_frame(frame, now())
                touched.update(taken)
                if any(len(ts.deliveries) >= BATCH for ts in taken):
                    break
                continue
            ts = on_frame(frame, mode, now())
            if ts is not None:
                if n == 0:  # the first frame's messages reach the application before we look for more: a
                    self._flush(ts)  # paced stream's every message, at once (a read that finds nothing costs 5 us)
                touched.add(ts)
                if len(ts.deliveries) >= BATCH:  # a frame may carry a run of messages: count those
                    break
        batches: dict[int, tuple[Subscription, list[Message]]] = {}
        for ts in touched:
            self._flush(ts, batches)
        for handle, messages in batches.values():  # one hand-over per subscription: a pattern's thousand
            handle.deliver(messages)  # new topics wake its application once, not a thousand times
        for state in groups:
            self.members.flush_deliveries(state)

    def on_frame(self, frame: bytes, mode: str, recv_ns: int) -> TopicState | None:
        """One frame from the `mode` SUB socket, checked (envelope types, topic) before any state is
        touched. Returns the topic's state when it took the message in."""
        try:
            env = decode_frame(frame, probes=True)
        except EnvelopeError as exc:
            self.reject_log(str(exc))
            return None
        ts = self.topics.get(env.topic)
        if ts is None or ts.mode != mode or not ts.exact:
            return None  # a prefix match on a topic we do not follow (or no longer, or by a pattern's frames)
        if env.publisher not in ts.streams and mode == "direct":
            self._meet_publisher(ts, env.publisher)
        return self._take(ts, env, recv_ns)

    def _meet_publisher(self, ts: TopicState, publisher: str) -> None:
        """A frame of a publisher the topic's record does not name yet, on a topic we follow by its exact
        filter: its registration is under way, and it sent us the topic's first messages at once
        (pubsub/coalescing.py's `early`). A publisher we hold an entry of from another topic is taken
        now, provisionally, from seq 1, as its record will have it taken (a best-effort subscription
        without history: one whose first messages need no terms of the publisher's); its record names
        it, or a read of the record, PROVISIONAL_BEATS heartbeats on, lets it go. Anyone else, and anyone
        on a CURVE ring, waits among the topic's strangers for the record."""
        handle = self.handles.get(ts.topic)
        if handle is None or handle.positions is not None or self.setup is not None:
            return  # (a CURVE ring authenticates its peers: there only the record names a publisher)
        entry = self.intake.entry_for(publisher)
        st = ts.meet(entry) if entry is not None else None
        if st is not None:
            self._link(st, entry.endpoint)  # type: ignore[union-attr]

            def lapsed() -> None:
                if self._alive(ts, st) and st.provisional:
                    ts.reread = True  # its record says whether it is a publisher of the topic after all
                    self._flush(ts)

            self._later(PROVISIONAL_BEATS * max(self.heartbeat, LEAVE_HEARTBEAT), lapsed)

    def on_pattern_frame(self, frame: bytes, recv_ns: int) -> list[TopicState]:
        """A frame for one of our patterns (pubsub/pattern_intake.py), carrying one plain frame or a bundle
        of several topics': the states of the topics the pattern takes by its frames that took a message
        in (a topic not followed yet is met here)."""
        for taker in self.intake.takers.values():  # (a client has a few patterns: its own heads, no decode)
            inners = inner_frames(frame, taker.head)
            if inners is not None:
                pattern = taker.pattern
                break
        else:
            if any(frame.startswith(taker.head) for taker in self.intake.takers.values()):
                self.reject_log("a malformed pattern frame")
            return []  # a pattern we no longer follow (or a frame cut short)
        taken = []
        for inner in inners:
            ts = self._on_inner(pattern, inner, recv_ns)
            if ts is not None:
                taken.append(ts)
        return taken

    def _on_inner(self, pattern: str, inner: memoryview, recv_ns: int) -> TopicState | None:
        try:
            env = decode_frame(inner, probes=True)  # type: ignore[arg-type]
        except EnvelopeError as exc:
            self.reject_log(str(exc))
            return None
        ts = self.topics.get(env.topic)
        if ts is None:
            if env.is_probe:
                return None
            ts = self._meet(pattern, env.topic, env.publisher)
            if ts is None:  # (a publisher we are connected to for a consumer group's topic alone)
                self.unplaced(f"{env.topic} of {env.publisher}, for {pattern}: no entry of the publisher known yet; "
                              "the topic is followed once announced")
                return None
        elif ts.via_pattern != pattern:
            return None  # taken by its own filter, or by another pattern's frames
        return self._take(ts, env, recv_ns)

    def _meet(self, pattern: str, topic: str, publisher: str) -> TopicState | None:
        """A topic of one of our patterns, met by its first frame before its announcement: followed now,
        provisionally, from seq 1 (None: not ours, or a publisher we know no entry of)."""
        taker = self.intake.taker_for(pattern, topic)
        entry = self.intake.entry_for(publisher) if taker is not None else None
        if taker is None or entry is None:
            return None
        ts = taker.make_state(topic)
        ts.meet_first_frames()
        ts.exact, ts.via_pattern, ts.provisional = False, pattern, True
        self.topics[topic] = ts
        self.handles[topic] = taker.handle  # type: ignore[assignment]
        self._reliable_handles = None
        if (was := self._resume_at.pop(topic, None)) is not None:
            ts.resume.update(was)
            taker.handle.pattern.followed_again(topic)  # type: ignore[union-attr]
        if (st := ts.meet(entry)) is not None:  # (as `_reconcile` would take it, without the look at
            self._link(st, entry.endpoint)  # publishers gone and moved that a first one needs not)
        self._met.append((time.monotonic() + PROVISIONAL_BEATS * max(self.heartbeat, LEAVE_HEARTBEAT), topic, ts))
        return ts

    def _take(self, ts: TopicState, env: Any, recv_ns: int) -> TopicState | None:
        if type(env) is Run:
            ts.on_run(env, recv_ns)
        elif env.is_probe:
            st = ts.streams.get(env.publisher)
            if st is not None and not st.confirmed and st.see_probe(env.token):
                self.confirmations.seen(ts, st)
            return None
        else:
            ts.on_message(env, recv_ns)
        return ts

    def _flush(self, ts: TopicState, batches: dict[int, tuple[Subscription, list[Message]]] | None = None) -> None:
        """Carry out what the topic's state asked for (its deliveries added to `batches`, when given, for
        the caller to hand over)."""
        if self.topics.get(ts.topic) is not ts:
            ts.deliveries.clear()
            return
        if ts.deliveries:
            messages, ts.deliveries = ts.deliveries, []
            shared = self.shared.get(ts.topic)
            for handle in (self.handles[ts.topic], *shared) if shared else (self.handles[ts.topic],):
                if batches is None:
                    handle.deliver(messages)
                elif (held := batches.get(id(handle))) is not None:
                    held[1].extend(messages)
                else:
                    batches[id(handle)] = (handle, list(messages))
            if self.on_delivered is not None:
                self.on_delivered(ts.mode, messages)
        while ts.fetches:
            st, lo, hi = ts.fetches.pop(0)
            self._fetch(ts, st, lo, hi)
        while ts.heads:
            st = ts.heads.pop(0)
            self._ask_head(ts, st, ts.on_head)
        while ts.starts:
            st = ts.starts.pop(0)
            self._ask_head(ts, st, ts.on_start)
        while ts.dead:
            letter = ts.dead.pop(0)
            if self.on_dead_letter is not None:
                self.on_dead_letter(letter)
        if ts.reread:
            ts.reread = False
            self.on_reread(ts.topic)

    def _alive(self, ts: TopicState, st: Stream) -> bool:
        return self.topics.get(ts.topic) is ts and ts.streams.get(st.id) is st

    def _fetch(self, ts: TopicState, st: Stream, lo: int, hi: int | None) -> None:
        handle = self.handles.get(ts.topic)
        if handle is not None and handle.full:  # the application is behind: what a repair would bring it
            self._later(FETCH_HELD, lambda: self._alive(ts, st) and self._fetch(ts, st, lo, hi))  # would only
            return  # pile up in its queue; ask once it has room (its intake is held back meanwhile)

        def on_reply(reply: Reply) -> None:
            if not self._alive(ts, st):
                return
            now = time.time_ns()
            if not reply.ok:
                log.info("%s: fetching %d..%s from %s failed: %s", ts.topic, lo, hi, st.id, reply.err)
                ts.fetch_done(st, now)
            else:
                more = ts.on_range(st, lo, hi, reply.body, now)
                if more is not None:
                    self._fetch(ts, st, more, hi)
                else:
                    ts.fetch_done(st, now)
            self._flush(ts)

        if not st.entry.repair:  # a publisher that is gone: its archive at the topic's owner answers
            if self.on_archive is not None:
                self.on_archive(ts.topic, st.id, "range", lo, hi, on_reply)
            return
        self.rpc.send(st.entry.repair, "range", on_reply=on_reply, timeout=FETCH_TIMEOUT, topic=ts.topic,
                      **{"from": lo, "to": hi})

    def _ask_head(self, ts: TopicState, st: Stream, then: Callable[[Stream, dict, int], None],
                  tries: int = HEAD_TRIES) -> None:
        """The publisher's newest seq, for `then`. A publisher too busy to answer in time is asked again
        (a stream that starts without it is owed from seq 1, and dead-letters what it was never owed)."""
        def on_reply(reply: Reply) -> None:
            if not self._alive(ts, st):
                return
            if reply.ok:
                then(st, reply.body, time.time_ns())
            elif reply.timed_out and tries > 1:
                self._ask_head(ts, st, then, tries - 1)
                return
            elif st.catching_up:
                ts.fetch_done(st, time.time_ns())
            self._flush(ts)

        if not st.entry.repair:
            if self.on_archive is not None:
                self.on_archive(ts.topic, st.id, "last", 0, None, on_reply)
            return
        self.rpc.send(st.entry.repair, "last", on_reply=on_reply, timeout=FETCH_TIMEOUT, topic=ts.topic, count=0)

    def _beat(self) -> None:
        """Reliable streams that stalled since the last beat have their tail checked (not while the intake
        is held back for a lagging application: they stalled because we stopped reading); a best-effort
        subscription that lost messages since the last beat says so; the filters subscribers sent our
        PUB sockets are read (they must not pile up)."""
        with self.publishing.lock:
            self.publishing.drain_filters()
        self.publishing.trim()
        self.members.send_acks(renew=True)
        self._beats += 1
        self._send_acks(refresh=self._beats % ACK_REFRESH_BEATS == 0)
        for ts in self.topics.values():
            lost = ts.lost
            if not ts.reliable and lost > self._lost_told.get(ts.topic, 0):
                log.warning("%s: %d messages lost so far (%d since the last heartbeat): this subscriber is slower "
                            "than its publishers, or the network drops", ts.topic, lost,
                            lost - self._lost_told.get(ts.topic, 0))
                self._lost_told[ts.topic] = lost
        stalled: dict[str, list[tuple[TopicState, Stream]]] = {}  # by publisher: one `heads` request each
        for ts in self.topics.values() if self._tails_due() else ():
            if ts.reliable:
                for st in list(ts.streams.values()):
                    if not ts.tail_check(st):
                        continue
                    if st.entry.repair:
                        stalled.setdefault(st.entry.repair, []).append((ts, st))
                    else:
                        self._ask_head(ts, st, lambda s, body, _now, ts=ts: ts.on_tail(s, body))
        for endpoint, streams in stalled.items():
            for i in range(0, len(streams), MAX_HEADS):
                self._ask_heads(endpoint, streams[i:i + MAX_HEADS])

    def _tails_due(self) -> bool:
        """Whether this beat asks stalled streams' publishers for their newest seq. Not while the
        application holds us back (a stream stalled by us: fetched, it would come anyway), nor while our
        own sockets hold messages we have not read, up to UNREAD_DEFER_S in a row: what a tail
        check finds missing may be among them (CI run 33: a subscriber starved of CPU while 10,000 messages
        came gave 319 streams up, in all likelihood for messages still in its own queue)."""
        if self._held_back:
            return False
        unread = any(sock.getsockopt(zmq.EVENTS) & zmq.POLLIN for sock in self.subs.values())
        now = time.monotonic()
        if not unread:
            self._tails_deferred_since = None
            return True
        if self._tails_deferred_since is None:
            self._tails_deferred_since = now
        if now - self._tails_deferred_since < UNREAD_DEFER_S:
            return False
        self._tails_deferred_since = None  # a subscriber never idle still checks its tails, every so often
        return True

    def _ask_heads(self, endpoint: str, streams: list[tuple[TopicState, Stream]]) -> None:
        """The newest seq of many stalled streams of one publisher, in one request (a request per stream
        each heartbeat was most of a 10,000-topic subscriber's work)."""
        def on_reply(reply: Reply) -> None:
            lasts = reply.get("lasts") if reply.ok else None
            if not isinstance(lasts, dict):
                return  # the next beat asks again
            for ts, st in streams:
                if self._alive(ts, st) and ts.topic in lasts:
                    ts.on_tail(st, {"last": lasts[ts.topic]})
                    self._flush(ts)

        self.rpc.send(endpoint, "heads", on_reply=on_reply, timeout=FETCH_TIMEOUT,
                      topics=[ts.topic for ts, _st in streams])

    def _send_acks(self, refresh: bool) -> None:
        """Durable subscriptions tell each publisher the position they committed: one request per
        publisher for all topics, when a position moved (and every few beats anyway: a publisher
        restarted without a data directory has forgotten us)."""
        by_publisher: dict[str, list[list]] = {}
        for topic, handle in self.handles.items():
            if handle.positions is None:
                continue
            positions = handle.positions.of(topic)
            committed = positions.snapshot()
            ts = self.topics[topic]
            for st in ts.streams.values():
                position = committed.get(st.id, 0)
                if refresh or self._acked.get((topic, st.id)) != position:
                    self._acked[(topic, st.id)] = position
                    by_publisher.setdefault(st.entry.repair, []).append(
                        [topic, f"{self.id}/{positions.name}", position])
        for endpoint, items in by_publisher.items():
            for i in range(0, len(items), MAX_ACKS):
                self.rpc.send(endpoint, "acks", on_reply=lambda _r: None, timeout=FETCH_TIMEOUT,
                              items=items[i:i + MAX_ACKS])

    # -- subscriptions (called on this thread through `call`) ----------------------------------------
    def attach(self, ts: TopicState, handle: Subscription, publishers: list[PublisherEntry],
               relay: str | None, future: Future, confirm_timeout: float) -> None:
        """Start receiving `ts.topic`; `future` gets `handle` once the known publishers confirmed. A topic
        received already (for another subscription: an exact one and patterns, or several patterns) is
        delivered to this one too, on the terms it was first followed with."""
        topic = ts.topic
        held = self.topics.get(topic)
        if held is not None and held.provisional and self.handles.get(topic) is handle:
            held.provisional = False  # met by its frames already: its announcement brings its publishers
            future.set_result(handle)
            self.set_publishers(topic, publishers)
            return
        if self._leaving.pop((topic, id(handle)), None) is not None and held is not None:
            future.set_result(handle)  # announced again within the grace: it never stopped
            self.set_publishers(topic, publishers)
            return
        if held is not None:
            if (held.reliable, held.history) != (ts.reliable, ts.history):
                log.warning("%s: followed already (reliable=%s, history=%d); this subscription gets it on "
                            "those terms", topic, held.reliable, held.history)
            self.shared.setdefault(topic, []).append(handle)
            self._reliable_handles = None
            if not held.exact and not self.intake.serves(handle):
                self._subscribe_exact(held)  # (a pattern's frames stop with the pattern)
            future.set_result(handle)
            return
        self.topics[topic] = ts
        self.handles[topic] = handle
        self._reliable_handles = None
        if handle.pattern is not None and (was := self._resume_at.pop(topic, None)) is not None:
            ts.resume.update(was)  # a topic a pattern left and follows again: from where it was
            handle.pattern.followed_again(topic)
        if ts.mode not in self.subs:
            self.subs[ts.mode] = self._sub_socket()
            self._read(self.subs[ts.mode], True)
        if self.intake.serves(handle) and publishers and all(p.patterns for p in publishers):
            ts.exact, ts.via_pattern = False, handle.pattern.pattern  # type: ignore[union-attr]
        else:
            self._subscribe_exact(ts)
        if ts.mode == "relay":
            self.set_relay(topic, relay)
        new = self._reconcile(ts, publishers, met_later=handle.pattern is not None)  # a pattern's topics are
        # met as they are announced, new ones among them
        if handle.positions is not None:  # a durable subscriber tells its publishers at once (before the
            self._send_acks(refresh=False)  # probes): they retain for it from the first message on
        self._flush(ts)
        self.confirmations.wait(ts, new, future, handle, confirm_timeout)

    def set_publishers(self, topic: str, publishers: list[PublisherEntry]) -> None:
        ts = self.topics.get(topic)
        if ts is not None:
            if ts.confirm(publishers):
                pass  # (the same publishers, where they were: nothing to reconcile)
            elif self._reconcile(ts, publishers, met_later=True) and self.handles[topic].positions is not None:
                self._send_acks(refresh=False)
            self._flush(ts)

    def _reconcile(self, ts: TopicState, publishers: list[PublisherEntry], met_later: bool = False) -> list[Stream]:
        """`met_later`: publishers the record named after the subscription was made (a pattern's topics
        are all taken so: one announced while it runs is new, and its first messages wait for us). A durable
        subscription connects to one of those only once the publisher has answered our position: its
        first messages wait for our filter (pubsub/advertising.py), so they are retained for us too
        (connected at once, its first messages could go out before our acknowledgement reached it,
        and a restart before we committed them found them gone: CI run 39)."""
        new, gone = ts.reconcile(publishers)
        for st in new:
            self.intake.met(st.entry)
        if not ts.exact and any(not st.entry.patterns for st in new):
            self._subscribe_exact(ts)  # a publisher under a policy: it sends no pattern frames
        for st in gone:  # its last messages may still be on their way, and a registration that expired
            # at a busy owner comes back: a lease's grace before we disconnect
            self._later(LEASE_HEARTBEATS * self.heartbeat, lambda st=st: self._forget(ts, st))
        moved, ts.moved = ts.moved, []
        if ts.mode == "direct":
            handle = self.handles.get(ts.topic)
            positions = handle.positions.of(ts.topic) if met_later and handle and handle.positions else None
            for st in new:
                if positions is not None and st.entry.repair and st.entry.endpoint and not positions.knows(st.id):
                    self._acknowledge_then_link(ts, st, positions)
                else:
                    self._link(st, st.entry.endpoint)
            for st, _old in moved:
                if st.linked is not None:  # (one not linked yet is linked where its entry says, once answered)
                    old_link = st.linked
                    self._link(st, st.entry.endpoint)
                    self.direct.unref(old_link)
        for st in gone:
            self.confirmations.seen(ts, st)
        return new

    def _subscribe_exact(self, ts: TopicState) -> None:
        self.subs[ts.mode].setsockopt(zmq.SUBSCRIBE, topic_filter(ts.topic))
        ts.exact, ts.via_pattern = True, None

    def add_pattern(self, taker: PatternTaker) -> None:
        """Take `taker`'s pattern by its frames, from every publisher we are connected to."""
        self.intake.add(taker)
        self.subs["direct"].setsockopt(zmq.SUBSCRIBE, pattern_filter(taker.pattern))

    def remove_pattern(self, pattern: str) -> None:
        """No more of the pattern's frames; the topics met by them alone are let go."""
        taker = self.intake.remove(pattern)
        if taker is None:
            return
        self.subs["direct"].setsockopt(zmq.UNSUBSCRIBE, pattern_filter(pattern))
        for topic in [t for t, ts in self.topics.items() if ts.via_pattern == pattern]:
            self.detach(topic, close=False, handle=taker.handle)  # type: ignore[arg-type]

    def _link(self, st: Stream, endpoint: str) -> None:
        self.direct.ref(endpoint)
        st.linked = endpoint

    def _unlink(self, st: Stream) -> None:
        if st.linked is not None:
            self.direct.unref(st.linked)
            st.linked = None

    def _acknowledge_then_link(self, ts: TopicState, st: Stream, positions: Any) -> None:
        """Tell the publisher our position, and connect to it once it has answered (or not, in time)."""
        position = positions.snapshot().get(st.id, 0)
        self._acked[(ts.topic, st.id)] = position

        def answered(_reply: Reply) -> None:
            if st.linked is None and (ts.streams.get(st.id) is st or ts.departed.get(st.id) is st) \
                    and self.topics.get(ts.topic) is ts:
                self._link(st, st.entry.endpoint)

        self.rpc.send(st.entry.repair, "acks", on_reply=answered, timeout=FETCH_TIMEOUT,
                      items=[[ts.topic, f"{self.id}/{positions.name}", position]])

    def _forget(self, ts: TopicState, st: Stream) -> None:
        if self.topics.get(ts.topic) is ts and ts.departed.get(st.id) is st:
            ts.forget(st.id)
            self._acked.pop((ts.topic, st.id), None)
            if ts.mode == "direct":
                self._unlink(st)

    def set_relay(self, topic: str, endpoint: str | None) -> None:
        """Point the relay SUB at `endpoint` for `topic` (the relay of its owner; None: none known).
        A topic not attached yet is ignored: `attach` brings its relay along."""
        ts = self.topics.get(topic)
        if endpoint is not None and (ts is None or ts.mode != "relay"):
            return
        self.relays.point(topic, endpoint)

    def leave_later(self, topic: str, handle: Subscription) -> None:
        """A pattern's topic is no longer announced: stop following it for `handle` after a lease's
        grace, unless it is announced again by then (a publisher whose renewal came late to a busy owner
        loses its fields there until its next renewal places them again: under a loaded suite, half of
        10 publishers' 2,000 topics were dropped and followed again, and reliable patterns delivered
        some twice)."""
        key = (topic, id(handle))
        token = next(self._timer_ids)
        self._leaving[key] = token

        def leave() -> None:
            if self._leaving.get(key) == token:
                del self._leaving[key]
                self.detach(topic, close=False, handle=handle)

        self._later(LEASE_HEARTBEATS * max(self.heartbeat, LEAVE_HEARTBEAT), leave)

    def detach(self, topic: str, close: bool = True, handle: Subscription | None = None) -> None:
        """Stop receiving `topic` for `handle` (by default the subscription that follows it first): nothing
        of it is delivered there after this. `close=False` leaves the subscription open (a pattern's,
        which other topics still feed). The topic is still received while another subscription wants it."""
        if topic in self.members.states:
            self.members.detach(topic, close)
            return
        others = self.shared.get(topic, [])
        if handle is not None and handle in others:
            others.remove(handle)
            self._reliable_handles = None
            if not others:
                del self.shared[topic]
            if close:
                handle.close()
            return
        if others and (handle is None or handle is self.handles.get(topic)):
            first = self.handles[topic]
            self.handles[topic] = others.pop(0)
            self._reliable_handles = None
            ts = self.topics[topic]
            if not ts.exact:
                if self.intake.serves(self.handles[topic]):
                    ts.via_pattern = self.handles[topic].pattern.pattern  # type: ignore[union-attr]
                else:
                    self._subscribe_exact(ts)
            if not others:
                del self.shared[topic]
            if close:
                first.close()
            return
        ts = self.topics.pop(topic, None)
        handle = self.handles.pop(topic, None)
        self._reliable_handles = None
        if ts is None:
            return
        if handle is not None and not close:  # a pattern's topic: followed again, it resumes where it was
            self._resume_at[topic] = ts.positions()
            while len(self._resume_at) > RESUME_TOPICS:
                del self._resume_at[next(iter(self._resume_at))]
        if ts.exact:
            self.subs[ts.mode].setsockopt(zmq.UNSUBSCRIBE, topic_filter(topic))
        if ts.mode == "direct":
            for st in (*ts.streams.values(), *ts.departed.values()):
                self._unlink(st)
        else:
            self.set_relay(topic, None)
        self.confirmations.cancel(topic)
        for key in [k for k in self._acked if k[0] == topic]:
            del self._acked[key]
        if handle is not None and close:
            handle.close()

    # -- the end -----------------------------------------------------------------------------------------
    def close_unstarted(self) -> None:
        """Release the sockets of a loop whose thread never ran (a client that failed to start)."""
        self._shutdown()

    def _shutdown(self) -> None:
        for topic in [*self.topics, *self.members.states]:
            self.detach(topic)
        for sock in self.subs.values():
            sock.close(linger=0)
        self.rpc.close()
        self.service.close()
        if not self.mailbox.closed:
            self.mailbox.close()
