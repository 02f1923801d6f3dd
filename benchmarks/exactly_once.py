"""Exactly once into the application's database, chordpub beside NATS JetStream, in one run.

    make bench-deps && python benchmarks/exactly_once.py [--messages 50000] [--paced 2000] [--repeat 3] [--json]

Each system's subscriber writes every message as a row of its own SQLite database (WAL, synchronous=NORMAL)
in its callback, a fresh process with its system's Python client (benchmarks/peers_systems.py):
  chordpub-durable        at least once: both sides with a data directory, the application commits each
                          row itself and the position follows (what the durable path costs with that work);
  chordpub-exactly-once   msg ids on every publish (deduplicated in the publisher's window, journaled) and
                          a durable subscription with commit_with: each row commits with the position;
  jetstream-exactly-once  nats-server with JetStream (file storage), every publish with a Nats-Msg-Id, a
                          durable push consumer with manual acks: the row committed, then `ack_sync` (the
                          double ack JetStream's exactly once is built on).
Throughput is what the subscriber's application got from the flood's first send to its last arrival;
latency p50/p99 over --paced messages at 1000/s, read in the callback. The systems take turns in each
of --repeat rounds. Goals: chordpub's exactly once >= 2x JetStream's throughput, and costing at most
1.5x chordpub's own at-least-once durable path (durable msg/s / exactly-once msg/s).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.peers import WORKLOADS, Servers, run_point  # noqa: E402
from benchmarks.spread import said, spread, verdict  # noqa: E402

WORKLOAD = "exactly-once"
SYSTEMS = WORKLOADS[WORKLOAD][0]
GOAL_X_JETSTREAM = 2.0
GOAL_COST = 1.5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=50_000, help="flood messages per run")
    ap.add_argument("--paced", type=int, default=2000, help="paced messages (1000/s) for latency")
    ap.add_argument("--repeat", type=int, default=3, help="rounds; every system once in each")
    ap.add_argument("--limit", type=float, default=300.0, help="seconds a subscriber waits at most")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout instead of the table")
    args = ap.parse_args()
    if args.messages < 1 or args.paced < 0 or args.repeat < 1:
        ap.error("--messages and --repeat are at least 1, --paced at least 0")
    args.fan, args.topics = 1, 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a terminated run still stops its servers
    runs: dict[str, list[dict]] = {s: [] for s in SYSTEMS}
    with tempfile.TemporaryDirectory() as tmp_name:
        servers = Servers(Path(tmp_name))
        try:
            for r in range(args.repeat):
                for system in SYSTEMS:
                    row = run_point(servers, system, WORKLOAD, 1, 1, args, f"r{r}-{system}")
                    runs[system].append(row)
                    print(f"round {r + 1}/{args.repeat} {system:23s} delivered {row['delivered']} of {row['sent']}"
                          f"  {row.get('msg_per_s', 0):8.0f} msg/s  p50 {row.get('p50_ms', float('nan')):.3f} ms",
                          file=sys.stderr, flush=True)
        finally:
            servers.close()
    lost = [(s, r) for s in SYSTEMS for r in runs[s] if r["delivered"] < r["sent"]]
    x_js = [c["msg_per_s"] / j["msg_per_s"] for c, j in
            zip(runs["chordpub-exactly-once"], runs["jetstream-exactly-once"], strict=True)]
    cost = [d["msg_per_s"] / c["msg_per_s"] for d, c in
            zip(runs["chordpub-durable"], runs["chordpub-exactly-once"], strict=True)]
    med = {s: {k: spread([r[k] for r in runs[s]]) for k in ("msg_per_s", "p50_ms", "p99_ms")} for s in SYSTEMS}
    if args.json:
        print(json.dumps({"runs": runs, "median": med, "exactly_once_x_jetstream": spread(x_js),
                          "exactly_once_cost_x_durable": spread(cost), "lost": len(lost),
                          "goal": {"x_jetstream": GOAL_X_JETSTREAM, "cost": GOAL_COST}}))
        return
    print(f"\n{args.repeat} rounds, {args.messages} messages of 100 bytes, each a row of the subscriber's SQLite "
          "database:")
    print(f"{'system':24s} {'msg/s':>9s} {'p50 ms':>8s} {'p99 ms':>8s}")
    for s in SYSTEMS:
        m = med[s]
        print(f"{s:24s} {m['msg_per_s']['median']:9.0f} {m['p50_ms']['median']:8.3f} {m['p99_ms']['median']:8.3f}")
    print(f"chordpub exactly once / JetStream exactly once: {said(x_js)}x, goal >= {GOAL_X_JETSTREAM}: "
          f"{verdict(x_js, lambda v: v >= GOAL_X_JETSTREAM)}")
    print(f"exactly once's cost (chordpub durable msg/s / exactly-once msg/s): {said(cost)}x, goal <= {GOAL_COST}: "
          f"{verdict(cost, lambda v: v <= GOAL_COST)}")
    if lost:
        print(f"NOT every message delivered in {len(lost)} runs: {[(s, r['delivered']) for s, r in lost]}")


if __name__ == "__main__":
    main()
