"""The demo's pub/sub part: 3 publishers and 3 subscribers on overlapping topics, direct then relay.

Everything runs as real `chordpub pub` / `chordpub sub` processes against the demo's ring, as a
user would start them. Subscribers start first (best effort would lose a slow joiner's first
messages otherwise), publishers send at a fixed rate for the phase's seconds, and the figures come
from the traces the processes wrote: what each publisher sent (`sent/`) against what each
subscriber delivered (`deliveries/`, the trace schema), per topic.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import numpy as np

from chordpub.launcher import interrupts_deferred, stop_processes, wait_for
from dht.client import DhtClient
from dht.spawner import ForkedProcess, start
from dht.transport import SocketSetup
from pubsub.directory import topic_info
from traces.accounting import add, pair_figures
from traces.writer import read_jsonl

PUBLISHERS = {"p1": "alpha", "p2": "beta", "p3": "alpha"}
SUBSCRIBERS = {"s1": "alpha", "s2": "beta", "s3": "alpha"}
RATE = 100.0


def _spawn(logdir: Path, name: str, args: list[str]) -> subprocess.Popen | ForkedProcess:
    (logdir / f"{name}.log").unlink(missing_ok=True)
    return start(args, logdir / f"{name}.log")


def run_phase(mode: str, endpoints: list[str], seconds: float, run: str, run_dir: Path, logdir: Path,
              curve: Path | None = None, setup: SocketSetup | None = None) -> None:
    """Start the subscribers, wait until the ring knows them, then the publishers; wait for all."""
    count = max(int(RATE * seconds), 1)
    expected = {t: count * list(PUBLISHERS.values()).count(t) for t in set(PUBLISHERS.values())}
    procs: list[subprocess.Popen | ForkedProcess] = []
    keys = ["--curve", str(curve)] if curve else []
    try:
        for i, (name, topic) in enumerate(SUBSCRIBERS.items()):
            with interrupts_deferred():
                procs.append(_spawn(logdir, f"{mode}-{name}", [
                    "sub", "--via", endpoints[i % len(endpoints)], "--topic", topic, "--mode", mode,
                    "--count", str(expected[topic]), "--seconds", str(seconds + 30), "--heartbeat", "0.5",
                    "--run", run, "--json", "--trace", str(run_dir / "deliveries" / f"{mode}-{name}.jsonl"),
                    *keys]))
        with DhtClient(endpoints[0], setup=setup) as client:
            wanted = {t: list(SUBSCRIBERS.values()).count(t) for t in set(SUBSCRIBERS.values())}
            wait_for(lambda: all(topic_info(client, t)["subscribers"] >= n for t, n in wanted.items()),
                     timeout=30, what=f"{mode} subscribers registered")
        pubs: list[subprocess.Popen | ForkedProcess] = []
        for i, (name, topic) in enumerate(PUBLISHERS.items()):
            with interrupts_deferred():
                pubs.append(_spawn(logdir, f"{mode}-{name}", [
                    "pub", "--via", endpoints[-1 - i % len(endpoints)], "--topic", topic, "--mode", mode,
                    "--count", str(count), "--rate", str(RATE), "--linger", "1", "--heartbeat", "0.5",
                    "--trace", str(run_dir / "sent" / f"{mode}-{name}.jsonl"), *keys]))
                procs.append(pubs[-1])
        for p in pubs:
            p.wait(timeout=seconds + 30)
        # a subscriber that missed a message would wait for its count until --seconds: the
        # publishers lingered a second after their last message, so everything in flight has landed
        stop_processes(procs, grace=10)
    finally:
        stop_processes(procs, grace=3)


def phase_table(mode: str, run_dir: Path) -> dict[str, dict]:
    """Per topic of a demo phase: its publishers' and subscribers' figures (`topic_figures`)."""
    out: dict[str, dict] = {}
    for topic in sorted(set(PUBLISHERS.values())):
        pubs = [run_dir / "sent" / f"{mode}-{n}.jsonl" for n, t in PUBLISHERS.items() if t == topic]
        subs = [run_dir / "deliveries" / f"{mode}-{n}.jsonl" for n, t in SUBSCRIBERS.items() if t == topic]
        out[topic] = topic_figures(pubs, subs)
    return out


def topic_figures(sent_files: list[Path], delivery_files: list[Path]) -> dict:
    """One topic: messages sent, and expected / delivered / recovered / lost / duplicates summed over its
    (publisher, subscriber) pairs by the shared accounting (traces/accounting.py), latency p50/p99.
    `sent_files` are the publishers' `pub --trace` files, `delivery_files` one per subscriber."""
    last_sent: dict[str, int] = {}
    sent = 0
    for f in sent_files:
        for r in read_jsonl(f):
            sent += 1
            last_sent[r["publisher"]] = max(last_sent.get(r["publisher"], 0), r["seq"])
    total: dict[str, int] = {}
    latencies: list[float] = []
    for f in delivery_files:
        rows = read_jsonl(f)
        for publisher in set(last_sent) | {r["publisher"] for r in rows}:
            add(total, pair_figures([r for r in rows if r["publisher"] == publisher], last_sent.get(publisher)))
        latencies += [r["latency_ms"] for r in rows]
    lat = np.asarray(latencies, dtype=float)
    return {"publishers": len(sent_files), "subscribers": len(delivery_files), "sent": sent,
            **{k: total.get(k, 0) for k in ("expected", "delivered", "recovered", "lost", "duplicates")},
            "latency_p50_ms": round(float(np.percentile(lat, 50)), 3) if lat.size else None,
            "latency_p99_ms": round(float(np.percentile(lat, 99)), 3) if lat.size else None}


def run_pubsub(endpoints: list[str], seconds: float, run: str, run_dir: Path, logdir: Path,
               say=print, curve: Path | None = None, setup: SocketSetup | None = None) -> dict[str, dict]:  # noqa: ANN001
    """Both modes, `seconds / 2` of publishing each; returns {mode: {topic: figures}}."""
    (run_dir / "deliveries").mkdir(parents=True, exist_ok=True)
    (run_dir / "sent").mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    for mode in ("direct", "relay"):
        say(f"{mode}: 3 publishers (alpha, beta, alpha) and 3 subscribers (alpha, beta, alpha), "
            f"{RATE:g} msg/s each for {seconds / 2:g}s ...")
        t0 = time.monotonic()
        run_phase(mode, endpoints, seconds / 2, run, run_dir, logdir, curve, setup)
        results[mode] = phase_table(mode, run_dir)
        say(f"  done in {time.monotonic() - t0:.1f}s")
    return results


def pubsub_table(results: dict[str, dict]) -> str:
    head = ("mode", "topic", "pubs", "subs", "expected", "delivered", "recovered", "lost", "dups", "p50 ms",
            "p99 ms")
    rows = [head]
    for mode, topics in results.items():
        for topic, r in topics.items():
            rows.append((mode, topic, r["publishers"], r["subscribers"], r["expected"], r["delivered"],
                         r["recovered"], r["lost"], r["duplicates"], _ms(r["latency_p50_ms"]),
                         _ms(r["latency_p99_ms"])))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(head))]
    return "\n".join("  " + "  ".join(f"{str(v):>{w}}" for v, w in zip(row, widths, strict=True)) for row in rows)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"
