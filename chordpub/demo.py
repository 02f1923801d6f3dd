"""The main job (`make demo`): a local ring, lookups, then pub/sub on it, and what they measured.

A ring of 8 node processes; 1000 lookups of random topic names, each from a random node, with a
table of hops (beside ½·log2 N, the paper's expectation, SIGCOMM'01 §6.3) and latency; then 3
publishers and 3 subscribers on overlapping topics, direct and then relay mode
(`chordpub.demo_pubsub`), with delivered / lost / duplicates and latency per topic. Every trace
goes to one run directory, which Spark then summarises (traces/spark.py, as `chordpub analyze`
would); everything the demo starts is stopped at the end.
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

import numpy as np

from chordpub.demo_pubsub import pubsub_table, run_pubsub
from chordpub.launcher import LocalRing, NodeProcess
from dht.client import DhtClient
from dht.transport import SocketSetup
from traces.report import render
from traces.writer import JsonlWriter, make_run_dir


def summarize(nodes: int, hops: list[int], ms: list[float], failed: int) -> dict:
    h = np.asarray(hops, dtype=float)
    t = np.asarray(ms, dtype=float)
    return {
        "nodes": nodes,
        "lookups": len(hops) + failed,
        "failed": failed,
        "mean_hops": round(float(h.mean()), 3) if h.size else None,
        "p50_hops": float(np.percentile(h, 50)) if h.size else None,
        "p99_hops": float(np.percentile(h, 99)) if h.size else None,
        "half_log2_n": round(0.5 * math.log2(nodes), 3) if nodes > 1 else 0.0,
        "latency_p50_ms": round(float(np.percentile(t, 50)), 3) if t.size else None,
        "latency_p99_ms": round(float(np.percentile(t, 99)), 3) if t.size else None,
    }


def table(summary: dict) -> str:
    rows = [
        ("nodes", summary["nodes"]),
        ("lookups", f"{summary['lookups']} ({summary['failed']} failed)"),
        ("mean hops", f"{summary['mean_hops']}   (½·log2 N = {summary['half_log2_n']})"),
        ("p50 / p99 hops", f"{summary['p50_hops']:g} / {summary['p99_hops']:g}"),
        ("latency p50 / p99", f"{summary['latency_p50_ms']} / {summary['latency_p99_ms']} ms"),
    ]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"  {name:<{width}}  {value}" for name, value in rows)


def trace_lookups(nodes: list[NodeProcess], lookups: int, path: Path, run: str, rng: random.Random,
                  timeout: float = 1.0, retries: int = 1,
                  setup: SocketSetup | None = None) -> tuple[list[int], list[float], int]:
    """`lookups` lookups of random names, each from a random one of `nodes`, traced to `path`.

    Returns (hops, ms) of the successful ones and the number that failed. `timeout`/`retries` are
    the client's per request (lower them to measure a ring with dead nodes quickly).
    """
    ids = {n.endpoint: n.id for n in nodes}
    endpoints = list(ids)
    hops: list[int] = []
    ms: list[float] = []
    failed = 0
    with DhtClient(endpoints[0], timeout=timeout, retries=retries, setup=setup) as client, \
            JsonlWriter(path, "lookups") as trace:
        for i in range(lookups):
            origin = rng.choice(endpoints)
            found = client.lookup(f"topic-{rng.getrandbits(48):012x}-{i}", start=origin)
            trace.write({"run": run, "source": "live", "nodes": len(ids), "key_id": found.key_id,
                         "origin": ids[origin], "owner": found.owner.id if found.owner else None,
                         "hops": found.hops, "timeouts": found.timeouts, "latency_ms": found.ms,
                         "ok": found.ok, "ts": time.time()})
            if found.ok:
                hops.append(found.hops)
                ms.append(found.ms)
            else:
                failed += 1
    return hops, ms, failed


def spark_summary(run_dir: Path) -> dict:
    from traces.spark import analyze, session

    spark = session()
    try:
        return analyze(spark, [run_dir])
    finally:
        spark.stop()


def run_demo(nodes: int = 8, lookups: int = 1000, seconds: float = 10.0, out: Path = Path("runs"),
             as_json: bool = False, seed: int | None = None, curve: Path | None = None,
             analysis: bool = True) -> dict:
    """The main job (`make demo`); with `curve` (a keys directory) every process and socket runs CurveZMQ;
    `analysis` False leaves out the Spark summary at the end (and the need for Java)."""
    if analysis:
        from traces.spark import check_java

        check_java()  # the summary at the end is Spark's: say so now, not after the run
    rng = random.Random(seed)
    run = time.strftime("demo-%Y%m%d-%H%M%S")
    run_dir = make_run_dir(out, run, {"nodes": nodes, "lookups": lookups, "seconds": seconds,
                                      "curve": str(curve) if curve else None})
    setup = None
    if curve is not None:
        from dht.curve import socket_setup

        setup = socket_setup(curve, "client")
    say = (lambda *_: None) if as_json else print
    logs = run_dir / "logs"  # every process's log, kept with the run
    with LocalRing(logs, options={"stabilize": 0.2, "curve": curve}, setup=setup) as ring:
        say(f"starting a ring of {nodes} discovery nodes on 127.0.0.1 ...")
        ring.start(nodes)
        report, took = ring.wait_consistent(timeout=60)
        say(f"ring consistent after {took:.1f}s ({report['nodes']} nodes)")
        endpoints = [n.endpoint for n in ring.nodes]
        say(f"{lookups} lookups of random topic names from random nodes ...")
        hops, ms, failed = trace_lookups(ring.nodes, lookups, run_dir / "lookups" / "demo.jsonl", run, rng,
                                         setup=setup)
        summary = summarize(nodes, hops, ms, failed)
        if not as_json:
            print("\nlookups on the live ring")
            print(table(summary) + "\n")
        pubsub = (run_pubsub(endpoints, seconds, run, run_dir, logs, say=say, curve=curve, setup=setup)
                  if seconds > 0 else {})
    summary["pubsub"] = pubsub
    summary["run_dir"] = str(run_dir)
    if analysis:
        say("\nthe Spark summary of this run's traces (chordpub analyze) ...")
        summary["analysis"] = spark_summary(run_dir)
    if as_json:
        print(json.dumps(summary))
    else:
        if pubsub:
            print("\npublish/subscribe on the live ring (summed over each topic's publisher-subscriber pairs)")
            print(pubsub_table(pubsub))
            print("  (expected: each publisher's messages from the first sent after the subscriber joined to its\n"
                  "   last; what was sent before the subscriber had connected counts as lost, unless recovered\n"
                  "   from history: `chordpub sub --history K` or `--reliable`. docs/contracts.md, Accounting)")
        if analysis:
            print(render(summary["analysis"]))
        print(f"\ntraces: {run_dir}   (again: chordpub analyze {run_dir}); logs: {logs}")
    return summary
