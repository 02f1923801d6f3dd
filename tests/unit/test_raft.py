"""Raft as a pure state machine (dht/raft.py), driven by a loop that plays the network: messages
delayed, dropped, cut by partitions, members stopped and restarted from what they persisted.

Checked at every tick, whatever the schedule: never two members leading at once (the role, not
only the term: a leader steps down before another can be elected), never two leaders of one term,
and never two histories (every member applies the same entry at each index).

To see these fail: make a quorum half the members (`_quorum` returning `len(self.members) // 2`:
two leaders across an even split), grant a vote without the log check (`up_to_date = True`: a
leader without a committed entry, two histories), commit an older term's entry by counting its
replicas (`_advance_commit` without `self.term_at(n) == self.term`: Figure 8, two histories), let a
member vote within a lease (`_in_lease` returning False, or a vote granting none: a new leader while
the old one still acts), keep a leader leading past its lease (no step-down in `tick`), or campaign
without a pre-vote (a member back from a partition deposes the leader); with compaction, keep the
follower's log whole under an installed snapshot (`keep = self.log` in `_on_snapshot`: two
histories) or send a snapshot's first chunk only (`done` always true: members that never catch up)."""

from __future__ import annotations

import random

import msgpack
import pytest

from dht import raft, raft_snapshots
from dht.raft import (
    HURRY_GAP,
    LEADER,
    Append,
    AppendReply,
    Entry,
    Message,
    NotLeader,
    Raft,
)

E = 10  # election ticks


def pack(entries: list[Entry]) -> bytes:
    """A member's applied entries as its snapshot (the state it folds its log into)."""
    return msgpack.packb([[e.term, e.index, e.data, e.members and list(e.members)] for e in entries])


def unpack(data: bytes) -> list[Entry]:
    return [Entry(t, i, d, m and tuple(m)) for t, i, d, m in msgpack.unpackb(data)]


class Cluster:
    """Members of one group and the network between them, one tick at a time."""

    def __init__(self, n: int, seed: int, delay: int = 1, drop: float = 0.0, compact_every: int = 0) -> None:
        self.rng = random.Random(seed)
        self.ids = self.initial = tuple(f"m{i}" for i in range(n))
        self.delay, self.drop = delay, drop
        self.compact_every = compact_every  # members fold their applied log into a snapshot this often (0: never)
        self.disk: dict[str, tuple[int, str | None, list[Entry]]] = {i: (0, None, []) for i in self.ids}
        self.snapshots: dict[str, tuple | None] = {i: None for i in self.ids}  # what each member persisted
        self.installs = 0  # snapshots members took from a leader
        self.nodes: dict[str, Raft | None] = {i: self._start(i) for i in self.ids}
        self.applied: dict[str, list[Entry]] = {i: [] for i in self.ids}
        self.flight: list[tuple[int, Message]] = []
        self.sides: list[set[str]] = [set(self.ids)]
        self.now = 0
        self.leader_of_term: dict[int, str] = {}
        self.history: dict[int, Entry] = {}  # index -> the entry applied there (by anyone)

    def _start(self, i: str) -> Raft:
        term, vote, log = self.disk[i]
        return Raft(i, self.initial, self.rng.randint, election_ticks=E, term=term, voted_for=vote, log=list(log),
                    snapshot=self.snapshots.get(i))

    def add(self, i: str) -> Raft:
        """A new member's process: it knows the group as it first was, and learns the rest from the log."""
        self.ids += (i,)
        self.disk[i] = (0, None, [])
        self.snapshots[i] = None
        self.applied[i] = []
        self.nodes[i] = self._start(i)
        self.sides[0].add(i)
        return self.nodes[i]

    # -- the network ---------------------------------------------------------------------------------------
    def reachable(self, a: str, b: str) -> bool:
        return any(a in side and b in side for side in self.sides)

    def split(self, *sides: set[str]) -> None:
        self.sides = [set(s) for s in sides]

    def heal(self) -> None:
        self.sides = [set(self.ids)]

    def stop(self, i: str) -> None:
        self.nodes[i] = None

    def restart(self, i: str) -> None:
        self.nodes[i] = self._start(i)
        self.applied[i] = unpack(self.snapshots[i][3]) if self.snapshots[i] else []

    def _collect(self, node: Raft) -> None:
        ready = node.ready()
        term, vote, log = self.disk[node.id]
        if ready.snapshot is not None:  # a leader's: what this member applied becomes what it holds
            self.installs += 1
            self.snapshots[node.id] = node.snapshot
            log = [e for e in log if e.index > node.snap_index]
            restored = unpack(ready.snapshot)
            for entry in restored:
                seen = self.history.setdefault(entry.index, entry)
                assert seen == entry, f"two histories at index {entry.index}: {seen} and {entry}"
            self.applied[node.id] = restored
        if ready.entries:
            log = [e for e in log if e.index < ready.entries[0].index] + ready.entries
        self.disk[node.id] = (ready.term, ready.voted_for, log)
        for entry in ready.committed:
            mine = self.applied[node.id]
            assert entry.index == len(mine) + 1, "applied in order, once"
            mine.append(entry)
            seen = self.history.setdefault(entry.index, entry)
            assert seen == entry, f"two histories at index {entry.index}: {seen} and {entry}"
        if self.compact_every and node.applied - node.snap_index >= self.compact_every:
            node.compact(node.applied, pack(self.applied[node.id]))
            self.snapshots[node.id] = node.snapshot
            self.disk[node.id] = (ready.term, ready.voted_for, [e for e in log if e.index > node.applied])
        for msg in ready.messages:
            if self.rng.random() >= self.drop:
                self.flight.append((self.now + self.rng.randint(0, self.delay), msg))

    def tick(self) -> None:
        self.now += 1
        for node in self.nodes.values():
            if node is not None:
                node.tick()
                self._collect(node)
        while due := [m for m in self.flight if m[0] <= self.now]:
            self.flight = [m for m in self.flight if m[0] > self.now]
            self.rng.shuffle(due)
            for _, msg in due:
                node = self.nodes.get(msg.dst)
                if node is not None and self.reachable(msg.src, msg.dst):
                    node.step(msg)
                    self._collect(node)
        self.check()

    def check(self) -> None:
        leading = [n for n in self.nodes.values() if n is not None and n.role == LEADER]
        assert len(leading) <= 1, f"tick {self.now}: {[(n.id, n.term) for n in leading]} lead at once"
        for n in leading:
            assert self.leader_of_term.setdefault(n.term, n.id) == n.id, f"two leaders of term {n.term}"

    def run(self, ticks: int) -> None:
        for _ in range(ticks):
            self.tick()

    def leader(self) -> Raft | None:
        return next((n for n in self.nodes.values() if n is not None and n.role == LEADER), None)

    def await_leader(self, among: set[str] | None = None, ticks: int = 20 * E) -> Raft:
        for _ in range(ticks):
            self.tick()
            lead = self.leader()
            if lead is not None and (among is None or lead.id in among):
                return lead
        raise AssertionError(f"no leader within {ticks} ticks")


def test_a_group_elects_one_leader_and_every_member_applies_the_same_commands_in_order():
    c = Cluster(5, seed=1)
    lead = c.await_leader()
    for k in range(20):
        lead.propose(f"cmd{k}".encode())
        c.run(1)
    c.run(3 * E)
    datas = {i: [e.data for e in c.applied[i] if e.data] for i in c.ids}
    assert all(d == [f"cmd{k}".encode() for k in range(20)] for d in datas.values()), datas
    follower = next(n for n in c.nodes.values() if n is not lead)
    with pytest.raises(NotLeader) as err:
        follower.propose(b"x")
    assert err.value.leader == lead.id


def test_a_minority_commits_nothing_and_its_leader_steps_down_before_the_majority_elects_another():
    c = Cluster(5, seed=2)
    old = c.await_leader()
    c.run(E)
    others = [i for i in c.ids if i != old.id]
    minority, majority = {old.id, others[0]}, set(others[1:])
    c.split(minority, majority)
    index = old.propose(b"cut off")
    new = c.await_leader(among=majority)  # check() held at every tick: the old one had stepped down
    assert old.role != LEADER and new.term > old.term - 1
    new.propose(b"majority")
    c.run(3 * E)
    assert all(e.data != b"cut off" for e in c.history.values()), "a minority's command never commits"
    c.heal()
    c.run(5 * E)
    assert old.term_at(index) != old.term or old.log[index - 1].data != b"cut off", "overwritten after the heal"
    assert [e.data for e in c.applied[old.id] if e.data] == [b"majority"]


@pytest.mark.parametrize("seed,compact", [(seed, 0) for seed in range(12)] + [(seed, 7) for seed in range(6)])
def test_partitions_losses_and_restarts_never_give_two_leaders_or_two_histories(seed, compact, monkeypatch):
    """With `compact`, members fold their logs into snapshots every few entries (sent in chunks of a
    few bytes): a member back from a partition or a restart catches up from a leader's snapshot."""
    monkeypatch.setattr(raft_snapshots, "SNAPSHOT_CHUNK", 48)
    c = Cluster(5, seed=seed, delay=2, drop=0.05, compact_every=compact)
    rng = random.Random(1000 + seed)
    proposed = 0
    for _ in range(60):
        event = rng.random()
        if event < 0.3:
            ids = list(c.ids)
            rng.shuffle(ids)
            cut = rng.randint(1, 4)
            c.split(set(ids[:cut]), set(ids[cut:]))
        elif event < 0.5:
            c.heal()
        elif event < 0.7:
            victim = rng.choice(c.ids)
            if c.nodes[victim] is None:
                c.restart(victim)
            else:
                c.stop(victim)
        for _ in range(rng.randint(1, 2 * E)):
            lead = c.leader()
            if lead is not None and rng.random() < 0.5:
                lead.propose(f"p{proposed}".encode())
                proposed += 1
            c.tick()
    c.heal()
    for i in c.ids:
        if c.nodes[i] is None:
            c.restart(i)
    lead = c.await_leader()
    lead.propose(b"last")
    c.run(6 * E)
    assert all(c.applied[i] and c.applied[i][-1].data == b"last" for i in c.ids), "all caught up after the heal"
    assert len(c.leader_of_term) >= 2, "the schedule moved leadership"
    assert c.installs > 0 or not compact, "members caught up from snapshots"


def test_figure_8_an_older_terms_entry_is_not_committed_by_counting_its_replicas(monkeypatch):
    """The paper's Figure 8, played message by message: s1 leads term 2 and gets its entry (index 3) to
    s2 only; s5 leads term 3 with an entry nobody else has; s1 leads term 4 and gets index 3 to s3 and
    s4: a majority holds it, but it is not committed, since s5 could still be elected and overwrite it."""
    monkeypatch.setattr(raft, "MAX_APPEND", 1)  # one entry an append: stopped exactly after index 3
    ids = tuple(f"s{i}" for i in range(1, 6))
    rng = random.Random(8)
    nodes = {i: Raft(i, ids, rng.randint, election_ticks=E, term=1, log=[Entry(1, 1, b"first")]) for i in ids}

    def exchange(msgs: list[Message]) -> list[Message]:
        out: list[Message] = []
        for m in msgs:
            nodes[m.dst].step(m)
            out += nodes[m.dst].ready().messages
        return out

    def elect(i: str, term: int, voters: set[str]) -> Raft:
        for n in nodes.values():
            n.since_leader = E  # no vote is within a lease
        n = nodes[i]
        n.term = term - 1
        n._campaign(pre=False)
        exchange([m for m in exchange([m for m in n.ready().messages if m.dst in voters]) if m.dst == i])
        assert n.role == LEADER and n.term == term, i
        n.ready()
        return n

    def replicate(leader: Raft, peer: str, upto: int) -> None:
        while leader.match_index.get(peer, 0) < upto:
            leader._send_append(peer)
            exchange([m for m in exchange([m for m in leader.ready().messages if m.dst == peer]) if m.dst == leader.id])

    s1 = elect("s1", 2, {"s2", "s3"})  # its no-op is index 2
    s1.propose(b"s1-term2")  # index 3
    replicate(s1, "s2", 3)
    elect("s5", 3, {"s3", "s4"}).propose(b"s5-term3")  # index 3 of s5's own
    s1 = elect("s1", 4, {"s2", "s3"})  # its no-op is index 4
    replicate(s1, "s3", 3)
    replicate(s1, "s4", 3)
    assert [e.term for e in nodes["s4"].log] == [1, 2, 2] and s1.match_index["s4"] == 3
    assert s1.commit < 3, "index 3 (term 2) is on s1, s3 and s4, a majority, but not committed by counting"
    replicate(s1, "s3", 4)
    replicate(s1, "s4", 4)
    assert s1.commit == 4, "committed with an entry of its own term"


def test_a_member_back_from_isolation_does_not_depose_a_leader_the_majority_still_hears():
    """Cut off for three election timeouts, a member's timer fires again and again, but it only asks
    whether it could win (pre-vote) and never raises its term: when it comes back, the leader the
    majority kept hearing stays the leader, of the same term."""
    c = Cluster(5, seed=3)
    lead = c.await_leader()
    c.run(E)
    loner = next(i for i in c.ids if i != lead.id)
    c.split({loner}, set(c.ids) - {loner})
    term = lead.term
    c.run(3 * E)
    assert c.nodes[loner].term == term, "no term raised while alone"
    c.heal()
    c.run(3 * E)
    assert c.leader() is lead and lead.term == term, "the leader a majority hears is not disturbed"


def test_a_vote_is_a_lease_an_isolated_new_leader_is_the_only_one_until_it_steps_down():
    """m0 is elected by m1 and m2 and cut off at once, before any append of its own gets out. m3,
    which never heard m0's request, campaigns with m1, m2 and m4: m1 and m2 voted within a lease and
    refuse, so m3 cannot win while m0 may still act; m0 steps down within its lease."""
    ids = tuple(f"m{i}" for i in range(5))
    rng = random.Random(4)
    nodes = {i: Raft(i, ids, rng.randint, election_ticks=E) for i in ids}
    for n in nodes.values():
        n.since_leader = E  # a fresh group: nobody within a lease

    def exchange(msgs: list[Message], to: set[str]) -> list[Message]:
        out: list[Message] = []
        for m in msgs:
            if m.dst in to:
                nodes[m.dst].step(m)
                out += nodes[m.dst].ready().messages
        return out

    m0 = nodes["m0"]
    m0._campaign(pre=False)
    exchange(exchange(m0.ready().messages, {"m1", "m2"}), {"m0"})
    assert m0.role == LEADER
    m0.ready()  # its appends are lost: it is cut off
    m3 = nodes["m3"]
    m3._campaign(pre=True)
    replies = exchange(m3.ready().messages, {"m1", "m2", "m4"})
    exchange(replies, {"m3"})
    m3._campaign(pre=False)
    exchange(exchange(m3.ready().messages, {"m1", "m2", "m4"}), {"m3"})
    assert m3.role != LEADER, "m1 and m2 voted for m0 within a lease: no second leader"
    for _ in range(E):
        m0.tick()
    assert m0.role != LEADER, "alone, m0 steps down within a lease"


def test_a_reordered_append_or_refusal_moves_nothing_back():
    """Messages overtake each other: an old append that matches less than a follower already holds
    does not lower its commit index, and an old refusal does not send the leader back below what the
    follower matched (found by the random schedules: a follower re-sent its log from 1 forever)."""
    c = Cluster(3, seed=6)
    lead = c.await_leader()
    for k in range(5):
        lead.propose(f"c{k}".encode())
    c.run(2 * E)
    follower = next(n for n in c.nodes.values() if n is not lead)
    assert follower.commit == lead.commit == 6
    follower.step(Append(lead.id, follower.id, lead.term, 0, 0, tuple(lead.log[:2]), lead.commit + 1, lead.now))
    assert follower.commit == 6, "an append matching two entries does not undo six"
    lead.step(AppendReply(follower.id, lead.id, lead.term, False, 1, 0))
    assert lead.next_index[follower.id] == lead.match_index[follower.id] + 1 == 7


def test_followers_that_see_their_leader_die_elect_another_within_a_few_ticks():
    """`leader_gone` (the caller saw the leader's process die): the survivors stand one after another,
    HURRY_GAP ticks apart in the members' order, and vote without waiting out the dead leader's lease,
    so a new leader comes within a few ticks, not an election timeout (10-19); an append the dead leader
    sent before it died, read afterwards, neither brings it back as leader nor restarts its lease. To
    see it fail, let `leader_gone` do nothing, or drop the `gone` check in `_heard_leader`."""
    c = Cluster(3, seed=5)
    old = c.await_leader()
    old.propose(b"before")
    c.run(3)
    late = [m for _, m in c.flight if m.src == old.id and isinstance(m, Append)]
    late = late or [Append(old.id, i, old.term, old.last_index, old.last_term, (), old.commit, old.now)
                    for i in c.ids if i != old.id]
    c.stop(old.id)
    c.flight = []
    survivors = [c.nodes[i] for i in c.ids if i != old.id]
    assert all(n.leader_gone(old.id) for n in survivors)
    for msg in late:  # what it sent before it died, read after
        c.nodes[msg.dst].step(msg)
    assert all(n.leader is None and not n._in_lease() for n in survivors)
    new = c.await_leader(ticks=2 + HURRY_GAP)
    assert new.id != old.id and new.term == old.term + 1
