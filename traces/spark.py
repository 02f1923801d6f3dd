"""Spark over the traces: the session, the reader that never lets a bad row through, the aggregations.

Spark is what users already run when one machine is not enough, so the same job runs in local
mode (`local[*]`) by default and on any cluster with `--master URL`, `SPARK_MASTER`, or through
spark-submit (see traces/report.py). Aggregations use the DataFrame API only, no Python UDFs, so
everything runs in the JVM.

Reading. A run directory holds `lookups/` and `deliveries/` of JSON Lines (live processes) and/or
Parquet (the simulator). JSON is read in PERMISSIVE mode against the schema of traces/schema.py:
a torn last line, a wrong type or an off-contract value (unknown source or mode, a null where the
schema forbids it, an id that is not a decimal) makes the row *bad*: it is counted and reported
with its file, and left out of every aggregate, never turned into a wrong number.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from traces.schema import MODES, SOURCES, TABLES, spark_schema
from traces.spark_connect import CONNECT_MODE, connect_session, is_connect, is_remote_session
from traces.spark_driver import (
    QUICK_JVM,
    QUICK_JVM_BYTES,
    QUICK_SQL,
    check_java,
    java_binary,
    local_builder,
    spark_jars,
)

CORRUPT = "_corrupt_record"
ACCURACY = 10_000  # percentile_approx: relative rank error at most 1/ACCURACY
GROUPS = {"lookups": ("run", "source", "nodes"), "deliveries": ("run", "source", "mode", "topic"),
          "load": ("run", "source", "virtual")}


class AnalyzeError(ValueError):
    """Input the analysis cannot start from (a missing directory, no traces at all)."""


def session(master: str | None = None, app_name: str = "chordpub-analyze", ui: bool = False,
            input_bytes: int | None = None):
    """A SparkSession: `master`, else SPARK_MASTER, else what spark-submit set, else local[*].

    A local driver JVM expecting at most QUICK_JVM_BYTES of input (or an unknown amount, as a notebook's
    session) runs with the quick compiler only and a serial collector: on such a job the optimizing
    compiler's and the parallel collector's threads cost more than they save (measured: 43-46 CPU
    seconds for a small `analyze` against 26-27, 20% less wall time; on 357 MiB of Parquet the
    default JVM is 35% faster, so larger inputs keep it), and its queries with QUICK_SQL. It also maps
    Spark's classes from the cache's class-data archive once there is one (traces/class_archive.py).
    An `sc://HOST:PORT` master is a Spark Connect server's (`chordpub spark-server`): no JVM here."""
    master = master or os.environ.get("SPARK_MASTER")
    if is_connect(master):
        return connect_session(master)
    os.environ.pop(CONNECT_MODE, None)  # inherited from a parent's Connect session, it makes pyspark refuse a local one
    check_java()
    from pyspark import SparkConf

    if not master and not SparkConf().contains("spark.master"):  # spark-submit passes its --master this way
        master = "local[*]"
    options = ""
    quick = bool(master and master.startswith("local") and (input_bytes or 0) <= QUICK_JVM_BYTES)
    if quick:
        options = QUICK_JVM
        java = java_binary()
        jars = spark_jars()
        if java is not None and jars is not None:
            from traces.class_archive import archive_path, jvm_options

            options = f"{options} {jvm_options(archive_path(java, jars, QUICK_JVM))}".strip()
    builder = local_builder(app_name, master, options, ui)
    for name, value in (QUICK_SQL if quick else {}).items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@dataclass
class TraceFiles:
    jsonl: dict[str, list[str]] = field(default_factory=lambda: {t: [] for t in TABLES})
    parquet: dict[str, list[str]] = field(default_factory=lambda: {t: [] for t in TABLES})

    def bytes(self) -> int:
        return sum(os.path.getsize(f) for group in (self.jsonl, self.parquet) for fs in group.values() for f in fs)

    def count(self) -> int:
        return sum(len(fs) for group in (self.jsonl, self.parquet) for fs in group.values())


def find_traces(dirs: list[str | os.PathLike]) -> TraceFiles:
    """Every `lookups/`, `deliveries/` and `load/` file under the given run directories (or their parents),
    by absolute path: a Spark Connect server resolves a relative one against its own directory."""
    found = TraceFiles()
    for d in dirs:
        root = Path(d).absolute()
        if not root.is_dir():
            raise AnalyzeError(f"{d}: no such directory")
        for table in TABLES:
            for path in sorted(root.rglob(f"{table}/*")):
                if path.suffix == ".jsonl" and path.stat().st_size:
                    found.jsonl[table].append(str(path))
                elif path.suffix == ".parquet":
                    found.parquet[table].append(str(path))
    if not found.count():
        raise AnalyzeError(f"no traces (lookups/, deliveries/ or load/ *.jsonl|parquet) under "
                           f"{', '.join(map(str, dirs))}")
    return found


def _problem(table: str, parquet: bool):
    """A column naming what is wrong with a row, null when nothing is."""
    from pyspark.sql import functions as F

    checks = [] if parquet else [(F.col(CORRUPT).isNotNull(), "not a row of the schema (torn or ill-typed)")]
    for f in TABLES[table]:
        if not f.nullable:
            checks.append((F.col(f.name).isNull(), f"{f.name} is missing"))
        if f.kind == "id" and not parquet:
            checks.append((~F.col(f.name).rlike("^[0-9]+$"), f"{f.name} is not a decimal id"))
    checks.append((~F.col("source").isin(*SOURCES), "unknown source"))
    if table == "deliveries":
        checks.append((~F.col("mode").isin(*MODES), "unknown mode"))
    expr = F.lit(None).cast("string")
    for cond, why in reversed(checks):
        expr = F.when(cond, F.lit(why)).otherwise(expr)
    return expr


def table_rows(spark, files: TraceFiles, table: str):
    """One table's rows as read, each with `_problem` (None: a good row) and `_file`; None when it
    has no files. Not cached: `load` caches it, `loaded` releases that cache."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    frames = []
    if files.jsonl[table]:
        schema = spark_schema(table).add(T.StructField(CORRUPT, T.StringType(), True))
        df = (spark.read.schema(schema).option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT)
              .json(files.jsonl[table]))
        frames.append(df.withColumn("_problem", _problem(table, parquet=False)).drop(CORRUPT)
                      .withColumn("_file", F.input_file_name()))
    if files.parquet[table]:
        df = spark.read.schema(spark_schema(table)).parquet(*files.parquet[table])
        frames.append(df.withColumn("_problem", _problem(table, parquet=True)).withColumn("_file", F.input_file_name()))
    if not frames:
        return None
    rows = frames[0]
    for other in frames[1:]:
        rows = rows.unionByName(other)
    return rows


def load(spark, files: TraceFiles, table: str):
    """(good rows, bad rows with file and reason) of one table; None, None when it has no files.
    JSON rows stay cached for the session's life (a notebook's frames); `loaded` releases them."""
    good, bad, _ = _load(spark, files, table)
    return good, bad


def _load(spark, files: TraceFiles, table: str):
    from pyspark.sql import functions as F

    rows = table_rows(spark, files, table)
    if rows is None:
        return None, None, None
    # Spark will not query a JSON source's corrupt-record column uncached
    cached = rows.cache() if files.jsonl[table] else None
    rows = cached if cached is not None else rows
    names = [f.name for f in TABLES[table]]
    return (rows.filter(F.col("_problem").isNull()).select(*names),
            rows.filter(F.col("_problem").isNotNull()).select("_file", "_problem"), cached)


@contextmanager
def loaded(spark, files: TraceFiles, table: str) -> Iterator[tuple]:
    """`load` for one job: its cache is released at the end, so that a long-lived session (a Spark
    Connect server shares its cache among all its clients) does not hold every table ever read."""
    good, bad, cached = _load(spark, files, table)
    try:
        yield good, bad
    finally:
        if cached is not None:
            cached.unpersist()


def good_rows(spark, dirs: list[str | os.PathLike], table: str):
    """The rows of one table that fit the schema, as a DataFrame (for notebooks); None if there are none."""
    good, _ = load(spark, find_traces(dirs), table)
    return good


def size_shuffle(spark, input_bytes: int) -> None:
    """About one shuffle partition per 64 MiB of input, at least the default parallelism's worth (a
    Connect server's own setting, which its adaptive plans coalesce, when the session is remote)."""
    if is_remote_session(spark):
        cores = int(spark.conf.get("spark.sql.shuffle.partitions"))
    else:
        cores = spark.sparkContext.defaultParallelism
    spark.conf.set("spark.sql.shuffle.partitions", str(max(cores, math.ceil(input_bytes / (64 << 20)))))


def _pct(column: str, *qs: float):
    from pyspark.sql import functions as F

    return F.percentile_approx(column, [float(q) for q in qs], ACCURACY)


def aggregate_lookups(good) -> list[dict]:
    """By (run, source, nodes): count, failed, hop and latency statistics (over successful lookups),
    mean timeouts (over all), the hop histogram, and ½·log2 N beside the mean (SIGCOMM'01 §6.3)."""
    from pyspark.sql import functions as F

    ok = F.col("ok")
    keys = list(GROUPS["lookups"])
    stats = good.groupBy(*keys).agg(
        F.count(F.lit(1)).alias("count"),
        F.sum(F.when(ok, 0).otherwise(1)).alias("failed"),
        F.avg(F.when(ok, F.col("hops"))).alias("mean_hops"),
        _pct(F.when(ok, F.col("hops")), 0.01, 0.5, 0.99).alias("hops_pct"),
        F.max(F.when(ok, F.col("hops"))).alias("max_hops"),
        F.avg("timeouts").alias("mean_timeouts"),
        _pct(F.when(ok, F.col("latency_ms")), 0.5, 0.99).alias("latency_pct"),
    ).collect()
    histogram: dict[tuple, dict[int, int]] = {}
    for r in good.filter(ok).groupBy(*keys, "hops").count().collect():
        histogram.setdefault(tuple(r[k] for k in keys), {})[int(r["hops"])] = int(r["count"])
    out = []
    for r in stats:
        key = tuple(r[k] for k in keys)
        hp, lp = r["hops_pct"] or [None] * 3, r["latency_pct"] or [None] * 2
        out.append({
            "run": r["run"], "source": r["source"], "nodes": r["nodes"], "count": int(r["count"]),
            "failed": int(r["failed"]), "mean_hops": r["mean_hops"],
            "p1_hops": hp[0], "p50_hops": hp[1], "p99_hops": hp[2], "max_hops": r["max_hops"],
            "half_log2_n": 0.5 * math.log2(r["nodes"]) if r["nodes"] else None,
            "mean_timeouts": r["mean_timeouts"], "latency_p50_ms": lp[0], "latency_p99_ms": lp[1],
            "hop_histogram": {str(h): c for h, c in sorted(histogram.get(key, {}).items())},
        })
    return sorted(out, key=lambda o: (o["run"], o["source"], o["nodes"] or 0))


def aggregate_load(good) -> list[dict]:
    """By (run, source, virtual): keys per real node — mean, p1/p50/p99, max (SIGCOMM'01 §6.2)."""
    from pyspark.sql import functions as F

    keys = list(GROUPS["load"])
    out = []
    for r in good.groupBy(*keys).agg(F.count(F.lit(1)).alias("nodes"), F.sum("keys").alias("keys"),
                                     F.avg("keys").alias("mean"), _pct("keys", 0.01, 0.5, 0.99).alias("pct"),
                                     F.max("keys").alias("max")).collect():
        p = r["pct"]
        out.append({k: r[k] for k in keys} | {"nodes": int(r["nodes"]), "keys": int(r["keys"]), "mean": r["mean"],
                                              "p1": p[0], "p50": p[1], "p99": p[2], "max": int(r["max"])})
    return sorted(out, key=lambda o: (o["run"], o["source"], o["virtual"]))


def delivery_pairs(rows, keys: list[str]):
    """One row per (keys..., publisher, subscriber) pair: arrivals `n`, `distinct` seqs, `lo` (the first
    owed seq, or the first delivered in traces written before `first_owed` existed), `hi`, and of the
    owed seqs the `delivered` and `recovered` ones (traces/accounting.py)."""
    from pyspark.sql import functions as F

    pair = [*keys, "publisher", "subscriber"]
    bounds = rows.groupBy(*pair).agg(
        F.count(F.lit(1)).alias("n"), F.countDistinct("seq").alias("distinct"),
        F.coalesce(F.max("first_owed"), F.min("seq")).alias("lo"), F.max("seq").alias("hi"))
    owed = rows.join(bounds.select(*pair, "lo"), on=pair).where(F.col("seq") >= F.col("lo")).groupBy(*pair).agg(
        F.countDistinct("seq").alias("delivered"),
        F.countDistinct(F.when(F.col("recovered"), F.col("seq"))).alias("recovered"))
    return bounds.join(owed, on=pair, how="left").fillna(0, subset=["delivered", "recovered"])


def aggregate_deliveries(good) -> list[dict]:
    """By (run, source, mode, topic), summed over (publisher, subscriber) pairs by the accounting of
    traces/accounting.py: expected (from the pair's first owed seq to the highest delivered), delivered,
    recovered, lost (`missing`, its older name), duplicates (a seq arriving again); and latency."""
    from pyspark.sql import functions as F

    keys = list(GROUPS["deliveries"])
    per_topic = delivery_pairs(good, keys).groupBy(*keys).agg(
        F.sum(F.col("n") - F.col("distinct")).alias("duplicates"),
        F.sum(F.greatest(F.col("hi") - F.col("lo") + 1, F.lit(0))).alias("expected"),
        F.sum("delivered").alias("delivered"), F.sum("recovered").alias("recovered"),
        F.countDistinct("publisher").alias("publishers"), F.countDistinct("subscriber").alias("subscribers"))
    latency = good.groupBy(*keys).agg(
        F.count(F.lit(1)).alias("count"),
        _pct("latency_ms", 0.5, 0.99).alias("latency_pct"), F.max("latency_ms").alias("latency_max_ms"))
    out = []
    for r in latency.join(per_topic, on=keys).collect():
        lp = r["latency_pct"] or [None, None]
        lost = int(r["expected"]) - int(r["delivered"])
        out.append({k: r[k] for k in keys} | {
            "count": int(r["count"]), "duplicates": int(r["duplicates"]), "expected": int(r["expected"]),
            "delivered": int(r["delivered"]), "lost": lost, "missing": lost,
            "recovered": int(r["recovered"]), "publishers": int(r["publishers"]),
            "subscribers": int(r["subscribers"]), "latency_p50_ms": lp[0], "latency_p99_ms": lp[1],
            "latency_max_ms": r["latency_max_ms"]})
    return sorted(out, key=lambda o: (o["run"], o["source"], o["mode"], o["topic"]))


def analyze(spark, dirs: list[str | os.PathLike], examples: int = 5) -> dict:
    """The whole job: {"lookups": [...], "deliveries": [...], "load": [...], "bad_rows": {...}, "files": {...}}."""
    files = find_traces(dirs)
    size_shuffle(spark, files.bytes())
    result: dict = {"lookups": [], "deliveries": [], "load": [], "bad_rows": {}, "files": {}}
    for table, aggregate in (("lookups", aggregate_lookups), ("deliveries", aggregate_deliveries),
                             ("load", aggregate_load)):
        result["files"][table] = len(files.jsonl[table]) + len(files.parquet[table])
        with loaded(spark, files, table) as (good, bad):
            if good is None:
                result["bad_rows"][table] = {"count": 0, "examples": []}
                continue
            result[table] = aggregate(good)
            shown = [{"file": r["_file"], "problem": r["_problem"]} for r in bad.limit(examples).collect()]
            result["bad_rows"][table] = {"count": bad.count() if shown else 0, "examples": shown}
    return result
