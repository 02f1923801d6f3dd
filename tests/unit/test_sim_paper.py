"""The Chord paper's simulation results (SIGCOMM'01 §6) at small scale, within issue 4's tolerances."""

from __future__ import annotations

import numpy as np
import pytest

from sim import paper
from sim.churn import continuous_churn
from sim.failures import simultaneous_failures
from sim.load import load
from sim.ring import RingError


@pytest.fixture(scope="module")
def table():
    results, rows = paper.run("small", seed=0)
    return {(r["figure"], r["x"], r["metric"]): r for r in rows}, results


def test_every_figure_has_its_points(table):
    _, results = table
    assert sorted({r.figure for r in results}, key=int) == list(paper.FIGURES)
    assert len(results) == len(paper.points("small"))


def test_fig8_keys_per_node_tail(table):
    rows, _ = table
    assert abs(rows[("8", 500_000.0, "p99/mean")]["ours"] - 4.6) <= 0.4
    assert rows[("8", 500_000.0, "p1/mean")]["ours"] == 0


def test_fig9_virtual_nodes_tighten_the_load(table):
    rows, _ = table
    p99 = [rows[("9", float(v), "p99/mean")]["ours"] for v in (1, 2, 5, 10, 20)]
    p1 = [rows[("9", float(v), "p1/mean")]["ours"] for v in (1, 2, 5, 10, 20)]
    assert p99[-1] <= 1.9
    assert p99 == sorted(p99, reverse=True) and p1 == sorted(p1)


def test_fig10_half_log2_n_hops(table):
    rows, _ = table
    for (fig, x, metric), row in rows.items():
        if fig == "10" and metric == "mean hops":
            assert abs(row["ours"] - 0.5 * np.log2(x)) <= 1, row
    assert abs(rows[("10", 0.0, "hops per doubling of N")]["ours"] - 0.5) <= 0.05


def test_fig11_failed_lookups_track_failed_nodes(table):
    rows, _ = table
    for p in (0.1, 0.2, 0.3, 0.4, 0.5):
        assert abs(rows[("11", p, "failed lookups")]["ours"] - p) <= 0.02


def test_fig12_churn_level_and_shape(table):
    rows, _ = table
    low, mid, high = (rows[("12", r, "failed lookups")]["ours"] for r in (0.01, 0.05, 0.1))
    assert low <= 0.015
    assert 0.01 <= high <= 0.06  # "about 3%" at 3 failures per stabilization round
    assert low < mid < high
    assert all(r["within"] is not False for r in rows.values())


def test_replicas_keep_keys_that_one_copy_loses():
    one = simultaneous_failures(3000, 50_000, 0.3, replicas=1, seed=5)
    three = simultaneous_failures(3000, 50_000, 0.3, replicas=3, seed=5)
    assert abs(one.keys_lost - 0.3) < 0.03
    assert three.keys_lost < 0.05 and three.failed_lookups < one.failed_lookups
    assert one.before["mean_timeouts"] > 0.3  # stale fingers and successors met dead nodes
    assert one.mean_timeouts == 0  # the stabilized ring knows only live nodes


def test_churn_is_reproducible_and_quiet_without_churn():
    a = continuous_churn(200, 0.05, 30.0, 600.0, lookup_rate=2.0, seed=9)
    b = continuous_churn(200, 0.05, 30.0, 600.0, lookup_rate=2.0, seed=9)
    assert a.summary() == b.summary() and a.joins > 0 and a.failures > 0
    still = continuous_churn(200, 0.0, 30.0, 300.0, lookup_rate=2.0, seed=9)
    assert still.failed_lookups == 0 and still.mean_timeouts == 0


def test_load_counts_every_key_once():
    res = load(500, 12_345, virtual=3, seed=1, trials=2)
    assert res.counts.sum() == 2 * 12_345 and len(res.counts) == 1000


@pytest.mark.parametrize(("call", "words"), [
    (lambda: simultaneous_failures(100, 10, 1.0), "fraction"),
    (lambda: simultaneous_failures(100, 0, 0.1), "key"),
    (lambda: continuous_churn(1, 0.1, 30, 100), "2 nodes"),
    (lambda: continuous_churn(100, 0.1, 0, 100), "stabilize"),
    (lambda: load(10, 10, trials=0), "trials"),
])
def test_impossible_parameters_are_refused(call, words):
    with pytest.raises(RingError, match=words):
        call()
