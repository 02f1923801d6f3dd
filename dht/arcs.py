"""Where a strongly consistent name lives: the consensus group of its arc, and who that group's members
should be. Pure: no sockets, no clocks.

The identifier circle is cut into ARCS fixed arcs (as Riak and Cassandra's virtual nodes cut theirs);
a key or election name belongs to the arc its id (dht/ids.py's mmh3) falls in, and each arc has one
Raft group (dht/consensus_group.py). The group's members follow the ring: they should be the
processes that hold the copies of the arc's last id, its owner and the next `replicas - 1` processes
on the successor list, as for any key (dht/replication.py). When the ring changes, the group's leader
changes its membership through the group's own log, one member at a time (Raft thesis §4.1), so a
minority, one side of a partition, never commits (Scatter, SOSP'11, keeps its groups the same way).

Why fixed arcs rather than one group per node's own arc: a node's arc splits at every join and merges
at every leave, and splitting a Raft group's state safely is the hardest part of Scatter; a fixed arc
only ever changes members, which Raft already does safely. Every group descends from the ring's first
node (it starts them all with itself as the only member), so two groups of one arc can never be born
on two sides of a partition.
"""

from __future__ import annotations

ARCS = 16  # consensus groups in a ring: each process takes part in about ARCS * replicas / processes
# (few: a process in every group of a small ring pays for each when the ring changes)


def arc_of(k: int, bits: int) -> int:
    """The arc of id `k` on a circle of 2**bits ids."""
    return (k * ARCS) >> bits


def arc_end(arc: int, bits: int) -> int:
    """The last id of `arc`: the arc's group is held by the processes holding this id's copies."""
    return (((arc + 1) << bits) // ARCS) - 1


def next_change(members: tuple[str, ...], wanted: list[str], leader: str) -> tuple[str, ...] | None:
    """The configuration one step from `members` towards `wanted` (None: there already), as the
    group's `leader` proposes it: first out a member not wanted (a dead or displaced one: it would
    count towards the quorum without voting), then in a wanted one that is missing, and the leader
    itself out last, when the others are in (it hands over by stepping down once that commits)."""
    if not wanted:
        return None  # no view of the ring: change nothing
    gone = [m for m in members if m not in wanted and m != leader]
    if gone:
        return tuple(m for m in members if m != gone[0])
    missing = [m for m in wanted if m not in members]
    if missing:
        return (*members, missing[0])
    if leader in members and leader not in wanted and len(members) > 1:
        return tuple(m for m in members if m != leader)
    return None
