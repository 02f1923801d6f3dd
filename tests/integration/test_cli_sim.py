"""`chordpub sim ...` as a user runs it: the --json contract, Parquet traces, clear errors."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from tests.conftest import one_error_line, run_cli
from traces.schema import arrow_schema


def sim(*args: str) -> dict:
    proc = run_cli("sim", *args, "--json", timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_sim_lookups_json_and_traces(tmp_path):
    out = sim("lookups", "--nodes", "3000", "--lookups", "20000", "--seed", "4", "--topology",
              "transit_stub", "--out", str(tmp_path / "run1"))
    contract = {"nodes", "lookups", "mean_hops", "p1_hops", "p50_hops", "p99_hops", "build_s", "lookup_s",
                "peak_rss_mb"}
    assert contract <= set(out)
    assert out["nodes"] == 3000 and out["lookups"] == 20000
    assert out["p1_hops"] <= out["p50_hops"] <= out["p99_hops"]
    assert 3 < out["mean_hops"] < 6.5  # about (1/2) log2 3000 = 5.8, shortened by the successor list
    table = pq.read_table(tmp_path / "run1" / "lookups" / "sim.parquet")
    assert table.schema.equals(arrow_schema("lookups"))
    assert table.num_rows == 20000
    hops = table.column("hops").to_numpy()
    assert hops.mean() == pytest.approx(out["mean_hops"], abs=1e-9)
    assert set(table.column("source").to_pylist()) == {"sim"}
    assert table.column("latency_ms").null_count == 0
    assert json.loads((tmp_path / "run1" / "manifest.json").read_text())["config"]["nodes"] == 3000
    again = sim("lookups", "--nodes", "3000", "--lookups", "20000", "--seed", "4", "--topology", "transit_stub")
    assert again["mean_hops"] == out["mean_hops"] and again["latency_p99_ms"] == out["latency_p99_ms"]


def test_sim_load_failures_churn_json(tmp_path):
    load = sim("load", "--nodes", "1000", "--keys", "50000", "--virtual", "4", "--seed", "1")
    assert set(load) >= {"nodes", "keys", "virtual", "mean", "p1", "p50", "p99", "max"}
    assert load["mean"] == 50.0 and load["virtual"] == 4
    fail = sim("failures", "--nodes", "1000", "--keys", "20000", "--fail", "0.25", "--seed", "2",
               "--out", str(tmp_path / "f"))
    assert set(fail) >= {"fail", "failed_lookups", "mean_hops", "mean_timeouts"}
    assert abs(fail["failed_lookups"] - 0.25) < 0.06 and fail["before"]["mean_timeouts"] > 0
    failed_rows = pq.read_table(tmp_path / "f" / "lookups" / "sim.parquet").column("ok").to_pylist().count(False)
    assert failed_rows > 0
    churn = sim("churn", "--nodes", "100", "--rate", "0.05", "--duration", "300", "--lookup-rate", "2",
                "--seed", "3", "--out", str(tmp_path / "c"))
    assert set(churn) >= {"rate", "failed_lookups", "mean_hops", "mean_timeouts"}
    table = pq.read_table(tmp_path / "c" / "lookups" / "sim.parquet")
    assert table.schema.equals(arrow_schema("lookups")) and table.num_rows == churn["lookups"]
    assert table.column("owner").null_count == table.column("ok").to_pylist().count(False)


def test_sim_paper_subset(tmp_path):
    out = sim("paper", "--figures", "10,11", "--seed", "1", "--out", str(tmp_path / "p"))
    assert {r["figure"] for r in out["rows"]} == {"10", "11"} and out["within"]
    files = sorted(p.name for p in (tmp_path / "p" / "lookups").iterdir())
    assert "fig10-1024.parquet" in files and "fig11-0.3.parquet" in files
    assert json.loads((tmp_path / "p" / "paper.json").read_text())["rows"] == out["rows"]


@pytest.mark.parametrize(("args", "words"), [
    (["lookups", "--nodes", "10", "--lookups", "5", "--bits", "65"], "bits"),
    (["lookups", "--nodes", "300", "--lookups", "5", "--bits", "8"], "do not fit"),
    (["lookups", "--nodes", "0", "--lookups", "5"], "at least one node"),
    (["lookups", "--nodes", "-3"], "at least one node"),
    (["lookups", "--nodes", "10"], "--lookups is required"),
    (["lookups", "--nodes", "10", "--lookups", "5", "--topology", "mesh"], "unknown topology"),
    (["failures", "--nodes", "10", "--keys", "10", "--fail", "1"], "fraction"),
    (["churn", "--rate", "0.1", "--stabilize", "0"], "stabilize"),
    (["paper", "--figures", "7"], "--figures"),
    (["paper", "--scale", "huge"], "--scale"),
    (["stretch", "--pns", "two"], "--pns"),
    (["stretch", "--nodes", "1"], "--nodes"),
    (["stretch", "--topology", "mesh"], "unknown topology"),
])
def test_impossible_parameters_give_one_line(args, words):
    one_error_line(run_cli("sim", *args), words)


def test_sim_lookups_with_pns_reports_stretch_beside_plain_chords(tmp_path):
    out = sim("lookups", "--nodes", "2000", "--lookups", "5000", "--seed", "2", "--topology", "transit_stub",
              "--pns", "8")
    assert {"stretch_mean", "stretch_p50", "stretch_p99", "plain_stretch_p50", "plain_latency_p50_ms",
            "latency_p50_reduction"} <= set(out)
    assert out["pns"] == 8 and out["routing"] == "recursive"
    assert 1 <= out["stretch_p50"] < 0.6 * out["plain_stretch_p50"]
    assert out["latency_p50_ms"] < out["plain_latency_p50_ms"]
    plain = sim("lookups", "--nodes", "2000", "--lookups", "5000", "--seed", "2", "--topology", "transit_stub")
    # the baseline in the PNS run is the plain run: same ring, keys and origins
    assert plain["stretch_p50"] == out["plain_stretch_p50"] and plain["mean_hops"] == out["plain_mean_hops"]
    it = sim("lookups", "--nodes", "2000", "--lookups", "5000", "--seed", "2", "--iterative")
    assert it["routing"] == "iterative" and it["stretch_p50"] > 1


def test_sim_stretch_draws_stretch_against_n_for_each_k(tmp_path):
    png = tmp_path / "stretch.png"
    out = sim("stretch", "--nodes", "500,2000", "--pns", "0,4,16", "--lookups", "3000", "--png", str(png))
    rows = out["rows"]
    assert len(rows) == 2 * 2 * 3 and png.stat().st_size > 10_000
    for spec in ("transit_stub", "lognormal,median=50,sigma=0.5"):
        for n in (500, 2000):
            by_k = {r["pns"]: r["stretch_p50"] for r in rows if r["topology"] == spec and r["nodes"] == n}
            assert by_k[0] > by_k[4] > by_k[16] >= 1, by_k
