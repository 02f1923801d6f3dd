"""Latency over a topology: a lookup's latency is the sum of its hops' shortest-path delays."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from dht.ids import key_id
from sim.latency import ConstantLatency, LatencyError, LognormalLatency, from_spec, topology_latency
from sim.lookup import lookups
from sim.ring import ring_from_ids
from tests.unit.test_sim_crosscheck import routing_tables
from topologies.graphs import TopologyError, build, describe, hosts, parse_spec


def hand_made_graph() -> nx.Graph:
    """Four hosts around two switches; the direct a-d link is slower than going round."""
    g = nx.Graph()
    for h in "abcd":
        g.add_node(h, kind="host")
    for s in ("s1", "s2"):
        g.add_node(s, kind="switch")
    g.add_edge("a", "s1", delay_ms=1.0)
    g.add_edge("b", "s1", delay_ms=2.0)
    g.add_edge("s1", "s2", delay_ms=10.0)
    g.add_edge("c", "s2", delay_ms=3.0)
    g.add_edge("d", "s2", delay_ms=4.0)
    g.add_edge("a", "d", delay_ms=30.0)
    g.graph["spec"] = "hand-made"
    return g


def lookup_path(tables, origin: int, k: int) -> list[int]:
    cur, path = origin, [origin]
    while True:
        step = tables[cur].next_hop(k)
        if step.done:
            return path
        cur = step.peer.id
        path.append(cur)


def test_lookup_latency_is_the_sum_of_its_hops_shortest_path_delays():
    g = hand_made_graph()
    n = 40
    ids = [key_id(f"lat-{i}") for i in range(n)]
    ring = ring_from_ids(ids, successors=2)
    model = topology_latency(g, n, seed=3)
    assert sorted(model.host_names) == ["a", "b", "c", "d"]
    dist = dict(nx.all_pairs_dijkstra_path_length(g, weight="delay_ms"))
    assert dist["a"]["d"] == 15.0  # round through the switches, not the 30 ms link
    batch = lookups(ring, 500, seed=4, latency=model)
    tables = routing_tables(ids, 64, 2)
    host_of = {int(ring.ids[pos]): model.host_names[model.attach[ring.real[pos]]] for pos in range(n)}
    multi_hop = 0
    for i in range(len(batch)):
        path = lookup_path(tables, int(ring.ids[batch.origins[i]]), int(batch.keys[i]))
        want = sum(dist[host_of[x]][host_of[y]] for x, y in zip(path, path[1:], strict=False))
        assert batch.latency_ms[i] == pytest.approx(want, abs=1e-4)
        assert batch.hops[i] == len(path) - 1
        multi_hop += len(path) > 2
    assert multi_hop > 100


def test_timeouts_add_their_cost_and_no_model_gives_no_latency():
    ring = ring_from_ids([key_id(f"t-{i}") for i in range(200)], successors=3)
    alive = np.ones(ring.size, dtype=bool)
    alive[::3] = False
    b = lookups(ring, 300, seed=1, alive=alive, latency=ConstantLatency(5.0),
                timeout_ms=100.0)
    assert np.allclose(b.latency_ms, 5.0 * b.hops + 100.0 * b.timeouts)
    assert b.timeouts.sum() > 0
    assert np.isnan(lookups(ring, 10, seed=1).latency_ms).all()


def test_lognormal_pairs_are_symmetric_and_fixed():
    m = LognormalLatency(50.0, 0.5, seed=7)
    a, b = np.arange(1000), np.arange(1000, 2000)
    d = m.delay(a, b)
    assert np.array_equal(d, m.delay(b, a)) and np.array_equal(d, m.delay(a, b))
    assert 40 < np.median(d) < 60 and (d > 0).all()
    assert (m.delay(a, a) == 0).all()


@pytest.mark.parametrize("spec", ["single,4", "linear,3,2", "tree,depth=2,fanout=3", "waxman,n=60",
                                  "barabasi_albert,n=80,m=2", "transit_stub,transits=2,stubs=1,delay=2ms"])
def test_every_topology_is_connected_with_delays(spec):
    g = build(spec, seed=1)
    assert nx.is_connected(g)
    assert all(d >= 0 for _, _, d in g.edges(data="delay_ms"))
    assert hosts(g) and describe(g)["nodes"] == g.number_of_nodes()
    model = from_spec(spec, 50, seed=2)
    assert model.delay(np.arange(50), np.arange(50)[::-1]).min() >= 0


def test_mininet_shapes_match_mininet():
    g = build("tree,depth=2,fanout=3")
    assert len(hosts(g)) == 9 and g.number_of_nodes() - 9 == 4
    assert parse_spec("linear,4") == ("linear", {"k": "4"})
    assert build("transit_stub,delay=7ms").edges[next(iter(build("transit_stub").edges))]["delay_ms"] == 7.0


@pytest.mark.parametrize(("spec", "err", "words"), [
    ("mesh,4", TopologyError, "unknown topology"),
    ("tree,depth=x", TopologyError, "integer"),
    ("tree,colour=2", TopologyError, "not 'colour'"),
    ("barabasi_albert,n=3,m=5", TopologyError, "m < n"),
    ("constant,ms=-1", LatencyError, ">= 0"),
    ("lognormal,mu=3", LatencyError, "median"),
])
def test_bad_specs_are_refused_with_a_reason(spec, err, words):
    with pytest.raises(err, match=words):
        from_spec(spec, 10) if err is LatencyError else build(spec)
