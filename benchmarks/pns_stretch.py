"""What proximity neighbour selection buys in the simulator: stretch with PNS(16) and without it.

Baseline, measured in the same run: the same ring, keys and origins routed over plain Chord's
fingers. Then the stretch figure, stretch against N for K = 0, 2, 4, 8, 16, on a transit-stub
network and a lognormal delay matrix (docs/figures/pns-stretch.png).

    .venv/bin/python benchmarks/pns_stretch.py [--nodes 10000] [--lookups 100000] [--seeds 1,2,3]

Each ratio is given as its median over --seeds (each a different ring, placement and set of keys)
with the range. Stretch "owner reached" (the last step to the owner included) is the figure goals
are judged by; "owner named" is shown beside it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.spread import said, verdict  # noqa: E402

FIGURE = Path(__file__).resolve().parents[1] / "docs" / "figures" / "pns-stretch.png"


def chordpub(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "chordpub", *args, "--json"], capture_output=True, text=True,
                          check=True)
    return json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--lookups", type=int, default=100_000)
    ap.add_argument("--topology", default="transit_stub")
    ap.add_argument("--seeds", default="1,2,3")
    args = ap.parse_args()
    seeds = [int(x) for x in args.seeds.split(",")]
    for routing in ([], ["--iterative"]):
        rs = [chordpub("sim", "lookups", "--nodes", str(args.nodes), "--lookups", str(args.lookups), "--topology",
                       args.topology, "--pns", "16", "--seed", str(seed), *routing) for seed in seeds]
        reached = [r["stretch_reached_p50"] / r["plain_stretch_reached_p50"] for r in rs]
        named = [r["stretch_p50"] / r["plain_stretch_p50"] for r in rs]
        print(f"{args.nodes:,} nodes on {args.topology}, {args.lookups:,} lookups, {rs[0]['routing']} routing, "
              f"seeds {args.seeds}:\n"
              f"  median stretch, owner reached: PNS(16) {said([r['stretch_reached_p50'] for r in rs])}, plain "
              f"Chord {said([r['plain_stretch_reached_p50'] for r in rs])}; ratio {said(reached)}\n"
              f"  median stretch, owner named: PNS(16) {said([r['stretch_p50'] for r in rs])}, plain Chord "
              f"{said([r['plain_stretch_p50'] for r in rs])}; ratio {said(named)}\n"
              f"  median latency: PNS(16) {said([r['latency_p50_ms'] for r in rs], '.1f')} ms, plain Chord "
              f"{said([r['plain_latency_p50_ms'] for r in rs], '.1f')} ms; mean hops "
              f"{said([r['mean_hops'] for r in rs])} vs {said([r['plain_mean_hops'] for r in rs])}\n"
              f"  goals, owner reached: ratio <= 0.6 {verdict(reached, lambda x: x <= 0.6)}; stretch <= 1.5 "
              f"{verdict([r['stretch_reached_p50'] for r in rs], lambda x: x <= 1.5)}")
    curve = chordpub("sim", "stretch", "--nodes", "1000,3000,10000,30000,100000", "--png", str(FIGURE))
    for key, name in (("stretch_reached_p50", "owner reached"), ("stretch_p50", "owner named")):
        print(f"median recursive stretch, {name}, against N (columns: K)")
        for spec in dict.fromkeys(row["topology"] for row in curve["rows"]):
            print(f"  {spec}")
            for n in sorted({row["nodes"] for row in curve["rows"]}):
                cells = sorted((row["pns"], row[key]) for row in curve["rows"]
                               if row["topology"] == spec and row["nodes"] == n)
                print(f"    N={n:>7,}: " + "  ".join(f"K={k}: {v:.2f}" for k, v in cells))
    print(f"figure: {FIGURE}")


if __name__ == "__main__":
    main()
