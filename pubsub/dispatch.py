"""Work sharing at the publisher: which member of a consumer group gets each message, by credit.

Pure (no sockets, no clocks: callers pass `now`). A publication keeps one `GroupDispatch` per group
of its topic (pubsub/groups.py drives them from the client's threads). Each message of the topic is
offered to every group; a group hands it to exactly one of its live members, and takes it back when
that member naks it, does not ack it within `ack_wait`, or is gone (its lease ran out, or its
connection closed), to hand it to another with its delivery count one higher. After `max_deliver`
deliveries a message is dead-lettered instead of sent again. At-least-once: a message can reach a
second member only after the first failed it, timed out or was lost, and then it says so
(`deliveries` > 1).

- **Credit** (NATS JetStream's max ack pending, RabbitMQ's basic.qos prefetch): a member has at most
  `prefetch` unacknowledged messages from this publisher; among members with free credit the one
  with the most free share (in flight / prefetch) goes first, ties to the one served longest ago, so
  a slow member gets less and none hoards.
- **Backlog**: what no member can take yet waits here, by priority (0..9, default 4). The highest
  waiting priority goes first, but every `SHARE`-th message is the oldest of the lower priorities
  (a fixed share, as RabbitMQ quorum queues do), so nothing starves. A requeued message goes back to
  the front of its priority. The backlog holds references to the publication's retained messages; it
  is bounded by the publisher's retention: what retention lets go is `dropped` (dead-lettered as a
  range by the caller), never silently.
- **Key order** (`ordering="key"`; Pulsar's key_shared, Kafka's partitions by key): every message of a
  key goes to one member at a time, in publish order. A key's member is chosen by rendezvous hashing
  (Thaler and Ravishankar, 1998) over the live members, so a departing member's keys move and a new
  member takes ~1/n of the keys, while every other key stays where it is; and a key with messages in
  flight stays with that member until they are acked or taken back (`_pinned`), so its order holds
  across the move. Messages of a key wait behind the key's earlier ones; other keys go on (no
  group-wide pause).

Long because one group's state at one publisher is one invariant (each message with exactly one
member, or waiting, or dead-lettered): credit, keys, priorities and redelivery all move the same
in-flight sets, and split apart they would each need the others' internals.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from pubsub.envelope import Envelope

PRIORITIES = 10
DEFAULT_PRIORITY = 4
SHARE = 5  # every SHARE-th pick from a backlog serves the oldest message below the top priority
ORDERINGS = ("none", "key")
DEFAULT_PREFETCH = 100
DEFAULT_ACK_WAIT = 30.0
DEFAULT_MAX_DELIVER = 5
MAX_PREFETCH = 10_000  # the PUB socket's high-water mark per subscriber (pubsub/publishing.py): credit never exceeds it
MAX_SEQS = 10_000  # seqs in one ack message, of one group (credit bounds what a member holds)
_GROUP = re.compile(r"^[A-Za-z0-9._:@-]{1,128}$")


def check_group(name: object) -> str:
    """A group's name: 1..128 letters, digits and . _ : @ - (it is part of a record field's name)."""
    if not isinstance(name, str) or not _GROUP.match(name):
        raise ValueError(f"a group name is 1..128 of the characters A-Z a-z 0-9 . _ : @ -, got {name!r}")
    return name


@dataclass(frozen=True)
class GroupTerms:
    """What a member asks of its group. `ordering` and `durable` are the group's, fixed by the member
    that made it: a member asking otherwise is refused. `max_deliver` is the group's too (a later
    member's other value is ignored, and the caller says so); `ack_wait` is each member's own."""

    ordering: str = "none"
    ack_wait: float = DEFAULT_ACK_WAIT
    max_deliver: int = DEFAULT_MAX_DELIVER
    durable: bool = False


@dataclass
class InFlight:
    member: str
    deadline: float


@dataclass
class Member:
    id: str
    prefetch: int
    terms: GroupTerms
    lease_until: float
    connected: bool = False  # its filter is at our PUB socket: what we send reaches it
    in_flight: dict[int, InFlight] = field(default_factory=dict)  # seq -> when it times out
    served_at: int = 0  # the dispatch counter when it last got a message (ties go to the longest idle)
    delivered: int = 0
    redelivered: int = 0
    acked: int = 0
    principal: str | None = None  # the key that joined it (CurveZMQ): only it speaks for the member

    @property
    def free(self) -> int:
        return self.prefetch - len(self.in_flight)


@dataclass(frozen=True)
class Send:
    """Send `env` to `member`, its `deliveries`-th delivery."""

    member: str
    env: Envelope
    deliveries: int


@dataclass(frozen=True)
class Dropped:
    """Messages this group will never deliver: seqs lo..hi, and why (the caller dead-letters them)."""

    lo: int
    hi: int
    reason: str
    env: Envelope | None = None  # one message that reached max_deliver: its payload goes with it


class PriorityBacklog:
    """Seqs waiting, one FIFO per priority; requeued ones at the front of theirs."""

    def __init__(self) -> None:
        self._queues: list[deque[int]] = [deque() for _ in range(PRIORITIES)]
        self._picks = 0

    def push(self, seq: int, priority: int) -> None:
        self._queues[priority].append(seq)

    def push_front(self, seq: int, priority: int) -> None:
        self._queues[priority].appendleft(seq)

    def __len__(self) -> int:
        return sum(map(len, self._queues))

    def pop(self, wanted) -> int | None:  # noqa: ANN001 - wanted(seq) -> bool: still to be sent
        """The next seq to send (stale entries, for which `wanted` is False, are skipped and dropped)."""
        self._picks += 1
        share = self._picks % SHARE == 0
        while True:
            levels = [p for p in range(PRIORITIES - 1, -1, -1) if self._queues[p]]
            if not levels:
                return None
            level = levels[0]
            if share and len(levels) > 1:  # the oldest message below the top priority
                level = min(levels[1:], key=lambda p: self._queues[p][0])
            seq = self._queues[level].popleft()
            if wanted(seq):
                return seq


class GroupDispatch:
    """One consumer group of one publication: its members, what they hold, what waits."""

    def __init__(self, name: str, terms: GroupTerms | None = None) -> None:
        self.name = name
        self.terms = terms or GroupTerms()
        self.members: dict[str, Member] = {}
        self.pending: dict[int, Envelope] = {}  # every message not yet done with: waiting or in flight
        self.deliveries: dict[int, int] = {}  # seq -> times sent so far
        self.backlog = PriorityBacklog()  # ordering "none", and keyless messages of a keyed group
        self._key_waiting: dict[str, deque[int]] = {}  # key -> its waiting seqs, in publish order
        self._key_ready: dict[str, list[OrderedDict[str, None]]] = {}  # member -> keys waiting for it, by priority
        self._key_target: dict[str, str] = {}  # a waiting key -> the member it waits for
        self._pinned: dict[str, tuple[str, int]] = {}  # key -> (member, messages of it in flight there)
        self._picks = 0
        self._keyed_picks = 0
        self.dispatched = 0
        self.highest_sent = 0  # the newest seq ever handed to a member
        self.dead_lettered = 0
        self.idle_since: float | None = None  # when its last member went

    # -- members -------------------------------------------------------------------------------------
    def refusal(self, terms: GroupTerms) -> str | None:
        """Why a member with these terms cannot join (None: it can)."""
        if terms.ordering != self.terms.ordering:
            return (f"group {self.name!r} is ordered by {self.terms.ordering!r}; a member asked for "
                    f"ordering={terms.ordering!r}")
        if terms.durable != self.terms.durable:
            return f"group {self.name!r} is {'' if self.terms.durable else 'not '}durable; a member asked otherwise"
        return None

    def join(self, member: str, prefetch: int, terms: GroupTerms, lease: float, now: float) -> None:
        """A member said it is here (its join, or any ack: each renews its lease); `refusal` first."""
        m = self.members.get(member)
        if m is None:
            self.members[member] = Member(member, prefetch, terms, now + lease)
        else:
            m.prefetch, m.terms, m.lease_until = prefetch, terms, now + lease
        self.idle_since = None

    def connect(self, member: str, on: bool, now: float) -> list[Dropped]:
        """Its filter arrived at our PUB socket (on), or left it: its connection closed (off)."""
        m = self.members.get(member)
        if m is None or m.connected == on:
            return []
        if on:
            m.connected = True
            self._retarget()
            return []
        return self.leave(member, now)

    def leave(self, member: str, now: float) -> list[Dropped]:
        """Gone (it left, its lease ran out, its connection closed): what it held goes to the others."""
        m = self.members.pop(member, None)
        if m is None:
            return []
        dropped = self._take_back(m, list(m.in_flight), now)
        if not self.members:
            self.idle_since = now
        self._retarget()
        return dropped

    @property
    def live(self) -> list[Member]:
        return [m for m in self.members.values() if m.connected]

    # -- messages ------------------------------------------------------------------------------------
    def offer(self, env: Envelope) -> None:
        """A new message of the topic (or one a restarted publisher still owes the group)."""
        self.pending[env.seq] = env
        self.deliveries.setdefault(env.seq, 0)
        self._enqueue(env, front=False)

    def _enqueue(self, env: Envelope, front: bool) -> None:
        if self.terms.ordering != "key" or env.key is None:
            (self.backlog.push_front if front else self.backlog.push)(env.seq, env.priority)
            return
        waiting = self._key_waiting.get(env.key)
        if waiting is None:
            waiting = self._key_waiting[env.key] = deque()
        if front:
            waiting.appendleft(env.seq)
            self._key_unready(env.key)
        else:
            waiting.append(env.seq)
            if len(waiting) > 1:
                return  # behind the key's earlier messages
        self._key_place(env.key)

    def ack(self, member: str, seqs: list[int]) -> int:
        """Done with (acked, or dead-lettered by the member on its last delivery); returns how many
        were in flight at that member (a late ack of a message taken back counts nothing)."""
        m = self.members.get(member)
        if m is None:
            return 0
        done = 0
        for seq in seqs:
            if m.in_flight.pop(seq, None) is None:
                continue
            done += 1
            m.acked += 1
            env = self.pending.pop(seq, None)
            self.deliveries.pop(seq, None)
            if env is not None and env.key is not None:
                self._unpin(env.key)
        return done

    def nak(self, member: str, seqs: list[int], now: float) -> list[Dropped]:
        """The member asks for redelivery now (its handler failed)."""
        m = self.members.get(member)
        return [] if m is None else self._take_back(m, [s for s in seqs if s in m.in_flight], now)

    def expire(self, now: float) -> list[Dropped]:
        """Messages held past `ack_wait` are taken back; members whose lease ran out are gone."""
        dropped: list[Dropped] = []
        for m in list(self.members.values()):
            if m.lease_until <= now:
                dropped += self.leave(m.id, now)
                continue
            late = [seq for seq, f in m.in_flight.items() if f.deadline <= now]
            if late:
                dropped += self._take_back(m, late, now)
        return dropped

    def _take_back(self, m: Member, seqs: list[int], now: float) -> list[Dropped]:
        dropped = []
        for seq in sorted(seqs, reverse=True):  # back to the front in seq order
            if m.in_flight.pop(seq, None) is None:
                continue
            env = self.pending.get(seq)
            if env is None:
                continue
            if env.key is not None:
                self._unpin(env.key)
            if self.deliveries.get(seq, 0) >= self.terms.max_deliver:
                dropped.append(self._drop_one(env, f"not acknowledged after {self.deliveries[seq]} deliveries "
                                                   f"(max_deliver {self.terms.max_deliver})"))
                continue
            self._enqueue(env, front=True)
        return dropped

    def _drop_one(self, env: Envelope, reason: str) -> Dropped:
        self.pending.pop(env.seq, None)
        self.deliveries.pop(env.seq, None)
        self.dead_lettered += 1
        return Dropped(env.seq, env.seq, reason, env)

    def trimmed(self, first_seq: int) -> list[Dropped]:
        """Retention let go of every message before `first_seq`: those this group still owed are lost
        to it (ranges), unless in flight (the member has them; an ack is still welcome)."""
        gone = sorted(s for s in self.pending if s < first_seq
                      and not any(s in m.in_flight for m in self.members.values()))
        for seq in gone:
            env = self.pending.pop(seq)
            self.deliveries.pop(seq, None)
            waiting = self._key_waiting.get(env.key) if env.key is not None else None
            if waiting is not None and seq in waiting:
                waiting.remove(seq)
                self._key_unready(env.key)
                if waiting:
                    self._key_place(env.key)
                else:
                    del self._key_waiting[env.key]
        self.dead_lettered += len(gone)
        return [Dropped(lo, hi, "fell out of the publisher's retention before a member took it")
                for lo, hi in _ranges(gone)]

    # -- what to send now ------------------------------------------------------------------------------
    def sends(self, now: float) -> list[Send]:
        """Hand waiting messages to members with free credit, as far as credit goes."""
        out: list[Send] = []
        if self.terms.ordering == "key":
            self._send_keyed(now, out)
        while self.backlog and (member := self._most_free()) is not None:
            seq = self.backlog.pop(self._wanted)
            if seq is None:
                break
            out.append(self._send(member, self.pending[seq], now))
        return out

    def _wanted(self, seq: int) -> bool:
        return seq in self.pending and not any(seq in m.in_flight for m in self.members.values())

    def _most_free(self) -> Member | None:
        best = None
        for m in self.members.values():
            if m.connected and m.free > 0 and (
                    best is None or (len(m.in_flight) * best.prefetch, m.served_at)
                    < (len(best.in_flight) * m.prefetch, best.served_at)):
                best = m
        return best

    def _send(self, m: Member, env: Envelope, now: float) -> Send:
        self._picks += 1
        m.served_at = self._picks
        m.in_flight[env.seq] = InFlight(m.id, now + m.terms.ack_wait)
        n = self.deliveries.get(env.seq, 0) + 1
        self.deliveries[env.seq] = n
        m.delivered += 1
        if n > 1:
            m.redelivered += 1
        self.dispatched += 1
        self.highest_sent = max(self.highest_sent, env.seq)
        if env.key is not None and self.terms.ordering == "key":
            self._pinned[env.key] = (m.id, self._pinned.get(env.key, (m.id, 0))[1] + 1)
        return Send(m.id, env, n)

    # -- keys ---------------------------------------------------------------------------------------------
    def target(self, key: str) -> str | None:
        """The member a key goes to now: where it has messages in flight, else by rendezvous hashing
        over the connected members."""
        pinned = self._pinned.get(key)
        if pinned is not None:
            return pinned[0]
        live = [m.id for m in self.members.values() if m.connected]
        return max(live, key=lambda mid: _weight(key, mid)) if live else None

    def _unpin(self, key: str) -> None:
        member, count = self._pinned.get(key, ("", 0))
        if count <= 1:
            self._pinned.pop(key, None)
            if key in self._key_waiting:
                self._key_unready(key)
                self._key_place(key)  # free to move now
        else:
            self._pinned[key] = (member, count - 1)

    def _key_place(self, key: str) -> None:
        """Make a waiting key ready at its target member (by the priority of its first message)."""
        target = self.target(key)
        if target is None:
            return
        head = self.pending[self._key_waiting[key][0]]
        ready = self._key_ready.setdefault(target, [OrderedDict() for _ in range(PRIORITIES)])
        ready[head.priority][key] = None
        self._key_target[key] = target

    def _key_unready(self, key: str) -> None:
        target = self._key_target.pop(key, None)
        if target is not None:
            for level in self._key_ready.get(target, []):
                level.pop(key, None)

    def _retarget(self) -> None:
        """Members changed: every waiting key that is not pinned finds its member again."""
        if self.terms.ordering != "key":
            return
        self._key_ready.clear()
        self._key_target.clear()
        for key in self._key_waiting:
            self._key_place(key)

    def _send_keyed(self, now: float, out: list[Send]) -> None:
        for m in list(self.members.values()):
            ready = self._key_ready.get(m.id)
            while ready and m.connected and m.free > 0:
                levels = [lv for lv in reversed(ready) if lv]
                if not levels:
                    break
                self._keyed_picks += 1
                level = levels[-1] if self._keyed_picks % SHARE == 0 else levels[0]  # the lower ones' share
                key = next(iter(level))
                waiting = self._key_waiting[key]
                seq = waiting.popleft()
                del level[key]
                self._key_target.pop(key, None)
                out.append(self._send(m, self.pending[seq], now))
                if waiting:
                    self._key_place(key)
                else:
                    del self._key_waiting[key]

    # -- figures ---------------------------------------------------------------------------------------------
    @property
    def waiting(self) -> int:
        """Messages waiting for a member (the backlog), in flight excluded."""
        in_flight = sum(len(m.in_flight) for m in self.members.values())
        return len(self.pending) - in_flight

    @property
    def floor(self) -> int | None:
        """Every seq below this one is done with (None: nothing pending)."""
        return min(self.pending) if self.pending else None

    def stats(self) -> dict:
        return {"members": {m.id: {"in_flight": len(m.in_flight), "prefetch": m.prefetch, "delivered": m.delivered,
                                   "redelivered": m.redelivered, "acked": m.acked, "connected": m.connected}
                            for m in sorted(self.members.values(), key=lambda m: m.id)},
                "backlog": self.waiting, "dispatched": self.dispatched, "dead_lettered": self.dead_lettered,
                "ordering": self.terms.ordering, "durable": self.terms.durable}


def _weight(key: str, member: str) -> int:
    """Rendezvous (highest random weight) hashing: the member with the largest weight owns the key."""
    return int.from_bytes(hashlib.blake2b(f"{key}\x00{member}".encode(), digest_size=8).digest(), "big")


def _ranges(seqs: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s in seqs:
        if out and s == out[-1][1] + 1:
            out[-1] = (out[-1][0], s)
        else:
            out.append((s, s))
    return out
