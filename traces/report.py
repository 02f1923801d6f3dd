"""What `chordpub analyze` prints and writes, and the same job as a spark-submit application.

    chordpub analyze runs/demo-* [--out DIR] [--master URL] [--json]
    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master local[2] traces/report.py runs/demo-* [--out DIR]

`--out DIR` gets lookups.parquet / lookups.csv, deliveries.parquet / deliveries.csv and
summary.json (the `--json` object). The result tables are small, so they are written from the
driver with pyarrow and csv, as single files a user can open.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file by spark-submit: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from traces.spark import AnalyzeError, analyze, find_traces, session  # noqa: E402

LOOKUP_COLUMNS = (("run", "run"), ("source", "source"), ("nodes", "nodes"), ("count", "lookups"),
                  ("failed", "failed"), ("mean_hops", "mean hops"), ("half_log2_n", "½log2N"),
                  ("p50_hops", "p50"), ("p99_hops", "p99"), ("mean_timeouts", "timeouts"),
                  ("latency_p50_ms", "p50 ms"), ("latency_p99_ms", "p99 ms"))
DELIVERY_COLUMNS = (("run", "run"), ("source", "source"), ("mode", "mode"), ("topic", "topic"),
                    ("expected", "expected"), ("delivered", "delivered"), ("recovered", "recovered"),
                    ("lost", "lost"), ("duplicates", "dups"), ("latency_p50_ms", "p50 ms"),
                    ("latency_p99_ms", "p99 ms"), ("latency_max_ms", "max ms"))

LOAD_COLUMNS = (("run", "run"), ("source", "source"), ("virtual", "virtual"), ("nodes", "nodes"), ("keys", "keys"),
                ("mean", "mean"), ("p1", "p1"), ("p50", "p50"), ("p99", "p99"), ("max", "max"))


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def table(rows: list[dict], columns: tuple[tuple[str, str], ...]) -> str:
    grid = [[title for _, title in columns]] + [[_cell(r.get(k)) for k, _ in columns] for r in rows]
    widths = [max(len(row[i]) for row in grid) for i in range(len(columns))]
    return "\n".join("  " + "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in grid)


def render(result: dict) -> str:
    parts = []
    if result["lookups"]:
        parts += ["lookups (hops and latency over successful lookups)", table(result["lookups"], LOOKUP_COLUMNS)]
    if result["deliveries"]:
        parts += ["deliveries (per publisher-subscriber pair, from the first message owed to the last delivered; "
                  "lost: owed, never delivered)",
                  table(result["deliveries"], DELIVERY_COLUMNS)]
    if result.get("load"):
        parts += ["keys per real node", table(result["load"], LOAD_COLUMNS)]
    for name, bad in result["bad_rows"].items():
        if bad["count"]:
            parts.append(f"{bad['count']} bad {name} rows left out, e.g. "
                         + "; ".join(f"{e['file']}: {e['problem']}" for e in bad["examples"][:3]))
    return "\n".join(parts)


def write_outputs(result: dict, out: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    for name in ("lookups", "deliveries", "load"):
        rows = [{k: (json.dumps(v) if isinstance(v, dict) else v) for k, v in r.items()} for r in result.get(name, [])]
        if not rows:
            continue
        pq.write_table(pa.Table.from_pylist(rows), out / f"{name}.parquet")
        with open(out / f"{name}.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Aggregate chordpub traces with Spark (see chordpub analyze --help).")
    ap.add_argument("dirs", nargs="+", help="run directories (or directories holding them)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--master", help="Spark master URL (default: spark-submit's, SPARK_MASTER, local[*])")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        found = find_traces(args.dirs)  # fail on a bad directory before the JVM starts
        spark = session(args.master, input_bytes=found.bytes())
        result = analyze(spark, args.dirs)
    except AnalyzeError as exc:
        print(f"chordpub analyze: {exc}", file=sys.stderr)
        return 2
    if args.out:
        write_outputs(result, args.out)
    print(json.dumps(result) if args.json else render(result))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
