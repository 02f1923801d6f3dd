"""A position's precomputed next_hop answers (dht/hop_table.py) are RoutingTable.next_hop's, for any
state of the fingers and successor list, stale or out of order as a ring under churn leaves them; and a
table knows when the routing table has moved on. To see it fail, build the fingers' bound from each
finger alone (`low = d if d > 0 else size`: a finger below the limit hidden behind a higher one that is
not), or make `current` return True."""

from hypothesis import given, settings
from hypothesis import strategies as st

from dht.hop_table import HopTable
from dht.routing import Peer, RoutingTable

BITS = 12

peers = st.builds(lambda i: Peer(i, f"10.0.0.1:{1000 + i}"), st.integers(0, 2**BITS - 1))


@st.composite
def tables(draw) -> RoutingTable:
    me = draw(peers)
    t = RoutingTable(me, BITS, successors=4, prs=draw(st.booleans()))
    t.fingers = draw(st.lists(st.one_of(st.none(), st.just(me), peers), min_size=BITS, max_size=BITS))
    t.successors = draw(st.lists(st.one_of(peers, st.just(me)), max_size=4))
    return t


def encode(peer: Peer) -> dict:
    return {"id": peer.id, "endpoint": peer.endpoint}


@settings(max_examples=400, deadline=None)
@given(t=tables(), keys=st.lists(st.integers(0, 2**BITS - 1), min_size=1, max_size=8))
def test_the_table_answers_what_the_routing_table_answers(t, keys):
    table = HopTable(t, encode)
    for k in keys + [t.me.id, (t.me.id + 1) % 2**BITS]:
        hop = t.next_hop(k)
        assert table.next_hop(k) == (None if hop is None else (hop.done, encode(hop.peer)))


def test_a_table_is_current_until_a_finger_or_successor_changes():
    me, a, b = Peer(10, "h:1"), Peer(100, "h:2"), Peer(1000, "h:3")
    t = RoutingTable(me, BITS, successors=2)
    t.successors = [a]
    t.set_finger(5, b)
    table = HopTable(t, encode)
    assert table.current(t)
    t.successors = [Peer(100, "h:2")]  # an equal list is the same table
    assert table.current(t)
    t.fingers[7] = a  # changed in place
    assert not table.current(t)
    table = HopTable(t, encode)
    t.consider_successor(Peer(50, "h:4"))
    assert not table.current(t)
