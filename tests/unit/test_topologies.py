"""topologies/graphs.py: node and link counts, delays and roles for each kind; `chordpub topo show`."""

from __future__ import annotations

import json

import networkx as nx
import pytest

from tests.conftest import one_error_line, run_cli
from topologies.graphs import build, describe, hosts


@pytest.mark.parametrize(("spec", "n_hosts", "n_switches", "links"), [
    ("single,4", 4, 1, 4),
    ("linear,4", 4, 4, 7),
    ("linear,3,2", 6, 3, 8),
    ("tree,2,3", 9, 4, 12),           # Mininet's positional order: depth, fanout
    ("tree,fanout=2,depth=3", 8, 7, 14),
    ("barabasi_albert,n=100,m=2", 100, 0, 196),
    ("transit_stub", 72, 0, 89),      # 2 domains of 4 transit routers, 2 stubs of 4 per transit router
])
def test_counts_and_roles(spec, n_hosts, n_switches, links):
    g = build(spec, seed=1)
    info = describe(g)
    assert (info["hosts"], info["switches"], info["links"]) == (n_hosts, n_switches, links)
    assert nx.is_connected(g)
    assert all(g.degree(h) >= 1 for h in hosts(g))


def test_delays_bandwidth_loss_and_seeds():
    g = build("single,3,delay=5ms,bw=10,loss=1")
    assert {(d["delay_ms"], d["bw_mbps"], d["loss_pct"]) for *_, d in g.edges(data=True)} == {(5.0, 10.0, 1.0)}
    assert describe(g)["diameter_ms"] == 10.0  # host - switch - host
    ts = build("transit_stub")
    assert {d for *_, d in ts.edges(data="delay_ms")} == {20.0, 5.0, 2.0}
    w1, w2 = build("waxman,n=40,seed=3"), build("waxman,n=40,seed=3")
    assert nx.utils.graphs_equal(w1, w2) and w1.number_of_nodes() == 40 and nx.is_connected(w1)
    assert all(0 < d <= 50 for *_, d in w1.edges(data="delay_ms"))


def test_topo_show_json_and_png(tmp_path):
    proc = run_cli("topo", "show", "tree,depth=2,fanout=2,delay=5ms", "--png", str(tmp_path / "t.png"), "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert (info["hosts"], info["switches"], info["diameter_ms"]) == (4, 3, 20.0)
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(("spec", "words"), [("mesh,3", "unknown topology"), ("single,x", "integer"),
                                             ("tree,fanout=0", "at least 1"), ("single,3,loss=120", "percentage"),
                                             ("linear,2,3,4", "unexpected value")])
def test_bad_specs_give_one_line(spec, words):
    one_error_line(run_cli("topo", "show", spec), words)
