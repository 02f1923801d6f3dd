"""Raft's messages and what one call of the state machine produces (dht/raft.py): plain frozen data,
so that the wire (dht/raft_wire.py), the tests and the state machine share one definition."""

from __future__ import annotations

from dataclasses import dataclass, field

FOLLOWER, PRE_CANDIDATE, CANDIDATE, LEADER = "follower", "pre-candidate", "candidate", "leader"


class NotLeader(Exception):
    """A proposal to a node that is not the leader; `leader` names the one it knows (None: none)."""

    def __init__(self, leader: str | None) -> None:
        super().__init__(f"not the leader (the leader is {leader})" if leader else "not the leader (none known)")
        self.leader = leader


@dataclass(frozen=True)
class Entry:
    term: int
    index: int
    data: bytes = b""
    members: tuple[str, ...] | None = None  # a configuration entry: the group's members from here on


@dataclass(frozen=True)
class Vote:
    """RequestVote (§5.2), or its pre-vote probe: `term` is the term the candidate would stand in."""

    src: str
    dst: str
    term: int
    last_index: int
    last_term: int
    pre: bool = False
    transfer: bool = False  # asked by a leader that stepped down (TimeoutNow): voters give up its lease


@dataclass(frozen=True)
class TimeoutNow:
    """Leadership transfer (thesis §3.10): a leader that leaves its group tells its most up-to-date
    follower to stand at once, rather than have the group wait out an election timeout."""

    src: str
    dst: str
    term: int


@dataclass(frozen=True)
class VoteReply:
    """`removed`: the index of a committed configuration that leaves the candidate out (0: none known),
    so that a member that missed its own removal stops standing in elections (dht/raft.py, `stands`)."""

    src: str
    dst: str
    term: int
    granted: bool
    pre: bool = False
    removed: int = 0


@dataclass(frozen=True)
class Append:
    """AppendEntries (§5.3); with no entries, the heartbeat."""

    src: str
    dst: str
    term: int
    prev_index: int
    prev_term: int
    entries: tuple[Entry, ...]
    commit: int
    sent: int = 0  # the leader's tick when it sent this: echoed back, it dates the follower's lease


@dataclass(frozen=True)
class AppendReply:
    src: str
    dst: str
    term: int
    success: bool
    index: int  # success: the follower's log matches up to here; refused: its last index (a hint)
    sent: int = 0  # the `sent` of the append answered


@dataclass(frozen=True)
class Snapshot:
    """InstallSnapshot (§7), one chunk of it: the state as of `index` (an entry of `last_term`) with the
    configuration in force there; this chunk's `offset` in the whole, `done` on the last one."""

    src: str
    dst: str
    term: int
    index: int
    last_term: int
    members: tuple[str, ...]
    offset: int
    data: bytes
    done: bool
    sent: int = 0


@dataclass(frozen=True)
class SnapshotReply:
    """A chunk taken (or refused): the follower has `offset` bytes of the snapshot at `index` so far."""

    src: str
    dst: str
    term: int
    index: int
    offset: int
    sent: int = 0


Message = Vote | VoteReply | Append | AppendReply | Snapshot | SnapshotReply | TimeoutNow


@dataclass
class Ready:
    """What one call produced: persist `term`, `voted_for` and `entries` (which replace the log from
    their first index on) before sending `messages`; restore `snapshot` (a leader's, installed: the
    state as of `Raft.snapshot`'s index, which replaces the log up to there), then apply `committed`
    in order."""

    term: int
    voted_for: str | None
    entries: list[Entry] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    committed: list[Entry] = field(default_factory=list)
    snapshot: bytes | None = None
