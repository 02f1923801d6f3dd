"""`chordpub study report`: one Spark job over every run of a study, grouped by the point's parameters.

The aggregations are those of `chordpub analyze` (traces/spark.py: the same reader, which keeps bad
rows out, and the same percentile_approx), over all of a study's runs at once, keyed by the point
each run belongs to (repeats of one point pool their rows). Beside them, what analyze cannot know:
how many deliveries were *expected* — every message a publisher sent (its `*.sent.jsonl` log) once
per subscriber that follows the topic (study.json says how many) — and so how many were lost,
including those sent before a subscriber was connected. Also the latency quantiles every 1%, from
which the report draws the CDFs.
"""

from __future__ import annotations

import json
from pathlib import Path

from traces.spark import _pct, delivery_pairs, find_traces, loaded, size_shuffle
from traces.writer import run_complete

SENT_SCHEMA = (("topic", "string"), ("publisher", "string"), ("seq", "long"), ("sent_ns", "long"))
CDF_STEPS = 100


def _groups(doc: dict) -> tuple[list[dict], dict[str, int]]:
    """The distinct parameter sets of the study's points, and each run's group."""
    groups: list[dict] = []
    index: dict[str, int] = {}
    run_group: dict[str, int] = {}
    for point in doc["points"]:
        key = json.dumps(point["params"], sort_keys=True)
        if key not in index:
            index[key] = len(groups)
            groups.append({"params": point["params"], "runs": []})
        run_group[point["name"]] = index[key]
    return groups, run_group


def study_report(spark, study: Path, doc: dict) -> dict:
    """{"study", "points": [{...params, "runs", "deliveries", "expected", "lost", "latency_p50_ms", ...}],
    "cdf": [{"point", "mode", "quantiles_ms": [latency at 0%, 1%, ... 100%]}], "bad_rows": {...}} over the
    finished points."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    groups, run_group = _groups(doc)
    done = [p for p in doc["points"] if run_complete(study / "runs" / p["name"])]
    for p in done:
        groups[run_group[p["name"]]]["runs"].append(p["name"])
    result: dict = {"study": str(study), "points": [], "cdf": [], "bad_rows": {}}
    if not done:
        return result
    dirs = [study / "runs" / p["name"] for p in done]
    files = find_traces(dirs)
    size_shuffle(spark, files.bytes())
    keys = spark.createDataFrame([(run, g) for run, g in run_group.items()], "run string, grp int")

    deliveries = _deliveries(spark, files, keys, result)
    lookups = _lookups(files, keys, result)
    sent_paths = [str(f.absolute()) for d in dirs for f in sorted((d / "logs").glob("*.sent.jsonl"))
                  if f.stat().st_size]
    expected: dict[int, int] = {}
    if sent_paths:
        schema = T.StructType([T.StructField(n, T.LongType() if t == "long" else T.StringType(), True)
                               for n, t in SENT_SCHEMA])
        sent = (spark.read.schema(schema).json(sent_paths).withColumn("run", F.regexp_extract(
            F.input_file_name(), r"/runs/([^/]+)/logs/", 1)).filter(F.col("seq").isNotNull())
                .groupBy("run", "topic").agg(F.count(F.lit(1)).alias("sent")))
        followers = spark.createDataFrame(
            [(p["name"], t, int(n)) for p in done for t, n in p["subscribers_per_topic"].items()],
            "run string, topic string, followers int")
        for r in (sent.join(followers, ["run", "topic"]).join(keys, "run")
                  .groupBy("grp").agg(F.sum(F.col("sent") * F.col("followers")).alias("expected")).collect()):
            expected[int(r["grp"])] = int(r["expected"])
    for g, group in enumerate(groups):
        if not group["runs"]:
            continue
        d, lk = deliveries.get(g, {}), lookups.get(g, {})
        exp = expected.get(g, 0)
        distinct = d.get("distinct", 0)
        row = {**group["params"], "runs": group["runs"], "repeats": len(group["runs"]),
               "deliveries": d.get("count", 0), "expected": exp, "lost": max(exp - distinct, 0),
               "loss_pct": round(100.0 * max(exp - distinct, 0) / exp, 3) if exp else None,
               "duplicates": d.get("duplicates", 0), "missing": d.get("missing", 0),
               "recovered": d.get("recovered", 0)}
        pct = d.get("pct") or [None] * 3
        row.update({"latency_p50_ms": pct[0], "latency_p90_ms": pct[1], "latency_p99_ms": pct[2],
                    "latency_max_ms": d.get("max")})
        row.update({k: lk.get(k) for k in ("lookups", "mean_hops", "p50_hops", "p99_hops")})
        row["lookups"] = row["lookups"] or 0
        result["points"].append(row)
        if d.get("cdf"):
            result["cdf"].append({"point": label(row, doc), "mode": row["mode"], "quantiles_ms": d["cdf"]})
    return result


def label(row: dict, doc: dict) -> str:
    """A point's short name, from the axes that vary in the study."""
    varying = [k for k, v in doc["axes"].items() if len(v) > 1] or ["pubs", "subs"]
    return " ".join(f"{k}={row[k]}" for k in varying)


def _deliveries(spark, files, keys, result: dict) -> dict[int, dict]:
    with loaded(spark, files, "deliveries") as (good, bad):
        result["bad_rows"]["deliveries"] = bad.count() if bad is not None else 0
        return _delivery_groups(good, keys) if good is not None else {}


def _delivery_groups(good, keys) -> dict[int, dict]:
    from pyspark.sql import functions as F

    rows = good.join(keys, "run")
    pairs = delivery_pairs(rows, ["grp", "run", "source", "mode", "topic"])
    per_pair = {int(r["grp"]): r for r in pairs.groupBy("grp").agg(
        F.sum("distinct").alias("distinct"), F.sum(F.col("n") - F.col("distinct")).alias("duplicates"),
        F.sum(F.col("recovered")).alias("recovered"),
        F.sum(F.greatest(F.col("hi") - F.col("lo") + 1, F.lit(0)) - F.col("delivered")).alias("missing")).collect()}
    steps = [i / CDF_STEPS for i in range(CDF_STEPS + 1)]
    out: dict[int, dict] = {}
    for r in rows.groupBy("grp").agg(
            F.count(F.lit(1)).alias("count"),
            _pct("latency_ms", 0.5, 0.9, 0.99).alias("pct"), F.max("latency_ms").alias("max"),
            _pct("latency_ms", *steps).alias("cdf")).collect():
        g = int(r["grp"])
        p = per_pair[g]
        out[g] = {"count": int(r["count"]), "recovered": int(p["recovered"]), "pct": r["pct"], "max": r["max"],
                  "cdf": r["cdf"], "distinct": int(p["distinct"]), "duplicates": int(p["duplicates"]),
                  "missing": int(p["missing"])}
    return out


def _lookups(files, keys, result: dict) -> dict[int, dict]:
    with loaded(keys.sparkSession, files, "lookups") as (good, bad):
        result["bad_rows"]["lookups"] = bad.count() if bad is not None else 0
        return _lookup_groups(good, keys) if good is not None else {}


def _lookup_groups(good, keys) -> dict[int, dict]:
    from pyspark.sql import functions as F

    ok = F.col("ok")
    out = {}
    for r in good.join(keys, "run").groupBy("grp").agg(
            F.count(F.lit(1)).alias("lookups"), F.avg(F.when(ok, F.col("hops"))).alias("mean_hops"),
            _pct(F.when(ok, F.col("hops")), 0.5, 0.99).alias("hops")).collect():
        hp = r["hops"] or [None, None]
        out[int(r["grp"])] = {"lookups": int(r["lookups"]), "mean_hops": r["mean_hops"],
                              "p50_hops": hp[0], "p99_hops": hp[1]}
    return out
