"""A publisher's consumer groups: every group of every topic it publishes, driven from its threads.

The dispatch decisions are pubsub/dispatch.py's (pure); this module keeps one `GroupDispatch` per
(topic, group), feeds it what happens, and turns its decisions into dispatch frames for the PUB
socket (pubsub/envelope.py), dead letters, and the retention every group needs. Everything here runs
under the publishing lock (pubsub/publishing.py), from whichever thread holds it: the application's
`publish()`, the journal's thread, the io loop serving members' joins and acks, and its tick.

Members come and go by:
- `join` (a member's request to our service, and each of its acks renews its lease, which lasts
  three of its heartbeats);
- their filter at our PUB socket: it arrives when the member's SUB connects (nothing is sent to a
  member before: it would be lost) and leaves when that connection closes — a member killed is
  known within a tick, and what it held goes to the others at once;
- `leave` (a member that unsubscribes or closes).
A group's backlog is kept in the publication's history (each group holds its oldest pending
message there as a durable subscriber holds its position), so it is bounded by the publisher's
retention; what retention lets go is dead-lettered as a range. A group that is not durable and
has had no member for `IDLE_GRACE` seconds is forgotten, its backlog dead-lettered as a range; a
durable one (its members asked `durable=True`) is kept with the publisher's data directory and
survives its restart.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import msgpack

from pubsub.dispatch import Dropped, GroupDispatch, GroupTerms
from pubsub.durable import DataDir
from pubsub.envelope import Envelope, encode_dispatch, parse_dispatch_filter
from pubsub.message import DeadLetter
from pubsub.publication import Publication

log = logging.getLogger(__name__)

IDLE_GRACE = 30.0  # seconds a group with no member keeps its backlog (not durable)
MAX_GROUPS = 256  # consumer groups per topic at one publisher
MAX_MEMBERS = 1024  # members per group at one publisher
MAX_FILTERS = 65_536  # members' dispatch filters remembered at our PUB socket
HOLD_PREFIX = "//group/"  # a group's name among the history's acknowledged positions (no client id starts so)


class PublisherGroups:
    def __init__(self, publisher: str, data: DataDir | None,
                 publications: dict[str, Publication], send: Callable[[bytes], None]) -> None:
        self.publisher = publisher
        self.data = data
        self.publications = publications
        self._send = send  # a frame onto the direct PUB socket (the caller holds the lock)
        self.groups: dict[str, dict[str, GroupDispatch]] = {}  # topic -> group -> its dispatch
        self.filters: set[tuple[str, str, str]] = set()  # (topic, group, member) filters at our PUB socket
        self.dead: list[DeadLetter] = []  # to be handed on outside the lock (the io loop's tick)
        self._packer = msgpack.Packer(use_bin_type=True)
        self._saved: dict[tuple[str, str], tuple[int, int]] = {}  # durable groups' (floor, sent) on disk

    def get(self, topic: str, group: str) -> GroupDispatch | None:
        return self.groups.get(topic, {}).get(group)

    def items(self) -> list[tuple[str, str, GroupDispatch]]:
        return [(t, name, g) for t, gs in self.groups.items() for name, g in gs.items()]

    # -- members ----------------------------------------------------------------------------------------
    def join(self, topic: str, group: str, member: str, prefetch: int, terms: GroupTerms, lease: float,
             principal: str | None = None) -> str | None:
        """A member is here (or still is); returns why it is refused, or None. A member joined by one
        principal (its CURVE key) is acked, naked and left only by that principal."""
        pub = self.publications.get(topic)
        if pub is None:
            return f"{self.publisher} does not publish {topic!r}"
        if pub.mode != "direct":
            return f"{topic!r} is published in relay mode here: consumer groups are dispatched directly"
        g = self.get(topic, group)
        if g is None and len(self.groups.get(topic, {})) >= MAX_GROUPS:
            return f"{topic!r} has {MAX_GROUPS} consumer groups at this publisher already"
        if g is not None and member not in g.members and len(g.members) >= MAX_MEMBERS:
            return f"group {group!r} of {topic!r} has {MAX_MEMBERS} members at this publisher already"
        if g is None or (not g.members and not g.terms.durable and g.refusal(terms)):
            g = self._make(pub, group, terms, pending=g)  # (an idle group takes the new terms)
        refusal = g.refusal(terms)
        if refusal is not None:
            return refusal
        if terms.max_deliver != g.terms.max_deliver and member not in g.members:
            log.warning("%s: group %s delivers a message at most %d times (a member asked %d)", topic, group,
                        g.terms.max_deliver, terms.max_deliver)
        held = g.members.get(member)
        if held is not None and held.principal != principal:
            return f"member {member!r} of group {group!r} belongs to another key"
        now = time.monotonic()
        g.join(member, prefetch, terms, lease, now)
        g.members[member].principal = principal
        if (topic, group, member) in self.filters:
            g.connect(member, True, now)
        self._flush(topic, group, g, now)
        return None

    def expect(self, topic: str, group: str, terms: GroupTerms) -> None:
        """The topic's record lists this group: it is owed our messages from now on, before any of
        its members joins us."""
        pub = self.publications.get(topic)
        if pub is not None and self.get(topic, group) is None and len(self.groups.get(topic, {})) < MAX_GROUPS:
            self._make(pub, group, terms)

    def _make(self, pub: Publication, group: str, terms: GroupTerms, floor: int | None = None, sent: int = 0,
              pending: GroupDispatch | None = None) -> GroupDispatch:
        """A group new to us: it is owed every message from now on; a restored durable one, what its
        floor says it still lacks (those up to `sent` may have reached a member before, and say so);
        an idle one remade with other terms, what it was owed."""
        g = self.groups.setdefault(pub.topic, {})[group] = GroupDispatch(group, terms)
        g.idle_since = time.monotonic()
        owed = (pub.history.range(floor + 1, None, limit=pub.history.bounds.messages) if floor is not None
                else [pending.pending[s] for s in sorted(pending.pending)] if pending is not None else [])
        for env in owed:
            g.offer(env)
            if env.seq <= sent:
                g.deliveries[env.seq] = 1
        self._hold(pub, group, g)
        log.info("%s: group %s (%s order%s) joins this publisher", pub.topic, group, terms.ordering,
                 ", durable" if terms.durable else "")
        return g

    def filter(self, raw: bytes, on: bool) -> bool:
        """A subscription (on) or its end (off) at our PUB socket: a member's dispatch filter? Then its
        connection is up or gone. Returns False for any other filter."""
        address = parse_dispatch_filter(raw)
        if address is None:
            return False
        if not on:
            self.filters.discard(address)
        elif len(self.filters) < MAX_FILTERS:
            self.filters.add(address)
        topic, group, member = address
        g = self.get(topic, group)
        if g is not None:
            now = time.monotonic()
            self._dropped(topic, group, g.connect(member, on, now))
            self._flush(topic, group, g, now)
        return True

    def filter_lost(self, topic: str, group: str, member: str) -> None:
        """A member's connection is gone though no filter said so (our socket was bound again)."""
        g = self.get(topic, group)
        if g is not None:
            self._dropped(topic, group, g.connect(member, False, time.monotonic()))

    def acks(self, member: str, items: list[tuple[str, str, list[int], list[int], list[int]]],
             lease: float, principal: str | None = None) -> list[list[str]]:
        """A member's batch: per (topic, group) the seqs it acked, naked, and dead-lettered itself
        (on their last delivery); each renews its lease. Returns the [topic, group] that do not know
        the member (we restarted, or its lease ran out): it should join again."""
        now, unknown = time.monotonic(), []
        for topic, group, acked, naked, dead in items:
            g = self.get(topic, group)
            if g is None or member not in g.members:
                unknown.append([topic, group])
                continue
            if g.members[member].principal != principal:
                continue  # another key speaking for this member: not heard
            g.members[member].lease_until = now + lease
            g.ack(member, acked)
            g.dead_lettered += g.ack(member, dead)
            self._dropped(topic, group, g.nak(member, naked, now))
            self._flush(topic, group, g, now)
        return unknown

    def leave(self, member: str, items: list[tuple[str, str]], principal: str | None = None) -> None:
        now = time.monotonic()
        for topic, group in items:
            g = self.get(topic, group)
            if g is not None and member in g.members and g.members[member].principal == principal:
                self._dropped(topic, group, g.leave(member, now))
                self._flush(topic, group, g, now)

    # -- messages ---------------------------------------------------------------------------------------
    def offer(self, env: Envelope) -> None:
        """A message was just sent to the plain subscribers: each group of its topic gets its copy."""
        groups = self.groups.get(env.topic)
        if not groups:
            return
        now = time.monotonic()
        for group, g in groups.items():
            g.offer(env)
            self._flush(env.topic, group, g, now)

    def _flush(self, topic: str, group: str, g: GroupDispatch, now: float) -> None:
        for s in g.sends(now):
            self._send(encode_dispatch(s.env, group, s.member, s.deliveries, g.terms.max_deliver, self._packer))

    def tick(self) -> None:
        """Every few tens of milliseconds (the io loop): ack waits and leases run out, idle groups go,
        retention moves, durable groups' positions are saved."""
        now = time.monotonic()
        for topic, group, g in self.items():
            self._dropped(topic, group, g.expire(now))
            pub = self.publications.get(topic)
            if pub is None:
                del self.groups[topic][group]
                continue
            if g.pending and min(g.pending) < pub.history.first_seq:
                self._dropped(topic, group, g.trimmed(pub.history.first_seq))
            if (not g.terms.durable and not g.members and g.idle_since is not None
                    and now - g.idle_since >= IDLE_GRACE):
                self._forget(pub, group, g)
                continue
            self._hold(pub, group, g)
            self._flush(topic, group, g, now)

    def _forget(self, pub: Publication, group: str, g: GroupDispatch) -> None:
        gone = sorted(g.pending)
        if gone:
            g.trimmed(gone[-1] + 1)
            self.dead.append(DeadLetter(pub.topic, self.publisher, f"group:{group}", gone[0], gone[-1],
                                        f"the group had no member for {IDLE_GRACE:g}s", time.time()))
        pub.history.release(HOLD_PREFIX + group)
        del self.groups[pub.topic][group]
        log.warning("%s: group %s forgotten after %gs without a member", pub.topic, group, IDLE_GRACE)

    def _hold(self, pub: Publication, group: str, g: GroupDispatch) -> None:
        """The history keeps what the group still owes (its floor), as for a durable subscriber; a
        durable group's floor and the highest seq it sent are saved (at most once a tick)."""
        floor = (g.floor or pub.history.last_seq + 1) - 1
        pub.history.ack(HOLD_PREFIX + group, floor)
        if g.terms.durable and self.data is not None:
            state = (floor, max(g.highest_sent, self._saved.get((pub.topic, group), (0, 0))[1]))
            if self._saved.get((pub.topic, group)) != state:
                self._saved[(pub.topic, group)] = state
                self.data.save_group(pub.topic, group, g.terms.ordering, g.terms.max_deliver, *state)

    def restore(self, pub: Publication) -> None:
        """A restarted publisher takes its durable groups back from its data directory."""
        if self.data is None:
            return
        for group, ordering, max_deliver, floor, sent in self.data.groups(pub.topic):
            g = self._make(pub, group, GroupTerms(ordering, max_deliver=max_deliver, durable=True), floor, sent)
            self._saved[(pub.topic, group)] = (floor, sent)
            log.info("%s: durable group %s restored with %d messages owed", pub.topic, group, len(g.pending))

    def _dropped(self, topic: str, group: str, dropped: list[Dropped]) -> None:
        for d in dropped:
            letter = DeadLetter(topic, self.publisher, f"group:{group}", d.lo, d.hi, d.reason, time.time(),
                                d.env.payload if d.env is not None else None,
                                d.env.sent_ns if d.env is not None else None)
            log.warning("dead letter: %s", letter)
            self.dead.append(letter)

    def owing(self) -> int:
        """Messages groups that are not durable still lack (what a closing publisher waits for: their
        members may be joining us still)."""
        return sum(len(g.pending) for _t, _n, g in self.items() if not g.terms.durable)

    def abandon(self) -> list[DeadLetter]:
        """The publisher closes: what groups that are not durable still lack is lost to them, and said
        (a durable group's backlog stays in the data directory for the restarted publisher)."""
        letters = []
        for topic, group, g in self.items():
            gone = sorted(g.pending)
            if gone and not (g.terms.durable and self.data is not None):
                letters.append(DeadLetter(topic, self.publisher, f"group:{group}", gone[0], gone[-1],
                                          f"the publisher closed with {len(gone)} messages the group had not "
                                          "acknowledged", time.time()))
        return letters

    def stats(self, topic: str) -> dict:
        return {group: g.stats() for group, g in sorted(self.groups.get(topic, {}).items())}
