"""Thousands of exact subscriptions in one Client: `subscribe_many` against one `subscribe` at a time.

    python benchmarks/subscribe_many.py [--nodes 3] [--topics 10000] [--one-by-one 500] [--json]

A ring of --nodes node processes on loopback. One Client subscribes to --one-by-one topics with
`subscribe`, one call after another (the baseline of the same run), then another Client subscribes to
--topics topics nobody publishes yet with `subscribe_many` (each returned subscription is in place at its
topic's owner). Reported: milliseconds per topic for each, and what the first Client holds for its topics
(file descriptors and RSS, from /proc, before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chordpub import Client  # noqa: E402
from chordpub.launcher import LocalRing  # noqa: E402


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--one-by-one", type=int, default=500, help="topics subscribed one call at a time (baseline)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ring = LocalRing(Path(tmp) / "ring")
        try:
            ring.start(args.nodes, timeout=120)
            ring.wait_consistent(120)
            via = ring.nodes[0].endpoint
            with Client(via) as client:  # the baseline first: the other client's close deletes its
                t0 = time.perf_counter()  # 10,000 fields, and the ring answers slower meanwhile
                for i in range(args.one_by_one):
                    client.subscribe(f"single/{i}")
                single_s = time.perf_counter() - t0
            with Client(via) as client:
                rss0, fd0 = rss_kib(), fds()
                t0 = time.perf_counter()
                subs = client.subscribe_many([f"many/{i}" for i in range(args.topics)], timeout=600)
                many_s = time.perf_counter() - t0
                rss1, fd1 = rss_kib(), fds()
                assert len(subs) == args.topics
        finally:
            ring.stop()
    many_ms, single_ms = 1000 * many_s / args.topics, 1000 * single_s / args.one_by_one
    report = {"nodes": args.nodes, "topics": args.topics, "subscribe_many_s": many_s,
              "subscribe_many_ms_per_topic": many_ms, "one_by_one_ms_per_topic": single_ms,
              "ratio": many_ms / single_ms, "rss_kib_per_topic": (rss1 - rss0) / args.topics,
              "fds_before": fd0, "fds_after": fd1}
    if args.json:
        print(json.dumps(report))
        return
    print(f"subscribe_many of {args.topics} topics: {many_s:.2f} s, {many_ms:.3f} ms a topic "
          f"({report['ratio']:.3f}x one subscribe() at a time: {single_ms:.3f} ms a topic over {args.one_by_one})")
    print(f"held: {report['rss_kib_per_topic']:.1f} KiB RSS a topic; file descriptors {fd0} -> {fd1}")


if __name__ == "__main__":
    main()
