"""One member of one consensus group: Raft (dht/raft.py), the state the members agree on
(dht/kv_machine.py), the leader's lease clock for elections, and the requests waiting for answers.

Pure, like both: the driver calls `tick()` at a fixed period, `step(message)` for each message that
arrives and `request(command, ticket)` for a client's command, then takes `ready()`: what to persist
before sending, the messages to send, and the answers to give, each with the ticket it was asked
with.

- A request is proposed at the leader only; elsewhere it is answered at once with the leader this
  member knows (the client asks there). It is answered when its entry is applied, with the machine's
  result. An entry applied at its index with another term than the proposal's means a new leader
  overwrote it: it was never applied, and the answer says so (the client may send it again).
- Reads (`get`, `who`) go through the log too, so a leader cut off from its majority cannot answer
  them with a stale state (Raft §8; ReadIndex and lease reads, thesis §6.4, would spare the append).
- Election leases, with the group's leader as the lessor (etcd's lessor, Chubby's master leases):
  every member, as it applies a grant or a renewal, notes the tick its lease ends, a lease from
  then; the leader, when that tick passes with no renewal, proposes the expiry, which frees the name
  only if no renewal was applied since it was proposed. A member applies an entry no earlier than it
  was sent, so each member's clock for a lease starts after its holder sent the renewal, and a new
  leader's clocks are no earlier than its predecessor's. So a name is free at the earliest a full
  lease after its holder *sent* its last renewal, and a holder that stops acting a lease after it
  sent it, less its clock's drift, never overlaps the next.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from dht.kv_machine import CommandError, KvMachine, check_command, decode, encode
from dht.raft import LEADER, Entry, Message, Raft

TICK_MS = 100  # the driver's tick: etcd's default heartbeat interval
ELECTION_TICKS = 10  # 1 s without a leader before a member campaigns (etcd's default election timeout)
MAX_WAITING = 10_000  # requests one leader holds until their entries apply; beyond, refused at once
COMPACT_EVERY = 500  # entries applied past the last snapshot before the log is folded into a new one
KEEP_ENTRIES = 50  # entries kept after a snapshot, so that a follower a little behind needs no snapshot
OVERWRITTEN = {"ok": False, "error": "not applied: the group's leader changed before it was committed; send it again"}


@dataclass
class GroupReady:
    """Persist `term`, `voted_for` and `entries` (which replace the log from their first index on)
    before sending `messages`; then give each (ticket, answer)."""

    term: int
    voted_for: str | None
    entries: list[Entry] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    answers: list[tuple[object, dict]] = field(default_factory=list)


class Group:
    """This member's part in one group. `members`, `term`, `voted_for` and `log` as for `Raft`."""

    def __init__(self, id: str, members: tuple[str, ...], random: Callable[[int, int], int], *,
                 tick_ms: int = TICK_MS, election_ticks: int = ELECTION_TICKS, term: int = 0,
                 voted_for: str | None = None, log: list[Entry] | None = None) -> None:
        self.raft = Raft(id, members, random, election_ticks=election_ticks, term=term, voted_for=voted_for,
                         log=log)
        self.machine = KvMachine()
        self.tick_ms = tick_ms
        self.waiting: dict[int, tuple[int, object]] = {}  # log index -> (the term it was proposed in, ticket)
        self.lease_ends: dict[str, tuple[int, int]] = {}  # election -> (tick its lease ends, the renewal it ends)
        self._expiring: set[tuple[str, int]] = set()  # expiries proposed, not applied yet
        self._lessor_term = 0  # the term whose leadership started the lease clocks
        self._answers: list[tuple[object, dict]] = []

    @property
    def is_leader(self) -> bool:
        return self.raft.role == LEADER

    def request(self, command: dict, ticket: object) -> None:
        """A client's command (CommandError at once when malformed: nothing is proposed)."""
        check_command(command)
        if command["op"] == "expire":
            raise CommandError("expiries are the group leader's to propose")
        if self.raft.role != LEADER:
            self._answers.append((ticket, {"ok": False, "error": "not the leader", "leader": self.raft.leader}))
            return
        if len(self.waiting) >= MAX_WAITING:
            self._answers.append((ticket, {"ok": False, "error": f"{MAX_WAITING} requests wait already; try later",
                                           "leader": self.raft.id}))
            return
        index = self.raft.propose(encode(command))
        self.waiting[index] = (self.raft.term, ticket)

    def step(self, message: Message) -> None:
        self.raft.step(message)

    def tick(self) -> None:
        self.raft.tick()
        if self.raft.role != LEADER:
            return
        now = self.raft.now
        if self._lessor_term != self.raft.term:  # leading since this tick: the expiries a predecessor
            self._lessor_term = self.raft.term  # proposed are its own to finish (or to lose)
            self._expiring.clear()
        for name, (end, renewed) in list(self.lease_ends.items()):
            if now >= end and (name, renewed) not in self._expiring:
                self._expiring.add((name, renewed))
                self.raft.propose(encode({"op": "expire", "name": name, "renewed": renewed}))

    def ready(self) -> GroupReady:
        rd = self.raft.ready()
        if rd.snapshot is not None:  # a leader's state, installed: its leases timed from now, in full
            self.machine = KvMachine.restore(rd.snapshot)
            self.lease_ends = {name: (self.raft.now + self._ticks(h.lease_ms), h.renewed)
                               for name, h in self.machine.holders.items()}
        for entry in rd.committed:
            answer = self.machine.apply(entry.index, entry.data)
            if answer is not None:
                self._lease_clock(entry, answer)
            waiting = self.waiting.pop(entry.index, None)
            if waiting is not None:
                term, ticket = waiting
                self._answers.append((ticket, (answer or {"ok": True}) if term == entry.term else OVERWRITTEN))
        if self.raft.applied - self.raft.snap_index >= COMPACT_EVERY + KEEP_ENTRIES:
            self.compact(self.raft.applied - KEEP_ENTRIES)
        answers, self._answers = self._answers, []
        return GroupReady(rd.term, rd.voted_for, rd.entries, rd.messages, answers)

    def compact(self, index: int) -> None:
        """Fold the log up to `index` (applied) into a snapshot of the machine as it was there: the
        machine is replayed from the last snapshot, so the state kept is exactly index's."""
        machine = KvMachine.restore(self.raft.snapshot[3]) if self.raft.snap_index else KvMachine()
        for entry in self.raft.log[:index - self.raft.snap_index]:
            machine.apply(entry.index, entry.data)
        self.raft.compact(index, machine.snapshot())

    def _lease_clock(self, entry: Entry, answer: dict) -> None:
        op = decode(entry.data)["op"]
        name = answer.get("name")
        if (op == "campaign" or answer.get("granted")) and answer["ok"]:  # granted to a claimant when freed
            self.lease_ends[name] = (self.raft.now + self._ticks(answer["lease_ms"]), answer["renewed"])
        elif op in ("resign", "expire") and answer["ok"]:
            self.lease_ends.pop(name, None)
        if op == "expire":
            self._expiring = {x for x in self._expiring if x[0] != name}

    def _ticks(self, ms: int) -> int:
        """A lease in whole ticks, and one more: the tick under way when it was applied may be nearly over
        (the driver never runs two ticks closer than `tick_ms`, so `n` ticks last `n * tick_ms` at least)."""
        return math.ceil(ms / self.tick_ms) + 1
