"""Raft (Ongaro & Ousterhout, USENIX ATC'14) as a pure state machine: no sockets, no clocks, no threads.

The caller owns time and the network, as with etcd-io/raft: it calls `tick()` at a fixed period,
`step(message)` for each message that arrives, `propose(data)` for a command, and after each call
takes `ready()`: the hard state and the log entries to make durable (before anything is sent), the
messages to send, and the entries now committed, to apply in order. That keeps every rule below
testable by a loop that plays the network (tests/unit/test_raft.py) and lets the node drive one
group per arc with its existing transport.

What is here, by the paper's sections:
- leader election (§5.2) with randomized election timeouts, and pre-vote (thesis §9.6): a node cut
  off from its group asks first whether it could win, so it does not raise the term of the others
  when it comes back;
- log replication (§5.3) with the consistency check and the leader's back-off to a follower's log. A
  command proposed while a follower has an append unanswered goes to it with that append's reply (or
  the next heartbeat), not in an append of its own: with sixteen clients' commands under way, an
  append for each carried every entry not yet answered again, and a follower still decoding them saw
  its leader's death late (etcd's flow control does the same);
- safety (§5.4): a vote only for a candidate whose log is at least as up to date, and a leader commits
  by counting replicas only for an entry of its own term (§5.4.2, Figure 8);
- leases (thesis §6.4): a member that heard from a leader within `election_ticks` neither votes nor
  lets a candidate raise its term (and a member that starts waits that long too: it may have heard
  from one just before it stopped). So once a majority has answered an append the leader sent at
  tick t, no other leader can be elected before t + `election_ticks`: the leader is certainly the
  only one until then (`lease_ticks()`), and it steps down when that time passes without a newer
  majority, before any other member could be elected (ticks of equal length at every member: the
  caller's clocks may drift by less than the `drift_ticks` margin). Nothing outside relies on that
  certainty (reads go through the log): a member whose caller saw the leader's process die gives up
  its lease at once (`leader_gone`) and the survivors stand a few ticks apart, so a dead leader is
  replaced in a few ticks rather than an election timeout;
- membership changes one server at a time (thesis §4.1): a configuration entry takes effect when it
  is appended, and only one may be uncommitted at a time. A leader whose removal commits hands over
  (thesis §3.10): it tells the member that holds most of its log to stand at once (`TimeoutNow`), and
  that member's votes say so (`transfer`), so its voters give up the lease of the leader that left
  instead of waiting it out: the group is without a leader for a round trip, not an election
  timeout. A member removed while it was cut off never receives the entry that removed it, and would
  stand in elections its old configuration's members refuse for ever (thesis §4.2.3's disruptive
  servers): a member whose committed configuration leaves the candidate out says so in its refusal,
  and the candidate stands no more until it hears a leader or its log holds that configuration
  (`stands`; liveness only: it still votes and replicates);
- log compaction (§7): the caller folds the applied prefix into a snapshot of its state (`compact`),
  and a leader sends a follower that lags behind it the snapshot instead, in chunks
  (InstallSnapshot), which the follower's caller restores (`Ready.snapshot`) before applying more.

The messages are dht/raft_messages.py's; compaction's rules dht/raft_snapshots.py's. Long because
election, replication, leases and membership all read and change the same role, term and log: split
apart, each would need the others' state.
"""

from __future__ import annotations

from collections.abc import Callable

from dht.raft_messages import (
    CANDIDATE,
    FOLLOWER,
    LEADER,
    PRE_CANDIDATE,
    Append,
    AppendReply,
    Entry,
    Message,
    NotLeader,
    Ready,
    Snapshot,
    SnapshotReply,
    TimeoutNow,
    Vote,
    VoteReply,
)
from dht.raft_snapshots import SNAPSHOT_CHUNK, Compaction

__all__ = ["CANDIDATE", "FOLLOWER", "LEADER", "PRE_CANDIDATE", "SNAPSHOT_CHUNK", "Append", "AppendReply", "Entry",
           "Message", "NotLeader", "Raft", "Ready", "Snapshot", "SnapshotReply", "TimeoutNow", "Vote",
           "VoteReply"]

MAX_APPEND = 64  # entries in one append message at most (a follower far behind catches up in steps)
MAX_APPEND_BYTES = 256 * 1024  # and their data at most this much (one entry at least)
HURRY_GAP = 3  # ticks between the survivors' campaigns when a leader's death was seen (`leader_gone`)


class Raft(Compaction):
    """One member of one group. `members` is the group's first configuration (the same at every
    member); `log`, `term`, `voted_for` and `snapshot` (index, term, members, data) what the caller
    persisted before a restart (the log then starts after the snapshot's index). `random(lo, hi)`
    draws an integer in [lo, hi]: the election timeout, in ticks, from `election_ticks` to twice it."""

    def __init__(self, id: str, members: tuple[str, ...], random: Callable[[int, int], int], *,
                 election_ticks: int = 10, heartbeat_ticks: int = 1, drift_ticks: int = 1, term: int = 0,
                 voted_for: str | None = None, log: list[Entry] | None = None,
                 snapshot: tuple[int, int, tuple[str, ...], bytes] | None = None) -> None:
        if heartbeat_ticks < 1 or election_ticks <= heartbeat_ticks + drift_ticks or drift_ticks < 0:
            raise ValueError("ticks: 1 <= heartbeat_ticks, 0 <= drift_ticks, heartbeat + drift < election_ticks")
        self.id = id
        self.random = random
        self.election_ticks, self.heartbeat_ticks, self.drift_ticks = election_ticks, heartbeat_ticks, drift_ticks
        self.term, self.voted_for = term, voted_for
        self.initial = tuple(members)
        # (index, term, configuration, data): what the log before index+1 was folded into (§7)
        self.snapshot: tuple[int, int, tuple[str, ...], bytes] = snapshot or (0, 0, self.initial, b"")
        self.log: list[Entry] = list(log or [])
        self._configs = [e.index for e in self.log if e.members is not None]  # configuration entries, in order
        self.commit = self.applied = self.snapshot[0]
        self._sending: dict[str, tuple[int, int]] = {}  # leader: peer -> (snapshot index, offset) it sends next
        self._in_flight: dict[str, int] = {}  # leader: peer -> the tick an append with entries went, unanswered
        self._receiving: tuple[int, int, bytearray] | None = None  # follower: a snapshot's index, term, bytes
        self._restored: bytes | None = None  # a snapshot installed, for the caller to restore
        self.role = FOLLOWER
        self.leader: str | None = None
        self.votes: set[str] = set()
        self.next_index: dict[str, int] = {}
        self.match_index: dict[str, int] = {}
        self.now = 0  # ticks so far
        self.acked: dict[str, int] = {}  # leader: member -> the newest `sent` of an append it answered
        self.led_from = 0  # candidate and leader: the tick its campaign began
        self.elapsed = 0  # ticks since the election timeout was last reset
        self.since_leader = 0  # ticks since a leader was last heard from: none votes within a lease of it
        self.hurried = False  # its leader was seen dying: campaigns wait shortly until a leader is heard
        self.gone: tuple[str, int] | None = None  # (the leader seen dying, its term)
        self.retired = 0  # a committed configuration's index that a member says removed this one (0: none)
        self.timeout = self.random(election_ticks, 2 * election_ticks - 1)
        self._out: list[Message] = []
        self._unsaved_from: int | None = None
        self._saved = (term, voted_for)

    # -- what the caller reads ---------------------------------------------------------------------------
    @property
    def members(self) -> tuple[str, ...]:
        """The configuration in force: the last one in the log, committed or not (thesis §4.1)."""
        if self._configs:
            return self.log[self._configs[-1] - self.snap_index - 1].members  # type: ignore[return-value]
        return self.snapshot[2]

    @property
    def stands(self) -> bool:
        """Whether this member stands in elections: it is in its configuration, and no member has told
        it of a newer committed one that leaves it out."""
        return self.id in self.members and self.retired <= self._config_index()

    @property
    def snap_index(self) -> int:
        return self.snapshot[0]

    @property
    def last_index(self) -> int:
        return self.log[-1].index if self.log else self.snapshot[0]

    @property
    def last_term(self) -> int:
        return self.log[-1].term if self.log else self.snapshot[1]

    def term_at(self, index: int) -> int:
        if index == self.snapshot[0]:
            return self.snapshot[1]
        i = index - self.snapshot[0]
        return self.log[i - 1].term if 0 < i <= len(self.log) else 0

    def lease_ticks(self) -> int:
        """Ticks for which this leader is certainly the only one (0: not a leader)."""
        return max(0, self._lease_end() - self.now) if self.role == LEADER else 0

    def _lease_end(self) -> int:
        """The tick by which this leader must have stepped down: `election_ticks` (less the drift margin)
        after the newest append a majority has answered, or, until a majority has, after the tick its
        campaign began (its voters, too, vote for no one else for a lease)."""
        sent = sorted((self.now if p == self.id else self.acked.get(p, self.led_from) for p in self.members),
                      reverse=True)
        return max(sent[self._quorum() - 1], self.led_from) + self.election_ticks - self.drift_ticks

    def ready(self) -> Ready:
        out = Ready(self.term, self.voted_for, messages=self._out)
        self._out = []
        if self._unsaved_from is not None:
            out.entries = self.log[max(0, self._unsaved_from - self.snap_index - 1):]
            self._unsaved_from = None
        out.snapshot, self._restored = self._restored, None
        if self.commit > self.applied:
            out.committed = self.log[self.applied - self.snap_index:self.commit - self.snap_index]
            self.applied = self.commit
        return out

    # -- what the caller feeds ---------------------------------------------------------------------------
    def tick(self) -> None:
        self.now += 1
        self.elapsed += 1
        self.since_leader += 1
        if self.role == LEADER:
            if self.elapsed >= self.heartbeat_ticks:
                self.elapsed = 0
                self._broadcast_append()
            if self.now >= self._lease_end():
                self._become_follower(self.term, None)  # no majority answered within a lease: step down
        elif self.elapsed >= self.timeout and self.stands:
            self._campaign(pre=True)

    def leader_gone(self, leader: str) -> bool:
        """The caller saw `leader`'s process die (our connection to it closed): campaign within a few
        ticks instead of a whole election timeout, and vote without waiting out the lease it had (both
        are liveness only: no vote's safety rests on time). Whether this member was its follower."""
        if self.role != FOLLOWER or self.leader != leader:
            return False
        survivors = sorted(m for m in self.members if m != leader)
        rank = survivors.index(self.id) if self.id in survivors else len(survivors)
        self.leader = None
        self.since_leader = self.election_ticks
        self.hurried, self.gone = True, (leader, self.term)
        # HURRY_GAP ticks apart, in the members' order: the first has its votes before the next starts
        # (together, they would split them); members that saw the death at different moments may still
        # split, and then stand again after a short random wait, not a whole election timeout
        self.elapsed = max(self.elapsed, self.timeout - 1 - HURRY_GAP * rank)
        return True

    def propose(self, data: bytes = b"", members: tuple[str, ...] | None = None) -> int:
        """Append a command (or, with `members`, a configuration change of one member) at the leader;
        its index. NotLeader elsewhere; ValueError for a change of more than one member, or while
        another change is not committed yet."""
        if self.role != LEADER:
            raise NotLeader(self.leader)
        if members is not None:
            if len(set(members) ^ set(self.members)) != 1:
                raise ValueError("a configuration change adds or removes exactly one member")
            if self._config_index() > self.commit:
                raise ValueError("a configuration change is already under way")
        self._append([Entry(self.term, self.last_index + 1, data, members)])
        for peer in self.members:  # a follower with an append in flight gets this entry with its reply
            if peer != self.id and self.now - self._in_flight.get(peer, -self.heartbeat_ticks) >= self.heartbeat_ticks:
                self._send_append(peer)
        self._advance_commit()
        return self.last_index

    def step(self, msg: Message) -> None:
        """Take one message addressed to this member. Anything from a non-member, or not addressed
        here, is ignored (a group's members can change under messages in flight)."""
        if msg.dst != self.id:
            return
        if msg.term > self.term:
            if isinstance(msg, Vote) and self._in_lease() and not msg.transfer:
                if removed := self._removed(msg.src):  # (no vote, no term raised; but told it was removed)
                    self._out.append(VoteReply(self.id, msg.src, self.term, False, msg.pre, removed))
                return  # a leader is alive for us: no vote, no term raised (thesis §4.2.3, leases)
            if isinstance(msg, Vote) and msg.pre:
                pass  # a pre-vote does not change our term
            elif isinstance(msg, VoteReply) and msg.pre and msg.granted:
                pass  # (granted pre-votes carry the future term)
            else:
                self._become_follower(msg.term, msg.src if isinstance(msg, Append) else None)
        if isinstance(msg, Vote):
            self._on_vote(msg)
        elif isinstance(msg, VoteReply):
            self._on_vote_reply(msg)
        elif isinstance(msg, Append):
            self._on_append(msg)
        elif isinstance(msg, AppendReply):
            self._on_append_reply(msg)
        elif isinstance(msg, Snapshot):
            self._on_snapshot(msg)
        elif isinstance(msg, SnapshotReply):
            self._on_snapshot_reply(msg)
        elif isinstance(msg, TimeoutNow):
            if msg.term == self.term and self.role == FOLLOWER and self.stands:
                self._campaign(pre=False, transfer=True)  # its leader left the group and stepped down

    # -- elections ---------------------------------------------------------------------------------------
    def _quorum(self) -> int:
        return len(self.members) // 2 + 1

    def _in_lease(self) -> bool:
        return self.role == LEADER or self.since_leader < self.election_ticks

    def _campaign(self, pre: bool, transfer: bool = False) -> None:
        self.elapsed = 0
        low = HURRY_GAP if self.hurried else self.election_ticks
        self.timeout = self.random(low, 2 * self.election_ticks - 1)
        if pre:
            self.role = PRE_CANDIDATE
        else:
            self.role = CANDIDATE
            self.term += 1
            self.voted_for = self.id
            self.led_from = self.now  # its voters' leases begin after this tick
        self.leader = None
        self.votes = {self.id}
        if len(self.votes) >= self._quorum():
            self._campaign(pre=False) if pre else self._become_leader()
            return
        term = self.term + 1 if pre else self.term
        for peer in self.members:
            if peer != self.id:
                self._out.append(Vote(self.id, peer, term, self.last_index, self.last_term, pre, transfer))

    def _on_vote(self, msg: Vote) -> None:
        up_to_date = (msg.last_term, msg.last_index) >= (self.last_term, self.last_index)
        if msg.pre:
            granted = msg.term > self.term and up_to_date and not self._in_lease()
            self._out.append(VoteReply(self.id, msg.src, msg.term if granted else self.term, granted, True,
                                       0 if granted else self._removed(msg.src)))
            return
        granted = (msg.term == self.term and self.voted_for in (None, msg.src) and up_to_date)
        if granted:
            self.voted_for = msg.src
            self.elapsed = 0
            self.since_leader = 0  # a vote grants a lease: no other vote within it
        removed = 0 if granted else self._removed(msg.src)
        self._out.append(VoteReply(self.id, msg.src, self.term, granted, False, removed))

    def _removed(self, member: str) -> int:
        """The index of our configuration if it is committed and leaves `member` out, else 0."""
        config = self._config_index()
        return config if member not in self.members and config <= self.commit else 0

    def _on_vote_reply(self, msg: VoteReply) -> None:
        if not msg.granted and msg.removed > self._config_index():
            self.retired = max(self.retired, msg.removed)  # removed while cut off: stand no more
            if self.role in (PRE_CANDIDATE, CANDIDATE):
                self._become_follower(self.term, None)
            return
        if msg.pre != (self.role == PRE_CANDIDATE) or self.role not in (PRE_CANDIDATE, CANDIDATE):
            return
        if msg.term != (self.term + 1 if msg.pre else self.term):
            return  # an answer of an earlier round
        if msg.granted and msg.src in self.members:
            self.votes.add(msg.src)
            if len(self.votes) >= self._quorum():
                if msg.pre:
                    self._campaign(pre=False)
                else:
                    self._become_leader()

    def _become_follower(self, term: int, leader: str | None) -> None:
        if term > self.term:
            self.term, self.voted_for = term, None
        self.role = FOLLOWER
        self.leader = leader
        self.elapsed = 0
        self.timeout = self.random(self.election_ticks, 2 * self.election_ticks - 1)

    def _become_leader(self) -> None:
        self.role = LEADER
        self.leader = self.id
        self.hurried = False
        self.elapsed = 0
        self.acked, self._in_flight = {}, {}
        self.next_index = {p: self.last_index + 1 for p in self.members}
        self.match_index = {p: 0 for p in self.members}
        self._append([Entry(self.term, self.last_index + 1)])  # a no-op of its term: commits what came before
        self._broadcast_append()
        self._advance_commit()

    # -- replication -------------------------------------------------------------------------------------
    def _append(self, entries: list[Entry]) -> None:
        first = entries[0].index
        del self.log[first - self.snap_index - 1:]
        while self._configs and self._configs[-1] >= first:
            self._configs.pop()
        self.log.extend(entries)
        self._configs.extend(e.index for e in entries if e.members is not None)
        self._unsaved_from = first if self._unsaved_from is None else min(self._unsaved_from, first)
        if self.role == LEADER:
            self.match_index[self.id] = self.last_index
            for peer in self.members:  # a member added by this entry starts from the leader's next index
                self.next_index.setdefault(peer, self.last_index)
                self.match_index.setdefault(peer, 0)

    def _broadcast_append(self) -> None:
        for peer in self.members:
            if peer != self.id:
                self._send_append(peer)

    def _send_append(self, peer: str) -> None:
        nxt = max(1, min(self.next_index.get(peer, self.last_index + 1), self.last_index + 1))
        if nxt <= self.snap_index:  # what it lacks is folded into the snapshot: it gets that (§7)
            self._send_snapshot(peer)
            return
        entries, size = [], 0
        for e in self.log[nxt - self.snap_index - 1:nxt - self.snap_index - 1 + MAX_APPEND]:
            size += len(e.data)
            if entries and size > MAX_APPEND_BYTES:
                break
            entries.append(e)
        if entries:
            self._in_flight[peer] = self.now
        self._out.append(Append(self.id, peer, self.term, nxt - 1, self.term_at(nxt - 1), tuple(entries),
                                self.commit, self.now))

    def _heard_leader(self, msg: Append | Snapshot) -> bool:
        """An append or a snapshot: refused (False) from an older term's leader; else its sender leads,
        and this member's election and lease clocks start again."""
        if msg.term < self.term:
            self._out.append(AppendReply(self.id, msg.src, self.term, False, self.last_index))
            return False
        if self.gone == (msg.src, msg.term):  # sent before it died, read after: its entries count, but
            return True  # it is no sign of life (no leader again, no lease)
        if self.role != FOLLOWER or self.leader != msg.src:
            self._become_follower(msg.term, msg.src)
        self.elapsed = 0
        self.since_leader = 0
        self.hurried = False
        self.retired = 0  # a leader sends its log: whether this member is in the configuration, it will say
        return True

    def _on_append(self, msg: Append) -> None:
        if not _consecutive(msg):
            return  # no leader sends it: dropped before it can touch the log
        if not self._heard_leader(msg):
            return
        if msg.prev_index < self.snap_index:  # its start is folded into our snapshot: committed, so it matches
            self._out.append(AppendReply(self.id, msg.src, self.term, True, self.commit, msg.sent))
            return
        if msg.prev_index > self.last_index or self.term_at(msg.prev_index) != msg.prev_term:
            self._out.append(AppendReply(self.id, msg.src, self.term, False, min(self.last_index, msg.prev_index - 1),
                                         msg.sent))
            return
        fresh = [e for e in msg.entries if self.term_at(e.index) != e.term]  # what is new or conflicts
        if fresh:
            self._append(fresh)
        matched = msg.prev_index + len(msg.entries)
        if msg.commit > self.commit:
            self.commit = max(self.commit, min(msg.commit, matched))  # (a reordered append matches less)
        self._out.append(AppendReply(self.id, msg.src, self.term, True, matched, msg.sent))

    def _on_append_reply(self, msg: AppendReply) -> None:
        if self.role != LEADER or msg.term != self.term or msg.src not in self.members:
            return
        self.acked[msg.src] = max(self.acked.get(msg.src, -self.election_ticks), msg.sent)
        self._in_flight.pop(msg.src, None)
        if msg.success:
            self._sending.pop(msg.src, None)
            if msg.index > self.match_index.get(msg.src, 0):
                self.match_index[msg.src] = msg.index
                self.next_index[msg.src] = msg.index + 1
                self._advance_commit()
            if self.next_index.get(msg.src, 1) <= self.last_index:
                self._send_append(msg.src)
        else:  # back off, never below what it matched (a refusal can be older than that)
            floor = self.match_index.get(msg.src, 0) + 1
            self.next_index[msg.src] = max(floor, min(self.next_index.get(msg.src, 1) - 1, msg.index + 1))
            self._send_append(msg.src)

    def _advance_commit(self) -> None:
        """The highest index a majority holds, if it is of this term (§5.4.2: never by counting an
        older term's entry, Figure 8). A leader whose removal is committed leads no more, and tells the
        member that holds most of its log to stand at once (`TimeoutNow`)."""
        members = self.members
        matched = sorted((self.last_index if p == self.id else self.match_index.get(p, 0) for p in members),
                         reverse=True)
        n = matched[self._quorum() - 1]
        if n > self.commit and self.term_at(n) == self.term:
            self.commit = n
        if self.role == LEADER and self.id not in members and self._config_index() <= self.commit:
            heir = max(members, key=lambda p: (self.match_index.get(p, 0), p), default=None)
            self._become_follower(self.term, None)
            if heir is not None:  # the most up-to-date member stands at once (thesis §3.10)
                self._out.append(TimeoutNow(self.id, heir, self.term))

    def _config_index(self) -> int:
        """The index of the configuration in force (one folded into the snapshot: the snapshot's own index,
        an upper bound, and committed like it)."""
        return self._configs[-1] if self._configs else self.snap_index


def _consecutive(msg: Append) -> bool:
    """Whether an append's entries are what a leader sends: indexes one after another from prev_index + 1,
    terms from 1 up to the append's own, never going down (an entry of term 0 would pass for one the
    log lacks, since `term_at` says 0 beyond the log)."""
    term = max(msg.prev_term, 1)
    for i, e in enumerate(msg.entries, msg.prev_index + 1):
        if e.index != i or not term <= e.term <= msg.term:
            return False
        term = e.term
    return True

