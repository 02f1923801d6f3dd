"""The simulator meets Spark: its traces aggregate to its own summary, and its points run as Spark tasks."""

from __future__ import annotations

import json

import pytest

from tests.conftest import one_error_line, run_cli
from traces.spark import analyze


def test_spark_mean_hops_of_a_sim_run_equals_the_sim_summary(spark, tmp_path):
    proc = run_cli("sim", "lookups", "--nodes", "5000", "--lookups", "30000", "--seed", "11", "--out",
                   str(tmp_path / "simrun"), "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    result = analyze(spark, [tmp_path / "simrun"])
    (row,) = result["lookups"]
    assert row["source"] == "sim" and row["nodes"] == 5000 and row["count"] == 30000
    assert row["mean_hops"] == pytest.approx(summary["mean_hops"], abs=1e-6)
    assert row["p50_hops"] == summary["p50_hops"] and row["failed"] == 0
    assert row["latency_p50_ms"] == pytest.approx(summary["latency_p50_ms"], rel=0.01)


def test_sim_paper_points_as_spark_tasks_match_the_local_engine(spark):
    args = ("sim", "paper", "--figures", "10,12", "--seed", "3", "--json")
    local = run_cli(*args, timeout=300)
    remote = run_cli(*args, "--engine", "spark", "--master", "local[2]", timeout=300)
    assert local.returncode == 0 and remote.returncode == 0, remote.stderr
    a, b = json.loads(local.stdout), json.loads(remote.stdout)
    assert b["engine"] == "spark" and a["rows"] == b["rows"] and b["within"]
    connect = run_cli(*args, "--engine", "spark", "--master", "sc://127.0.0.1:1")  # no RDDs over Spark Connect
    one_error_line(connect, "Spark Connect", "--master")


def test_keys_per_node_from_a_sim_load_run(spark, tmp_path):
    proc = run_cli("sim", "load", "--nodes", "2000", "--keys", "100000", "--virtual", "5", "--seed", "2",
                   "--out", str(tmp_path / "loadrun"), "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    (row,) = analyze(spark, [tmp_path / "loadrun"])["load"]
    assert (row["nodes"], row["keys"], row["virtual"]) == (2000, 100000, 5)
    assert row["mean"] == pytest.approx(summary["mean"], abs=1e-9) and row["max"] == summary["max"]
    assert abs(row["p99"] - summary["p99"]) <= 2  # percentile_approx vs numpy's interpolation
