"""The Spark aggregation against what the rows say, computed independently (traces/spark.py)."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import one_error_line, run_cli
from traces.spark import ACCURACY, QUICK_JVM, analyze, find_traces, load, table_rows
from traces.spark_connect import CONNECT_MODE
from traces.writer import JsonlWriter, ParquetWriter, make_run_dir

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


def lookup_rows(run: str, n: int, seed: int, nodes: int = 64, source: str = "sim") -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        ok = rng.random() > 0.05
        rows.append({"run": run, "source": source, "nodes": nodes, "key_id": str(rng.getrandbits(64)),
                     "origin": str(rng.getrandbits(64)), "owner": str(rng.getrandbits(64)) if ok else None,
                     "hops": rng.randint(0, 9), "timeouts": rng.choice([0, 0, 0, 1, 2]),
                     "latency_ms": rng.uniform(0.1, 50), "ok": ok, "ts": 1.7e9 + rng.random()})
    return rows


def delivery_rows(run: str, topic: str, publisher: str, subscriber: str, seqs: list[int],
                  mode: str = "direct") -> list[dict]:
    return [{"run": run, "source": "live", "mode": mode, "topic": topic, "publisher": publisher,
             "subscriber": subscriber, "seq": s, "sent_ns": 10**18 + s * 1000, "recv_ns": 10**18 + s * 1000 + 500,
             "latency_ms": 0.5 + (s % 7) / 10, "recovered": s % 10 == 0} for s in seqs]


def write_run(root: Path, run: str, lookups: list[dict], deliveries: list[dict], fmt: str) -> Path:
    run_dir = make_run_dir(root, run, {"fmt": fmt})
    for table, rows in (("lookups", lookups), ("deliveries", deliveries)):
        if fmt == "jsonl":
            with JsonlWriter(run_dir / table / "part.jsonl", table) as w:
                for r in rows:
                    w.write(r)
        else:
            with ParquetWriter(run_dir / table / "part.parquet", table) as w:
                w.write_rows(rows)
    return run_dir


def approx_equal(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(approx_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(approx_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_the_same_rows_as_parquet_and_as_json_lines_give_identical_aggregates(spark, tmp_path):
    """Both formats aggregate alike; and analyze leaves no table cached (a shared Spark Connect server
    would keep every table any client ever read).

    To see it fail: drop the `unpersist` at the end of `loaded` (traces/spark.py)."""
    lookups = lookup_rows("same", 3000, seed=1)
    deliveries = delivery_rows("same", "t", "p", "s", list(range(1, 400)) + [5, 6])
    a = analyze(spark, [write_run(tmp_path / "a", "same", lookups, deliveries, "jsonl")])
    read_again = table_rows(spark, find_traces([tmp_path / "a" / "same"]), "lookups")
    assert not read_again.storageLevel.useMemory, "analyze left the table cached (a shared server keeps it)"
    load(spark, find_traces([tmp_path / "a" / "same"]), "lookups")
    assert read_again.storageLevel.useMemory, "load caches what it read: the check above can see it"
    read_again.unpersist()
    b = analyze(spark, [write_run(tmp_path / "b", "same", lookups, deliveries, "parquet")])
    assert a["lookups"] and a["deliveries"]
    assert approx_equal(a["lookups"], b["lookups"]), (a["lookups"], b["lookups"])
    assert approx_equal(a["deliveries"], b["deliveries"])
    assert a["bad_rows"]["lookups"]["count"] == b["bad_rows"]["lookups"]["count"] == 0


def test_mean_hops_is_exact_and_percentiles_within_the_stated_error(spark, tmp_path):
    rng = np.random.default_rng(7)
    n = 200_000
    hops = rng.binomial(24, 0.3, size=n)
    latency = rng.lognormal(1.0, 0.8, size=n)
    run_dir = make_run_dir(tmp_path, "numpy", {})
    with ParquetWriter(run_dir / "lookups" / "sim.parquet", "lookups") as w:
        w.write_columns({"run": ["numpy"] * n, "source": ["sim"] * n, "nodes": np.full(n, 1 << 14),
                         "key_id": rng.integers(0, 2**63, n, dtype=np.uint64),
                         "origin": rng.integers(0, 2**63, n, dtype=np.uint64),
                         "owner": rng.integers(0, 2**63, n, dtype=np.uint64), "hops": hops,
                         "timeouts": np.zeros(n, dtype=np.int64), "latency_ms": latency,
                         "ok": np.ones(n, dtype=bool), "ts": np.zeros(n)})
    (row,) = analyze(spark, [run_dir])["lookups"]
    assert row["count"] == n and row["nodes"] == 1 << 14 and row["half_log2_n"] == 7.0
    assert abs(row["mean_hops"] - hops.mean()) <= 1e-6
    for q, key, values in ((0.5, "p50_hops", hops), (0.99, "p99_hops", hops), (0.5, "latency_p50_ms", latency),
                           (0.99, "latency_p99_ms", latency)):
        lo, hi = np.quantile(values, [max(q - 1 / ACCURACY, 0), min(q + 1 / ACCURACY, 1)], method="inverted_cdf")
        assert lo <= row[key] <= hi, (key, row[key], lo, hi)
    assert sum(row["hop_histogram"].values()) == n
    assert row["hop_histogram"] == {str(h): int(c) for h, c in zip(*np.unique(hops, return_counts=True),
                                                                    strict=True)}


def test_an_injected_duplicate_and_gap_are_counted_exactly(spark, tmp_path):
    seqs = list(range(1, 101))
    seqs.insert(50, 50)  # seq 50 twice
    seqs.insert(10, 10)  # and seq 10 twice
    for gone in (70, 71, 72):
        seqs.remove(gone)
    rows = (delivery_rows("g", "alpha", "p1", "s1", seqs)
            + delivery_rows("g", "alpha", "p2", "s1", list(range(20, 60)))  # a late joiner: no gap
            + delivery_rows("g", "beta", "p3", "s2", [1, 2, 4, 5], mode="relay"))
    result = analyze(spark, [write_run(tmp_path, "g", [], rows, "jsonl")])
    by_topic = {r["topic"]: r for r in result["deliveries"]}
    assert by_topic["alpha"]["count"] == len(seqs) + 40
    assert by_topic["alpha"]["duplicates"] == 2 and by_topic["alpha"]["missing"] == 3
    assert by_topic["alpha"]["publishers"] == 2 and by_topic["alpha"]["subscribers"] == 1
    assert by_topic["beta"]["mode"] == "relay"
    assert by_topic["beta"]["duplicates"] == 0 and by_topic["beta"]["missing"] == 1
    expected_recovered = sum(s % 10 == 0 for s in set(seqs)) + sum(s % 10 == 0 for s in range(20, 60))
    assert by_topic["alpha"]["recovered"] == expected_recovered
    assert by_topic["alpha"]["latency_max_ms"] == pytest.approx(max(0.5 + (s % 7) / 10 for s in seqs))


def test_bad_rows_are_reported_and_counted_never_aggregated(spark, tmp_path):
    good = lookup_rows("bad", 500, seed=3, source="live")
    run_dir = write_run(tmp_path, "bad", good, [], "jsonl")
    path = run_dir / "lookups" / "part.jsonl"
    wrong_type = dict(good[0], hops="three")
    unknown_source = dict(good[1], source="carrier-pigeon")
    bad_id = dict(good[2], origin="0xdeadbeef")
    torn = json.dumps(good[3])[:40]
    with open(path, "a") as f:
        for row in (wrong_type, unknown_source, bad_id):
            f.write(json.dumps(row) + "\n")
        f.write(torn)  # a crash mid-line
    result = analyze(spark, [run_dir])
    (row,) = result["lookups"]
    assert row["count"] == 500
    assert row["mean_hops"] == pytest.approx(np.mean([r["hops"] for r in good if r["ok"]]), abs=1e-9)
    bad = result["bad_rows"]["lookups"]
    assert bad["count"] == 4
    problems = {e["problem"] for e in bad["examples"]}
    assert problems == {"not a row of the schema (torn or ill-typed)", "unknown source", "origin is not a decimal id"}
    assert all(e["file"].endswith("part.jsonl") for e in bad["examples"])


def test_analyze_cli_json_out_and_errors(spark, tmp_path):
    run_dir = write_run(tmp_path / "runs", "cli", lookup_rows("cli", 300, seed=5, nodes=32),
                        delivery_rows("cli", "t", "p", "s", [1, 2, 3, 5]), "jsonl")
    shared = os.environ.get("SPARK_MASTER")  # the suite's Connect server (tests/plugin_spark.py), named as a user would
    proc = run_cli("analyze", str(run_dir), "--json", "--out", str(tmp_path / "out"),
                   *(["--master", shared] if shared else []), timeout=180)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    (lk,) = out["lookups"]
    assert {"run", "source", "nodes", "count", "mean_hops", "p50_hops", "p99_hops", "mean_timeouts",
            "latency_p50_ms", "latency_p99_ms"} <= set(lk)
    (dl,) = out["deliveries"]
    assert {"run", "source", "mode", "topic", "count", "duplicates", "latency_p50_ms", "latency_p99_ms"} <= set(dl)
    assert dl["missing"] == 1 and lk["count"] == 300
    assert_same(analyze(spark, [run_dir]), out)
    for name in ("lookups.parquet", "lookups.csv", "deliveries.parquet", "deliveries.csv", "summary.json"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    assert json.loads((tmp_path / "out" / "summary.json").read_text()) == out

    missing = run_cli("analyze", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "no such directory" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    (tmp_path / "empty").mkdir()
    empty = run_cli("analyze", str(tmp_path / "empty"))
    assert empty.returncode == 2 and "no traces" in empty.stderr


def assert_same(a: dict, b: dict) -> None:
    """Two analyses of one run agree (two sessions: the suite's and a local driver, or the CLI's)."""
    assert a["bad_rows"] == b["bad_rows"] and a["files"] == b["files"]
    (alk,), (blk,) = a["lookups"], b["lookups"]
    assert {k: alk[k] for k in ("count", "failed", "p50_hops", "p99_hops", "max_hops")} == \
        {k: blk[k] for k in ("count", "failed", "p50_hops", "p99_hops", "max_hops")}
    assert alk["mean_hops"] == pytest.approx(blk["mean_hops"])
    assert len(a["deliveries"]) == len(b["deliveries"])
    for adl, bdl in zip(a["deliveries"], b["deliveries"], strict=True):
        assert {k: adl[k] for k in ("count", "expected", "delivered", "lost", "duplicates")} == \
            {k: bdl[k] for k in ("count", "expected", "delivered", "lost", "duplicates")}


def test_a_spark_server_on_a_port_in_use_is_one_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = run_cli("spark-server", "--port", str(taken.getsockname()[1]))
    one_error_line(proc, "is not free")


@pytest.mark.slow
def test_the_same_job_runs_under_spark_submit(spark, tmp_path):
    """A local driver that spark-submit starts gives what the suite's session (a Spark Connect server's
    under `make test`) gives."""
    run_dir = write_run(tmp_path, "submit", lookup_rows("submit", 200, seed=9),
                        delivery_rows("submit", "t", "p", "s", [1, 2, 3, 5, 5]), "parquet")
    submit = Path(sys.executable).with_name("spark-submit")
    assert submit.exists(), "pyspark's spark-submit should be installed beside the interpreter"
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_MASTER", CONNECT_MODE)}  # spark-submit's master
    env |= {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    # a small job's driver: the quick JVM options session() gives a local one (spark-submit starts the JVM itself)
    proc = subprocess.run([str(submit), "--master", "local[1]", "--driver-java-options", QUICK_JVM,
                           str(ROOT / "traces" / "report.py"), str(run_dir), "--json"],
                          capture_output=True, text=True, timeout=240, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    (row,) = out["lookups"]
    assert row["run"] == "submit" and row["count"] == 200
    assert out["deliveries"][0]["duplicates"] == 1 and out["deliveries"][0]["lost"] == 1
    assert_same(analyze(spark, [run_dir]), out)
