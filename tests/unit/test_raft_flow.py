"""A leader's flow control (dht/raft.py): a command proposed while a follower has an append unanswered
goes to it with that append's reply, or with the next heartbeat when the reply is lost, not in an
append of its own. Sixteen clients' commands otherwise sent each follower an append per command, each
carrying every entry not answered yet again: a follower busy decoding them saw its leader's death late,
and a failover that takes a tenth of a second took two.

To see it fail: make `propose` send to every follower at once (`self._broadcast_append()` in place of
its loop): sixteen commands send the follower sixteen appends and 136 entries."""

from __future__ import annotations

from dht.raft import Append, AppendReply
from tests.unit.test_raft import Cluster, E


def appends_to(node, dst: str) -> list[Append]:  # noqa: ANN001 - a Raft
    return [m for m in node.ready().messages if isinstance(m, Append) and m.dst == dst]


def test_commands_proposed_while_an_append_is_unanswered_go_with_its_reply_each_entry_once():
    cluster = Cluster(3, seed=4)
    cluster.await_leader()
    cluster.run(2 * E)  # every follower caught up: nothing in flight
    lead = cluster.leader()
    follower = next(i for i in cluster.ids if i != lead.id)
    lead.ready()
    for i in range(16):
        lead.propose(b"cas %d" % i)
    first = appends_to(lead, follower)
    assert [len(m.entries) for m in first] == [1]  # the first command's; the others wait for its answer
    node = cluster.nodes[follower]
    node.step(first[0])
    (reply,) = [m for m in node.ready().messages if isinstance(m, AppendReply)]
    lead.step(reply)
    assert [len(m.entries) for m in appends_to(lead, follower)] == [15]  # the rest, together


def test_a_lost_reply_leaves_the_commands_to_the_next_heartbeat():
    cluster = Cluster(3, seed=5)
    cluster.await_leader()
    cluster.run(2 * E)
    lead = cluster.leader()
    follower = next(i for i in cluster.ids if i != lead.id)
    lead.ready()
    for i in range(4):
        lead.propose(b"put %d" % i)
    assert [len(m.entries) for m in appends_to(lead, follower)] == [1]  # its reply never comes
    for _ in range(lead.heartbeat_ticks):
        lead.tick()
    assert [len(m.entries) for m in appends_to(lead, follower)] == [4]
