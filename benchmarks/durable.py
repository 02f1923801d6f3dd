"""Durable against best effort and in-session reliable, one publisher to one subscriber, in one run.

    python benchmarks/durable.py [--messages 50000] [--paced 2000] [--repeat 3]

Variants (benchmarks/dissemination.py runs them: two processes on loopback, a 4-node ring):
  raw1      bare pyzmq, one frame per message: the floor everything is measured against;
  direct    best effort: chordpub.Client -> chordpub.Client with a callback;
  reliable  in-session reliable: sequence check, in-order delivery, repair from the history;
  durable   the publisher has a data directory: every message is written to its journal (a record
            of the directory's log, group commit) before it is sent and retained until the
            subscriber acknowledges it; the subscriber is durable: its position is written to its
            own data directory after every batch of callbacks, and acknowledged to the publisher
            every heartbeat.
Throughput is measured at the subscriber over a flood of --messages; latency p50/p99 over --paced
messages at 2000/s. Medians of --repeat interleaved runs. Goal: durable >= 0.5 x best-effort throughput.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.dissemination import collect, parse_args  # noqa: E402
from benchmarks.spread import said, spread, verdict  # noqa: E402

VARIANTS = ("raw1", "direct", "reliable", "durable")
GOAL = 0.5


def main() -> None:
    args = parse_args(__doc__)
    runs, med = collect(args, VARIANTS)
    best = med["direct"]
    for v in VARIANTS:
        med[v]["throughput_x_best_effort"] = med[v]["throughput"] / best["throughput"]
        med[v]["p50_x_best_effort"] = med[v]["p50_ms"] / best["p50_ms"]
        med[v]["throughput_x_raw1"] = med[v]["throughput"] / med["raw1"]["throughput"]
    per_run = [d["throughput"] / b["throughput"] for d, b in zip(runs["durable"], runs["direct"], strict=True)]
    if args.json:
        import json

        print(json.dumps({"runs": runs, "median": med, "durable_x_best_effort_per_run": spread(per_run),
                          "goal": {"durable_throughput_x_best_effort": GOAL}}))
        return
    print(f"\nmedians of {args.repeat} runs, 100-byte messages:")
    print(f"{'variant':9s} {'msg/s':>9s} {'x best-effort':>13s} {'x raw1':>7s} {'p50 ms':>8s} {'x best-effort':>13s} "
          f"{'p99 ms':>8s}")
    for v in VARIANTS:
        m = med[v]
        print(f"{v:9s} {m['throughput']:9.0f} {m['throughput_x_best_effort']:13.2f} {m['throughput_x_raw1']:7.2f} "
              f"{m['p50_ms']:8.3f} {m['p50_x_best_effort']:13.2f} {m['p99_ms']:8.3f}")
    print(f"goal: durable >= {GOAL} x best-effort throughput, run by run: {said(per_run)}: "
          f"{verdict(per_run, lambda r: r >= GOAL)}")


if __name__ == "__main__":
    main()
