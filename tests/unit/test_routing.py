"""Property tests of the pure routing state against a brute-force ideal ring (ToN'03 Figs. 5-6)."""

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dht.ids import distance, finger_start, in_half_open, in_open, owner_of
from dht.routing import NextHop, Peer, RoutingTable

BITS = 16


def ideal_table(ids: list[int], me: int, r: int = 4) -> RoutingTable:
    """The routing table node `me` has once the ring has fully stabilized."""
    ids = sorted(ids)
    peers = {i: Peer(i, f"10.0.0.1:{1000 + n}") for n, i in enumerate(ids)}
    t = RoutingTable(peers[me], BITS, successors=r)
    pos = ids.index(me)
    succs = [peers[ids[(pos + j) % len(ids)]] for j in range(1, min(r, len(ids) - 1) + 1)]
    t.successors = succs
    t.predecessor = peers[ids[pos - 1]] if len(ids) > 1 else None
    for i in range(BITS):
        o = owner_of(ids, finger_start(me, i, BITS))
        t.fingers[i] = peers[o] if o != me else None
    return t


def brute_cpn(t: RoutingTable, k: int, avoid=frozenset()) -> Peer:
    candidates = {p for p in t.fingers if p is not None} | set(t.successors)
    known = [p for p in candidates if p.endpoint not in avoid and in_open(p.id, t.me.id, k)]
    return max(known, key=lambda p: distance(t.me.id, p.id, BITS), default=t.me)


rings = st.lists(st.integers(0, 2**BITS - 1), min_size=1, max_size=40, unique=True)


@given(ids=rings, k=st.integers(0, 2**BITS - 1), pick=st.integers(0, 10**6))
def test_closest_preceding_node_is_the_known_node_closest_before_k(ids, k, pick):
    me = ids[pick % len(ids)]
    t = ideal_table(ids, me)
    assert t.closest_preceding_node(k) == brute_cpn(t, k)


@given(ids=rings, k=st.integers(0, 2**BITS - 1), pick=st.integers(0, 10**6))
def test_next_hop_decision(ids, k, pick):
    me = ids[pick % len(ids)]
    t = ideal_table(ids, me)
    hop = t.next_hop(k)
    owner = owner_of(sorted(ids), k)
    if len(ids) == 1:
        assert hop == NextHop(True, t.me)
    elif in_half_open(k, me, t.successor.id):
        assert hop == NextHop(True, t.successor) and hop.peer.id == owner
    else:
        assert not hop.done and hop.peer == brute_cpn(t, k)
        # progress: the next node is strictly closer to k, and never past it
        def remaining(x):  # clockwise distance left to k; the full circle when standing on k
            return distance(x, k, BITS) or 2**BITS

        assert remaining(hop.peer.id) < remaining(me)


def route(tables: dict[int, RoutingTable], start: int, k: int, avoid=frozenset()) -> tuple[Peer, int]:
    """An iterative lookup over pure tables: (owner, hops)."""
    current, hops = tables[start], 0
    for _ in range(4 * BITS):
        hop = current.next_hop(k, avoid)
        assert hop is not None
        if hop.done:
            return hop.peer, hops
        current, hops = tables[hop.peer.id], hops + 1
    raise AssertionError("lookup did not terminate")


@given(ids=rings, k=st.integers(0, 2**BITS - 1), pick=st.integers(0, 10**6))
def test_lookups_over_the_ideal_ring_find_the_true_owner(ids, k, pick):
    tables = {i: ideal_table(ids, i) for i in ids}
    owner, hops = route(tables, ids[pick % len(ids)], k)
    assert owner.id == owner_of(sorted(ids), k)
    assert hops <= BITS


@settings(max_examples=200)
@given(ids=st.lists(st.integers(0, 2**BITS - 1), min_size=6, max_size=40, unique=True),
       k=st.integers(0, 2**BITS - 1), pick=st.integers(0, 10**6), dead_pick=st.integers(0, 10**6))
def test_lookups_skip_a_dead_node_and_still_find_the_live_owner(ids, k, pick, dead_pick):
    ids = sorted(ids)
    dead = ids[dead_pick % len(ids)]
    start = ids[pick % len(ids)]
    assume(start != dead)
    tables = {i: ideal_table(ids, i) for i in ids}
    live = [i for i in ids if i != dead]
    owner, _ = route(tables, start, k, avoid=frozenset({tables[dead].me.endpoint}))
    assert owner.id == owner_of(live, k)


def test_one_node_ring_owns_everything():
    t = RoutingTable(Peer(42, "h:1"), BITS)
    assert t.alone and t.successor == t.me
    for k in (0, 41, 42, 43, 2**BITS - 1):
        assert t.next_hop(k) == NextHop(True, t.me)
        assert t.owns(k)


def test_two_node_ring_from_a_notify():
    a, b = Peer(100, "h:1"), Peer(30000, "h:2")
    t = RoutingTable(a, BITS)
    assert t.consider_predecessor(b)  # lone a learns of b: b is predecessor and successor
    assert t.predecessor == b and t.successor == b
    assert t.next_hop(200) == NextHop(True, b)
    assert t.next_hop(30001) == NextHop(False, b)
    assert t.owns(50) and not t.owns(200)


def test_stabilize_adopts_a_closer_successor_and_notify_a_closer_predecessor():
    me = Peer(100, "h:1")
    t = RoutingTable(me, BITS, successors=3)
    t.adopt_successor_list(Peer(500, "h:5"), [Peer(900, "h:9"), Peer(1200, "h:12"), Peer(1500, "h:15")])
    assert [p.id for p in t.successors] == [500, 900, 1200]
    assert not t.consider_successor(Peer(700, "h:7"))
    assert t.consider_successor(Peer(300, "h:3"))
    assert [p.id for p in t.successors] == [300, 500, 900]
    assert t.consider_predecessor(Peer(50, "h:0"))
    assert not t.consider_predecessor(Peer(20, "h:2"))
    assert t.consider_predecessor(Peer(60, "h:6"))


def test_successor_list_stops_where_it_wraps_to_me():
    me = Peer(100, "h:1")
    t = RoutingTable(me, BITS, successors=8)
    t.adopt_successor_list(Peer(200, "h:2"), [Peer(300, "h:3"), me, Peer(200, "h:2")])
    assert [p.id for p in t.successors] == [200, 300]


def test_forget_drops_a_dead_node_everywhere_and_promotes_the_next_successor():
    ids = [100, 5000, 9000, 20000, 40000, 60000]
    t = ideal_table(ids, 100)
    dead = t.successor
    assert t.forget(dead.endpoint)
    assert dead not in t.successors and dead not in t.fingers and t.successor.id == 9000
    assert t.fingers[0] == t.successor


def test_set_finger_fills_the_run_of_fingers_the_same_node_owns():
    ids = [0, 40, 1000, 40000]
    t = RoutingTable(Peer(0, "h:0"), BITS)
    set_idx = t.set_finger(0, Peer(40, "h:40"))
    # starts 1, 2, 4, ..., 32 all have successor 40; start 64 does not
    assert set_idx == [0, 1, 2, 3, 4, 5]
    assert all(t.fingers[i].id == owner_of(ids, finger_start(0, i, BITS)) for i in set_idx)


def test_a_node_without_a_predecessor_owns_keys_only_leniently():
    from dht.routing import Peer, RoutingTable

    rt = RoutingTable(Peer(100, "h:1"), bits=8, successors=2)
    assert rt.owns(5) and rt.owns_strictly(5)  # alone: everything is ours
    rt.adopt_successor_list(Peer(200, "h:2"), [])
    assert rt.owns(150) and not rt.owns_strictly(150)  # predecessor unknown: not surely ours
    rt.predecessor = Peer(50, "h:3")
    assert rt.owns_strictly(60) and not rt.owns_strictly(150) and not rt.owns(150)
