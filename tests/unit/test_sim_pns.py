"""Proximity neighbour selection in the simulator: the fingers it picks and the routes it takes over them
equal a brute-force reading of the rule and dht/routing.py's next-hop loop."""

from __future__ import annotations

import bisect

import networkx as nx
import numpy as np
import pytest

from dht.ids import key_id
from sim.latency import LognormalLatency, from_spec, position_delay, topology_latency
from sim.lookup import lookups
from sim.proximity import compare, pns_fingers, stretch
from sim.ring import random_ring, ring_from_ids
from tests.helpers.routing import live_rule_lookup, routing_tables


def brute_pns_finger(ids: list[int], pos: int, j: int, k: int, bits: int, delay) -> int:
    """The rule in words: the first k nodes of [id + 2^j, id + 2^(j+1)), the nearest (first of equals);
    an empty interval keeps successor(id + 2^j)."""
    n, size = len(ids), 1 << bits
    me = ids[pos]
    first = bisect.bisect_left(ids, (me + (1 << j)) % size) % n
    candidates = []
    for t in range(k):
        cand = (first + t) % n
        d = (ids[cand] - me) % size
        inside = (1 << j) <= d and (j + 1 >= bits or d < (1 << (j + 1)))
        if cand == pos or not inside:
            break
        candidates.append(cand)
    if not candidates:
        return first
    return min(candidates, key=lambda c: (delay(pos, c), candidates.index(c)))


@pytest.mark.parametrize(("n", "k", "spec"), [(64, 4, "lognormal,median=50,sigma=0.5"), (300, 16, "transit_stub"),
                                              (300, 2, "waxman,n=30")])
def test_pns_fingers_and_routes_equal_the_rule_and_the_live_routing(n, k, spec):
    bits = 64
    ring = ring_from_ids([key_id(f"10.2.{i // 256}.{i % 256}:5555", bits) for i in range(n)], bits)
    model = from_spec(spec, n, seed=7)
    delay = position_delay(model, ring.real)

    def pair(a: int, b: int) -> float:
        return float(delay(np.array([a]), np.array([b]))[0])

    ft = pns_fingers(ring, k, model)
    ids = [int(i) for i in ring.ids]
    for pos in range(0, n, 7):
        for j in range(ft.base, bits):
            assert ft.table[j - ft.base, pos] == brute_pns_finger(ids, pos, j, k, bits, pair)
    tables = routing_tables(ids, bits, ring.r, lambda pos, j: brute_pns_finger(ids, pos, j, k, bits, pair))
    batch = lookups(ring, 600, seed=n, fingers=ft, latency=model)
    assert batch.ok.all()
    for key, o, owner, hops in zip(batch.keys, batch.origins, batch.owners, batch.hops, strict=True):
        assert (int(ring.ids[owner]), int(hops)) == live_rule_lookup(tables, ids[o], int(key))
    # the owner is the true one: the first id at or after the key
    assert (batch.owners == ring.owner_index(batch.keys)).all()


def test_pns_takes_the_known_nearest_candidate_on_a_hand_made_graph():
    """Four hosts: h0 with links of 50, 1 and 9 ms to h1, h2, h3. The node of id 0 sits on h0; its top
    interval [128, 256) holds nodes on h1, h2, h3 and h1 again: the one on h2 (1 ms) must be its finger."""
    g = nx.Graph()
    for h in ("h0", "h1", "h2", "h3"):
        g.add_node(h, kind="host")
    g.add_edge("h0", "h1", delay_ms=50.0)
    g.add_edge("h0", "h2", delay_ms=1.0)
    g.add_edge("h0", "h3", delay_ms=9.0)
    bits = 8
    ring = ring_from_ids([0, 130, 140, 150, 200], bits, successors=1)  # 130.. lie in [128, 256)
    model = topology_latency(g, ring.real_nodes, seed=0)
    model.attach[:] = [0, 1, 2, 3, 1]  # real node of id 0 on h0; ids 130, 140, 150, 200 on h1, h2, h3, h1
    top = bits - 1
    for k in (2, 4, 16):  # 130 and 140 already include the nearest
        ft = pns_fingers(ring, k, model)
        assert ft.table[top - ft.base, 0] == 2  # id 140, on h2
    assert pns_fingers(ring, 1, model).pns == 0  # one sample is plain Chord
    one = lookups(ring, 1, keys=np.array([199], dtype=np.uint64), origins=np.array([0]),
                  fingers=pns_fingers(ring, 4, model), latency=model)
    assert (one.owners[0], one.latency_ms[0]) == (4, 1.0 + 10.0)  # 0 -> 140 (h2, 1 ms) -> 150 (h3, 1 + 9 ms)


def test_pns_lowers_stretch_on_transit_stub_and_iterative_stretch_is_round_trips():
    ring = random_ring(2000, seed=3)
    model = from_spec("transit_stub", 2000, seed=3)
    recursive = compare(ring, model, 16, 5000, seed=4)
    s = recursive.summary()
    assert s["stretch_p50"] < 0.6 * s["plain_stretch_p50"]
    assert s["pns_latency_p50_ms"] < s["plain_latency_p50_ms"]
    it = lookups(ring, 300, seed=5, latency=model, iterative=True)
    delay = position_delay(model, ring.real)
    # iterative latency: one round trip from the origin to each node asked after the first; a
    # lookup that needs no hop costs nothing
    zero = it.hops == 0
    assert (it.latency_ms[zero] == 0).all()
    st = stretch(ring, it, model, iterative=True)
    direct = delay(it.origins, it.owners)
    good = direct > 0
    assert np.allclose(st[good], it.latency_ms[good] / (2 * direct[good]))
    assert np.isnan(st[~good]).all()


def test_numba_delay_equals_the_numpy_model():
    ring = random_ring(500, seed=1, virtual=3)
    model = LognormalLatency(40.0, 0.7, seed=9)
    batch = lookups(ring, 2000, seed=2, latency=model)
    hops = lookups(ring, 2000, seed=2)
    assert np.isnan(hops.latency_ms).all()
    assert (batch.hops == hops.hops).all()
    one_hop = batch.hops == 1
    delay = position_delay(model, ring.real)
    assert one_hop.any()
    # a one-hop lookup's latency is the single delay origin -> the node that named the owner
    assert np.allclose(batch.latency_ms[one_hop], delay(batch.origins[one_hop], batch.last[one_hop]))


def test_the_owner_reached_stretch_adds_the_last_step_that_pns_cannot_shorten():
    ring = random_ring(2000, seed=3)
    model = from_spec("transit_stub", 2000, seed=3)
    delay = position_delay(model, ring.real)
    batch = lookups(ring, 500, seed=6, latency=model)
    named, reached = stretch(ring, batch, model), stretch(ring, batch, model, reached=True)
    direct = delay(batch.origins, batch.owners)
    good = direct > 0
    last_hop = delay(batch.last, batch.owners)
    assert np.allclose(reached[good], (batch.latency_ms[good] + last_hop[good]) / direct[good])
    assert (reached[good] >= named[good]).all() and (reached[good] > named[good]).any()
    it = lookups(ring, 300, seed=5, latency=model, iterative=True)
    it_direct = delay(it.origins, it.owners)
    ok = it_direct > 0
    assert np.allclose(stretch(ring, it, model, iterative=True, reached=True)[ok],
                       (it.latency_ms[ok] + 2 * it_direct[ok]) / (2 * it_direct[ok]))


@pytest.mark.parametrize("alive", [False, True])
def test_prs_names_the_owner_from_the_successor_list_on_a_prefix_of_the_same_route(alive):
    """Proximity route selection for the last hop: the lookup ends at the first node of its route whose
    successor list holds the owner, which names it. Same owners, a prefix of the same route (never more
    hops or latency), and every lookup ends within r of its owner; with nodes marked alive the
    dead-node loop agrees. (Take `listed_owner`'s check away and the ends are 1 step from the owner.)"""
    ring = random_ring(2000, 64, seed=5, successors=8)
    model = from_spec("transit_stub", 2000, 5)
    fingers = pns_fingers(ring, 16, model)
    up = np.ones(ring.size, dtype=bool) if alive else None
    plain = lookups(ring, 5000, seed=6, latency=model, fingers=fingers, alive=up)
    prs = lookups(ring, 5000, keys=plain.keys, origins=plain.origins, latency=model, fingers=fingers, alive=up,
                  prs=True)
    assert (prs.owners == plain.owners).all() and prs.ok.all()
    assert (prs.hops <= plain.hops).all() and (prs.latency_ms <= plain.latency_ms + 1e-9).all()
    steps = (prs.owners - prs.last) % ring.size
    assert ((steps >= 1) & (steps <= 8)).all() and (steps > 1).mean() > 0.5
    assert prs.hops.mean() < plain.hops.mean() - 0.5
    assert np.nanmedian(stretch(ring, prs, model, reached=True)) < np.nanmedian(stretch(ring, plain, model,
                                                                                        reached=True))
