"""Raft's membership (dht/raft.py): members join and leave one at a time, a removed leader hands over,
and a member removed while it was cut off is told so and stops standing in elections. Played on the
network of tests/unit/test_raft.py (`Cluster`), whose checks at every tick hold here too."""

from __future__ import annotations

import pytest

from dht import raft
from dht.raft import LEADER, Raft
from tests.unit.test_raft import Cluster, E


def test_members_join_and_leave_one_at_a_time_and_a_removed_leader_hands_over():
    c = Cluster(3, seed=5)
    lead = c.await_leader()
    with pytest.raises(ValueError, match="exactly one"):
        lead.propose(members=(*c.ids, "m3", "m4"))
    newcomer = c.add("m3")
    lead.propose(members=("m0", "m1", "m2", "m3"))
    with pytest.raises(ValueError, match="under way"):
        lead.propose(members=("m0", "m1", "m2"))
    c.run(3 * E)
    assert newcomer.members == ("m0", "m1", "m2", "m3") and newcomer.log == lead.log, "caught up, a member"
    lead.propose(b"four")
    c.run(2 * E)
    assert all(c.applied[i][-1].data == b"four" for i in c.ids)
    rest = tuple(i for i in c.ids if i != lead.id)
    lead.propose(members=rest)
    c.run(E)
    assert lead.role != LEADER, "a leader whose removal is committed leads no more"
    new = c.await_leader()
    assert new.id in rest
    new.propose(b"without it")
    c.run(3 * E)
    assert all(c.applied[i][-1].data == b"without it" for i in rest)
    assert lead.id not in new.members


def test_a_member_removed_while_cut_off_is_told_so_and_stands_no_more_until_a_leader_adds_it_again():
    """A member cut off while the group removed it never receives the entry that did: back, it stands
    in election after election that the members (who hear their leader) refuse. The first refusal from a
    member whose committed configuration leaves it out says so, and it stands no more (one round of
    pre-votes, not one every election timeout); added again, it hears the leader and is a member like
    any other. To see it fail, let `_removed` return 0 (or `stands` ignore `retired`)."""
    c = Cluster(4, seed=7)
    lead = c.await_leader()
    gone = next(i for i in c.ids if i != lead.id)
    c.split({gone}, set(c.ids) - {gone})
    rest = tuple(i for i in c.ids if i != gone)
    lead.propose(members=rest)
    c.run(2 * E)
    assert lead.commit == lead.last_index and lead.members == rest, "the removal is committed without it"
    votes = []
    collect = c._collect

    def counting(node: Raft) -> None:
        votes.extend(m for m in node._out if isinstance(m, raft.Vote) and m.src == gone)
        collect(node)

    c._collect = counting
    c.heal()
    c.run(12 * E)
    stale = c.nodes[gone]
    assert gone in stale.members, "it never received the entry that removed it"
    assert 0 < len(votes) <= len(rest) and not stale.stands, f"{len(votes)} votes asked after its removal"
    assert c.leader() is lead
    lead.propose(members=(*rest, gone))
    c.run(3 * E)
    assert stale.stands and stale.log == lead.log, "added again, it is a member like any other"


def test_a_leader_that_leaves_its_group_hands_over_within_a_few_ticks():
    """A leader whose removal commits steps down and tells the member holding most of its log to stand
    at once; that member's votes say so, and its voters, who heard the old leader a tick ago, give up
    its lease: a new leader within a few ticks, not once the old leader's lease has run out (`E` ticks).
    To see it fail: send no `TimeoutNow` (`heir = None` in `_advance_commit`), or let the voters keep
    the lease (`and not msg.transfer` dropped in `step`)."""
    c = Cluster(4, seed=11)
    lead = c.await_leader()
    c.run(E)
    rest = tuple(i for i in c.ids if i != lead.id)
    lead.propose(members=rest)
    for _ in range(2 * E):
        c.tick()
        if lead.role != LEADER:
            break
    assert lead.role != LEADER, "a leader whose removal is committed leads no more"
    ticks, new = 0, None
    while new is None and ticks < E - 1:
        c.tick()
        ticks, new = ticks + 1, c.leader()
    assert new is not None and new.id in rest and ticks <= 4, f"no leader {ticks} ticks after it left"
