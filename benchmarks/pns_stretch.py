"""What proximity neighbour selection buys in the simulator: stretch with PNS(16) and without it.

Baseline, measured in the same run: the same ring, keys and origins routed over plain Chord's
fingers. Then the stretch figure, stretch against N for K = 0, 2, 4, 8, 16, on a transit-stub
network and a lognormal delay matrix (docs/figures/pns-stretch.png).

    .venv/bin/python benchmarks/pns_stretch.py [--nodes 10000] [--lookups 100000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

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
    args = ap.parse_args()
    for routing in ([], ["--iterative"]):
        r = chordpub("sim", "lookups", "--nodes", str(args.nodes), "--lookups", str(args.lookups), "--topology",
                     args.topology, "--pns", "16", "--seed", "1", *routing)
        print(f"{args.nodes:,} nodes on {args.topology}, {args.lookups:,} lookups, {r['routing']} routing:\n"
              f"  median stretch: PNS(16) {r['stretch_p50']:.2f}, plain Chord {r['plain_stretch_p50']:.2f} "
              f"(ratio {r['stretch_p50'] / r['plain_stretch_p50']:.2f})\n"
              f"  median latency: PNS(16) {r['latency_p50_ms']:.1f} ms, plain Chord {r['plain_latency_p50_ms']:.1f} ms "
              f"({r['latency_p50_reduction']:.0%} lower); mean hops {r['mean_hops']:.2f} vs {r['plain_mean_hops']:.2f}")
    curve = chordpub("sim", "stretch", "--nodes", "1000,3000,10000,30000,100000", "--png", str(FIGURE))
    print("median recursive stretch against N (columns: K)")
    for spec in dict.fromkeys(row["topology"] for row in curve["rows"]):
        print(f"  {spec}")
        for n in sorted({row["nodes"] for row in curve["rows"]}):
            cells = sorted((row["pns"], row["stretch_p50"]) for row in curve["rows"]
                           if row["topology"] == spec and row["nodes"] == n)
            print(f"    N={n:>7,}: " + "  ".join(f"K={k}: {v:.2f}" for k, v in cells))
    print(f"figure: {FIGURE}")


if __name__ == "__main__":
    main()
