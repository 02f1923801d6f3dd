"""The demo's pub/sub part: 3 publishers and 3 subscribers on overlapping topics, direct then relay.

Everything runs as real `chordpub pub` / `chordpub sub` processes against the demo's ring, as a
user would start them. Subscribers start first (best effort would lose a slow joiner's first
messages otherwise), publishers send at a fixed rate for the phase's seconds, and the figures come
from the traces the processes wrote: what each publisher sent (`sent/`) against what each
subscriber delivered (`deliveries/`, the trace schema), per topic.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from chordpub.launcher import stop_processes, wait_for
from dht.client import DhtClient
from dht.transport import SocketSetup
from pubsub.directory import topic_info
from traces.writer import read_jsonl

PUBLISHERS = {"p1": "alpha", "p2": "beta", "p3": "alpha"}
SUBSCRIBERS = {"s1": "alpha", "s2": "beta", "s3": "alpha"}
RATE = 100.0


def _spawn(logdir: Path, name: str, args: list[str]) -> subprocess.Popen:
    log = open(logdir / f"{name}.log", "wb")  # noqa: SIM115 - the child owns it from here
    try:
        return subprocess.Popen([sys.executable, "-m", "chordpub", *args], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        log.close()


def run_phase(mode: str, endpoints: list[str], seconds: float, run: str, run_dir: Path, logdir: Path,
              curve: Path | None = None, setup: SocketSetup | None = None) -> None:
    """Start the subscribers, wait until the ring knows them, then the publishers; wait for all."""
    count = max(int(RATE * seconds), 1)
    expected = {t: count * list(PUBLISHERS.values()).count(t) for t in set(PUBLISHERS.values())}
    procs: list[subprocess.Popen] = []
    keys = ["--curve", str(curve)] if curve else []
    try:
        for i, (name, topic) in enumerate(SUBSCRIBERS.items()):
            procs.append(_spawn(logdir, f"{mode}-{name}", [
                "sub", "--via", endpoints[i % len(endpoints)], "--topic", topic, "--mode", mode,
                "--count", str(expected[topic]), "--seconds", str(seconds + 30), "--heartbeat", "0.5",
                "--run", run, "--json", "--trace", str(run_dir / "deliveries" / f"{mode}-{name}.jsonl"),
                *keys]))
        with DhtClient(endpoints[0], setup=setup) as client:
            wanted = {t: list(SUBSCRIBERS.values()).count(t) for t in set(SUBSCRIBERS.values())}
            wait_for(lambda: all(topic_info(client, t)["subscribers"] >= n for t, n in wanted.items()),
                     timeout=30, what=f"{mode} subscribers registered")
        pubs = [_spawn(logdir, f"{mode}-{name}", [
            "pub", "--via", endpoints[-1 - i % len(endpoints)], "--topic", topic, "--mode", mode,
            "--count", str(count), "--rate", str(RATE), "--linger", "1", "--heartbeat", "0.5",
            "--trace", str(run_dir / "sent" / f"{mode}-{name}.jsonl"), *keys]) for i, (name, topic) in enumerate(
            PUBLISHERS.items())]
        procs += pubs
        for p in pubs:
            p.wait(timeout=seconds + 30)
        # a subscriber that missed a message would wait for its count until --seconds: the
        # publishers lingered a second after their last message, so everything in flight has landed
        stop_processes(procs, grace=10)
    finally:
        stop_processes(procs, grace=3)


def phase_table(mode: str, run_dir: Path) -> dict[str, dict]:
    """Per topic: sent, delivered (summed over its subscribers), lost, duplicates, latency p50/p99."""
    out: dict[str, dict] = {}
    for topic in sorted(set(PUBLISHERS.values())):
        sent: set[tuple[str, int]] = set()
        for name, t in PUBLISHERS.items():
            if t == topic:
                sent |= {(r["publisher"], r["seq"]) for r in read_jsonl(run_dir / "sent" / f"{mode}-{name}.jsonl")}
        subs = [name for name, t in SUBSCRIBERS.items() if t == topic]
        delivered = lost = dups = 0
        latencies: list[float] = []
        for name in subs:
            rows = read_jsonl(run_dir / "deliveries" / f"{mode}-{name}.jsonl")
            got = [(r["publisher"], r["seq"]) for r in rows]
            unique = set(got) & sent
            delivered += len(unique)
            lost += len(sent - unique)
            dups += len(got) - len(set(got))
            latencies += [r["latency_ms"] for r in rows]
        lat = np.asarray(latencies, dtype=float)
        out[topic] = {
            "publishers": sum(t == topic for t in PUBLISHERS.values()), "subscribers": len(subs),
            "sent": len(sent), "expected": len(sent) * len(subs), "delivered": delivered, "lost": lost,
            "duplicates": dups,
            "latency_p50_ms": round(float(np.percentile(lat, 50)), 3) if lat.size else None,
            "latency_p99_ms": round(float(np.percentile(lat, 99)), 3) if lat.size else None,
        }
    return out


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
    head = ("mode", "topic", "pubs", "subs", "expected", "delivered", "lost", "dups", "p50 ms", "p99 ms")
    rows = [head]
    for mode, topics in results.items():
        for topic, r in topics.items():
            rows.append((mode, topic, r["publishers"], r["subscribers"], r["expected"], r["delivered"], r["lost"],
                         r["duplicates"], r["latency_p50_ms"], r["latency_p99_ms"]))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(head))]
    return "\n".join("  " + "  ".join(f"{str(v):>{w}}" for v, w in zip(row, widths, strict=True)) for row in rows)
