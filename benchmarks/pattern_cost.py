"""What wildcard subscriptions cost the ring: record items and bytes per node per second.

    python benchmarks/pattern_cost.py [--nodes 16] [--topics 10000] [--patterns 100] [--seconds 30]
                                      [--heartbeat 1.0] [--json]

A ring of --nodes node processes on loopback; one publisher process whose Client publishes once on each
of --topics topics `pc/<k>/<n>` (k = n mod --patterns) and then keeps them registered (renewals, one
heartbeat apart). Once its registrations are in place and the ring has settled, the nodes' own counters
(`node info`: record items served, bytes in and out, record fields held) are read over --seconds: the
cost of the topics alone, their announcements at the prefix records included. Then one subscriber
process places --patterns patterns `pc/<k>/*` (each matching topics/patterns topics) and, once every
pattern follows its topics, the same window is read again. The figure is the second against the first:
what the patterns add, per node and second, in the same run on the same ring.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chordpub.launcher import LocalRing, stop_processes, wait_for  # noqa: E402
from dht.client import DhtClient  # noqa: E402


def totals(ring: LocalRing) -> dict[str, float]:
    """The ring's counters summed over its nodes (each read from the node itself)."""
    out = {"record_items": 0.0, "bytes": 0.0, "record_fields": 0.0, "events_bytes": 0.0}
    with DhtClient(ring.nodes[0].endpoint, timeout=5.0) as client:
        for n in ring.nodes:
            info = client.info(n.endpoint)
            load, traffic = info["load"], info["traffic"]
            out["record_items"] += load["record_items"]
            out["bytes"] += load["bytes_in"] + load["bytes_out"]
            out["record_fields"] += traffic["record_fields"]
            out["events_bytes"] += traffic["events_bytes"]
    return out


def window(ring: LocalRing, seconds: float) -> dict[str, float]:
    """Per node and second over `seconds`: record items, bytes, event bytes; and the fields held at its end."""
    before, t0 = totals(ring), time.monotonic()
    time.sleep(seconds)  # a measurement window, not a synchronization
    after, dt = totals(ring), time.monotonic() - t0
    per = len(ring.nodes) * dt
    return {"record_items_per_node_s": (after["record_items"] - before["record_items"]) / per,
            "bytes_per_node_s": (after["bytes"] - before["bytes"]) / per,
            "event_bytes_per_node_s": (after["events_bytes"] - before["events_bytes"]) / per,
            "record_fields_per_node": after["record_fields"] / len(ring.nodes)}


def child(args: argparse.Namespace) -> None:
    """The publisher (`--child pub`) or the pattern subscriber (`--child sub`) process."""
    from chordpub import Client

    ready, stop = Path(args.ready), Path(args.stop)
    with Client(args.via, heartbeat=args.heartbeat) as client:
        if args.child == "pub":
            for n in range(args.topics):
                client.publish(f"pc/{n % args.patterns}/{n}", b"x")
            wait_for(lambda: not client.publisher.advertiser._pending, 300, what="every topic registered")
        else:
            subs = [client.subscribe(f"pc/{k}/*", timeout=120) for k in range(args.patterns)]
            want = args.topics // args.patterns
            wait_for(lambda: all(len(s.pattern.topics) >= want for s in subs), 300, what="every pattern's topics")
        ready.write_text("1")
        while not stop.exists():
            time.sleep(0.2)  # serving until told to stop


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--patterns", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--settle", type=float, default=10.0, help="seconds left alone before each window")
    ap.add_argument("--heartbeat", type=float, default=1.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", choices=("pub", "sub"), help=argparse.SUPPRESS)
    for name in ("--via", "--ready", "--stop"):
        ap.add_argument(name, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        ring = LocalRing(tmp / "ring")
        try:
            print(f"starting {args.nodes} nodes", file=sys.stderr)
            ring.start(args.nodes, timeout=120)
            ring.wait_consistent(120)
            via = ring.nodes[0].endpoint
            common = ["--via", via, "--topics", str(args.topics), "--patterns", str(args.patterns),
                      "--heartbeat", str(args.heartbeat), "--stop", str(tmp / "stop")]

            def spawn(kind: str) -> None:
                ready = tmp / f"{kind}.ready"
                procs.append(subprocess.Popen([sys.executable, __file__, "--child", kind, "--ready", str(ready),
                                               *common], stderr=open(tmp / f"{kind}.log", "w")))  # noqa: SIM115
                wait_for(lambda: ready.exists() or procs[-1].poll() is not None, 600, what=f"the {kind} process")
                if procs[-1].poll() is not None:
                    raise SystemExit(f"the {kind} process failed: {(tmp / f'{kind}.log').read_text()[-2000:]}")

            print(f"publishing on {args.topics} topics", file=sys.stderr)
            spawn("pub")
            time.sleep(args.settle)  # letting the registrations' first rounds pass before the window
            print(f"measuring {args.seconds:g}s without patterns", file=sys.stderr)
            without = window(ring, args.seconds)
            print(f"placing {args.patterns} patterns", file=sys.stderr)
            spawn("sub")
            time.sleep(args.settle)
            print(f"measuring {args.seconds:g}s with them", file=sys.stderr)
            with_patterns = window(ring, args.seconds)
        finally:
            (tmp / "stop").write_text("1")
            stop_processes(procs, grace=10)
            ring.stop()
    report = {"nodes": args.nodes, "topics": args.topics, "patterns": args.patterns, "heartbeat": args.heartbeat,
              "without": without, "with": with_patterns,
              "ratio": {k: (with_patterns[k] / without[k] if without[k] else None) for k in without}}
    if args.json:
        print(json.dumps(report))
        return
    print(f"{args.nodes} nodes, {args.topics} topics, heartbeat {args.heartbeat:g}s; per node:")
    for key in without:
        r = report["ratio"][key]
        print(f"  {key:28s} without patterns {without[key]:>12.1f}  with {args.patterns}: "
              f"{with_patterns[key]:>12.1f}  ({'-' if r is None else f'{r:.2f}x'})")


if __name__ == "__main__":
    main()
