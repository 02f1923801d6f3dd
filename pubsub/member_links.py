"""The io loop's part in a client's consumer-group memberships: joining publishers, taking their
dispatch frames, sending settlements and lease renewals. Runs on the io thread only.

For each (topic, group) the client is a member of (pubsub/member.py holds its state): the SUB socket
holds the member's dispatch filter, is connected to every publisher of the topic, and each publisher
is sent a `gjoin` (the member's prefetch and terms); `subscribe()` returns once every publisher known
then has answered. Publishers learnt later (the record's changes, through the registrar) are joined
the same way. Settlements go out in one `gack` per publisher whenever the outbox has some (and once a
heartbeat in any case: the member's lease there); a publisher that answers that it does not know us
(it restarted) is joined again. Leaving sends `gleave`, so what the member held goes to the others
at once instead of after its lease.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future

import zmq

from dht.transport import Reply, RpcClient
from pubsub.delivery import Subscription
from pubsub.directory import LEASE_HEARTBEATS, PublisherEntry
from pubsub.envelope import EnvelopeError, decode_dispatch, dispatch_filter
from pubsub.links import Connections
from pubsub.member import GroupMembership
from pubsub.service import MAX_ACKS

log = logging.getLogger(__name__)

RPC_TIMEOUT = 2.0


class MemberLinks:
    def __init__(self, rpc: RpcClient, direct: Connections, sub: Callable[[], zmq.Socket],
                 later: Callable[[float, Callable[[], None]], None], heartbeat: float, member: str) -> None:
        self.rpc, self.direct, self.sub, self.later = rpc, direct, sub, later
        self.heartbeat, self.member = heartbeat, member
        self.states: dict[str, GroupMembership] = {}  # topic -> membership
        self.handles: dict[str, Subscription] = {}
        self._waiting: dict[str, tuple[Future, set[str], float]] = {}  # topic -> (future, to answer, deadline)

    @property
    def lease(self) -> float:
        return LEASE_HEARTBEATS * self.heartbeat

    # -- joining -------------------------------------------------------------------------------------
    def attach(self, state: GroupMembership, handle: Subscription, publishers: list[PublisherEntry],
               future: Future, timeout: float) -> None:
        topic = state.topic
        self.states[topic] = state
        self.handles[topic] = handle
        self.sub().setsockopt(zmq.SUBSCRIBE, dispatch_filter(topic, state.group, self.member))
        live = [p for p in publishers if p.endpoint]
        self._waiting[topic] = (future, {p.id for p in live}, time.monotonic() + timeout)
        for p in live:
            self._add(state, p)
        self._check_waiting(topic)

    def set_publishers(self, topic: str, publishers: list[PublisherEntry]) -> None:
        state = self.states.get(topic)
        if state is None:
            return
        current = {p.id: p for p in publishers if p.endpoint}
        for pid in [p for p in state.publishers if p not in current]:
            gone = state.publishers.pop(pid)
            log.info("%s: publisher %s left the record; group %s forgets it a lease later", topic, pid, state.group)
            self.later(self.lease, lambda st=state, e=gone: self._drop(st, e))
        for pid, entry in current.items():
            old = state.publishers.get(pid)
            if old is None or old.endpoint != entry.endpoint:
                if old is not None:
                    self.direct.unref(old.endpoint)
                    state.publishers.pop(pid)
                self._add(state, entry)

    def _add(self, state: GroupMembership, entry: PublisherEntry) -> None:
        state.publishers[entry.id] = entry
        self.direct.ref(entry.endpoint)
        self._join(state, entry)

    def _drop(self, state: GroupMembership, entry: PublisherEntry) -> None:
        if self.states.get(state.topic) is state and entry.id not in state.publishers:
            self.direct.unref(entry.endpoint)
            state.forget_publisher(entry.id)

    def _join(self, state: GroupMembership, entry: PublisherEntry) -> None:
        t = state.terms

        def on_reply(reply: Reply) -> None:
            if self.states.get(state.topic) is not state:
                return
            if reply.ok:
                state.joined.add(entry.id)
                state.unmatched.pop(entry.id, None)
            elif reply.err is not None and "no reply" not in reply.err and "timed out" not in reply.err:
                state.unmatched[entry.id] = reply.err
                log.warning("%s: publisher %s refused group %s: %s", state.topic, entry.id, state.group, reply.err)
            self._answered(state.topic, entry.id, reply)

        self.rpc.send(entry.repair, "gjoin", on_reply=on_reply, timeout=RPC_TIMEOUT, topic=state.topic,
                      group=state.group, member=self.member, prefetch=state.prefetch, ordering=t.ordering,
                      ack_wait=t.ack_wait, max_deliver=t.max_deliver, durable=t.durable, lease=self.lease)

    def _answered(self, topic: str, pid: str, reply: Reply) -> None:
        waiting = self._waiting.get(topic)
        if waiting is None:
            return
        future, pending, _deadline = waiting
        pending.discard(pid)
        if not reply.ok and reply.err and ("ordered by" in reply.err or "durable" in reply.err):
            del self._waiting[topic]
            if not future.done():
                future.set_exception(ValueError(reply.err))
            return
        self._check_waiting(topic)

    def _check_waiting(self, topic: str) -> None:
        future, pending, deadline = self._waiting[topic]
        if not pending or time.monotonic() >= deadline:
            del self._waiting[topic]
            if pending:
                log.warning("%s: %d publishers did not answer the group's join: %s", topic, len(pending),
                            ", ".join(sorted(pending)))
            if not future.done():
                future.set_result(self.handles[topic])

    def next_deadline(self) -> float | None:
        return min((d for _f, _p, d in self._waiting.values()), default=None)

    def check(self) -> None:
        for topic in list(self._waiting):
            self._check_waiting(topic)

    # -- receiving -----------------------------------------------------------------------------------
    def on_frame(self, frame: bytes, recv_ns: int, reject: Callable[[str], None]) -> GroupMembership | None:
        try:
            d = decode_dispatch(frame)
        except EnvelopeError as exc:
            reject(str(exc))
            return None
        state = self.states.get(d.env.topic)
        if state is None:
            return None
        msg = state.on_dispatch(d, recv_ns)
        if msg is None:
            return None
        state.deliveries.append(msg)
        return state

    def flush_deliveries(self, state: GroupMembership) -> None:
        messages, state.deliveries = state.deliveries, []
        handle = self.handles.get(state.topic)
        if handle is not None and messages:
            handle.deliver(messages)

    # -- settling and renewing --------------------------------------------------------------------------
    def send_acks(self, renew: bool = False) -> None:
        """One `gack` per publisher with what was settled since the last (`renew`: to every joined
        publisher, empty or not: the member's lease)."""
        by_endpoint: dict[str, list[list]] = {}
        for state in self.states.values():
            boxes = state.take()
            for pid, entry in state.publishers.items():
                box = boxes.get(pid)
                if box or (renew and pid in state.joined):
                    by_endpoint.setdefault(entry.repair, []).append(
                        [state.topic, state.group, *((box.acked, box.naked, box.dead) if box else ([], [], []))])
        for endpoint, items in by_endpoint.items():
            for i in range(0, len(items), MAX_ACKS):
                chunk = items[i:i + MAX_ACKS]
                self.rpc.send(endpoint, "gack", on_reply=lambda r, e=endpoint: self._acked(r, e),
                              timeout=RPC_TIMEOUT, member=self.member, lease=self.lease, items=chunk)

    def _acked(self, reply: Reply, endpoint: str) -> None:
        """A publisher that does not know us any more (it restarted, or our lease ran out there) is
        joined again."""
        unknown = reply.body.get("unknown") if reply.ok else None
        for item in unknown if isinstance(unknown, list) else []:
            state = self.states.get(item[0]) if isinstance(item, list) and len(item) == 2 else None
            if state is None or state.group != item[1]:
                continue
            entry = next((e for e in state.publishers.values() if e.repair == endpoint), None)
            if entry is not None:
                state.joined.discard(entry.id)
                self._join(state, entry)

    # -- leaving ----------------------------------------------------------------------------------------
    def detach(self, topic: str, close: bool = True) -> None:
        """Leave the topic's group at each publisher; `close=False` leaves the subscription open (a
        pattern's, which other topics still feed)."""
        state = self.states.pop(topic, None)
        handle = self.handles.pop(topic, None)
        if state is None:
            return
        self._send_acks_of(state)
        self.sub().setsockopt(zmq.UNSUBSCRIBE, dispatch_filter(topic, state.group, self.member))
        for entry in state.publishers.values():
            self.rpc.send(entry.repair, "gleave", on_reply=lambda _r: None, timeout=RPC_TIMEOUT,
                          member=self.member, items=[[topic, state.group]])
            self.direct.unref(entry.endpoint)
        waiting = self._waiting.pop(topic, None)
        if waiting is not None and not waiting[0].done():
            waiting[0].cancel()
        if handle is not None and close:
            handle.close()

    def _send_acks_of(self, state: GroupMembership) -> None:
        boxes = state.take()
        for pid, box in boxes.items():
            entry = state.publishers.get(pid)
            if entry is not None:
                self.rpc.send(entry.repair, "gack", on_reply=lambda _r: None, timeout=RPC_TIMEOUT, member=self.member,
                              lease=self.lease, items=[[state.topic, state.group, box.acked, box.naked, box.dead]])
