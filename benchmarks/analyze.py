"""`chordpub analyze` on 10^7 lookup rows, wall clock with the JVM start, against pyarrow in-process.

    python benchmarks/analyze.py [--rows 10000000] [--master local[*]]

Writes --rows simulator-like lookup rows (4 runs of different ring sizes) as Parquet through
traces.writer.ParquetWriter, then times, in the same run:
  spark:    `chordpub analyze DIR --json` as a user runs it: a fresh process, JVM start included;
  baseline: the same per-group count, failed, mean hops, mean timeouts and p50/p99 of hops and
            latency computed in one process with pyarrow + numpy (read included; no JVM).
Goal: spark <= 30 s wall on this machine. The ratio spark / baseline is printed beside it: it is
the price of the JVM and of an engine that also runs on a cluster.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.spread import said, spread, verdict  # noqa: E402
from traces.writer import ParquetWriter, make_run_dir  # noqa: E402

RUNS = 4
CHUNK = 1_000_000


def write_rows(root: Path, rows: int, seed: int = 1) -> Path:
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    per_run = rows // RUNS
    for r in range(RUNS):
        nodes = 1 << (10 + r)
        run_dir = make_run_dir(root, f"bench-{r}", {"rows": per_run, "nodes": nodes})
        with ParquetWriter(run_dir / "lookups" / "sim.parquet", "lookups") as w:
            left = per_run
            while left:
                n = min(CHUNK, left)
                left -= n
                w.write_columns({
                    "run": pa.array([f"bench-{r}"] * n, pa.string()), "source": pa.array(["sim"] * n, pa.string()),
                    "nodes": np.full(n, nodes, dtype=np.int64),
                    "key_id": rng.integers(0, 2**63, n, dtype=np.uint64),
                    "origin": rng.integers(0, 2**63, n, dtype=np.uint64),
                    "owner": rng.integers(0, 2**63, n, dtype=np.uint64),
                    "hops": rng.binomial(2 * (10 + r), 0.25, n).astype(np.int64),
                    "timeouts": rng.poisson(0.05, n).astype(np.int64),
                    "latency_ms": rng.lognormal(3.0, 0.5, n), "ok": rng.random(n) > 0.01, "ts": np.zeros(n)})
    return root


def baseline(root: Path) -> dict:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    out = {}
    for path in sorted(root.rglob("lookups/*.parquet")):
        t = pq.read_table(path, columns=["run", "source", "nodes", "hops", "timeouts", "latency_ms", "ok"])
        for run in pc.unique(t["run"]).to_pylist():
            g = t.filter(pc.equal(t["run"], run))
            ok = g["ok"].to_numpy(zero_copy_only=False)
            hops = g["hops"].to_numpy()[ok]
            lat = g["latency_ms"].to_numpy()[ok]
            out[run] = {"count": g.num_rows, "failed": int((~ok).sum()), "mean_hops": float(hops.mean()),
                        "p50_hops": float(np.percentile(hops, 50)), "p99_hops": float(np.percentile(hops, 99)),
                        "mean_timeouts": float(g["timeouts"].to_numpy().mean()),
                        "latency_p50_ms": float(np.percentile(lat, 50)),
                        "latency_p99_ms": float(np.percentile(lat, 99))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--repeat", type=int, default=3, help="runs of chordpub analyze (median and range)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="chordpub-analyze-bench-") as tmp:
        root = Path(tmp) / "runs"
        t0 = time.perf_counter()
        write_rows(root, args.rows)
        write_s = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in root.rglob("*.parquet"))
        walls = []
        for _ in range(args.repeat):  # a fresh process each time: the JVM's start is part of the figure
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "chordpub", "analyze", str(root), "--json", "--master",
                                   args.master], capture_output=True, text=True, stdin=subprocess.DEVNULL)
            walls.append(time.perf_counter() - t0)
            if proc.returncode:
                raise SystemExit(f"chordpub analyze failed:\n{proc.stderr[-2000:]}")
        spark_s = spread(walls)["median"]
        result = {r["run"]: r for r in json.loads(proc.stdout)["lookups"]}
        t0 = time.perf_counter()
        base = baseline(root)
        base_s = time.perf_counter() - t0
    worst = max(abs(result[run]["mean_hops"] - b["mean_hops"]) for run, b in base.items())
    assert sum(r["count"] for r in result.values()) == args.rows, "spark did not see every row"
    summary = {"rows": args.rows, "parquet_mb": round(size / 2**20, 1), "write_s": round(write_s, 2),
               "spark_wall_s": round(spark_s, 2), "baseline_s": round(base_s, 2),
               "ratio": round(spark_s / base_s, 2), "max_mean_hops_diff": worst, "goal_s": 30,
               "spark_wall_runs": [round(w, 2) for w in walls]}
    if args.json:
        print(json.dumps(summary))
        return
    print(f"{args.rows:,} lookup rows in {RUNS} runs, {summary['parquet_mb']} MiB of Parquet "
          f"(written in {write_s:.1f} s)")
    print(f"chordpub analyze (fresh process, JVM start included, {args.master}): {said(walls, '.1f')} s wall "
          f"(goal <= 30 s: {verdict(walls, lambda w: w <= 30)})")
    print(f"baseline, pyarrow + numpy in one process: {base_s:.1f} s; ratio spark / baseline {summary['ratio']}")
    print(f"largest difference in mean hops between the two: {worst:.2e}")


if __name__ == "__main__":
    main()
