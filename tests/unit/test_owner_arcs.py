"""What a client infers of the ring's arcs from its entry node's links (pubsub/registration.py)."""

from __future__ import annotations

from dht.routing import Peer
from pubsub.registration import OwnerArcs

A, B, C, Z = Peer(100, "a:1"), Peer(200, "b:1"), Peer(30, "c:1"), Peer(50, "z:1")


def test_a_nodes_links_give_its_own_arc_and_each_successors():
    """a's predecessor is z and its successors b, c, z, a: every arc of the circle is known, the
    successors' guessed from the list, and a guess an owner denies is forgotten alone.
    To see it fail: `learn_links` learning only the node's own arc (then 150 and 10 have no owner)."""
    arcs = OwnerArcs()
    arcs.learn_links(A, Z, [B, C, Z, A])
    assert [arcs.owner(k) for k in (75, 100, 150, 200, 10, 30, 40, 50)] == \
        ["a:1", "a:1", "b:1", "b:1", "c:1", "c:1", "z:1", "z:1"]
    arcs.forget("b:1")  # b answered "not the owner": a node joined in its arc
    assert arcs.owner(150) is None and arcs.owner(75) == "a:1"


def test_links_that_say_nothing_safe_teach_nothing_and_a_node_alone_owns_every_key():
    arcs = OwnerArcs()
    arcs.learn_links(A, None, [B, C])  # no predecessor yet: not even its own arc is known
    assert arcs.owner(75) is None and arcs.owner(150) is None
    arcs.learn_links(A, A, [A])
    assert arcs.owner(75) == "a:1" and arcs.owner(150) == "a:1"
