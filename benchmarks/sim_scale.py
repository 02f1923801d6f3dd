"""How far the simulator scales: `chordpub sim lookups` at 10^6 and 10^7 nodes (10^8 with --big).

Baselines, measured in the same run:
- a plain Chord ring of per-node Python objects (each node holds its finger list and successor list,
  lookups follow the same next-hop rule in a Python loop), the way PeerSim-style and course-project
  simulators are written, at 10^4 nodes;
- the simulator itself on one core (NUMBA_NUM_THREADS=1), the figure before it used both.
The simulator is compared with the per-object ring at the same size (10^4); the 10^6 point is run
`--repeat` times (5) and given as its median with the range, since this machine's speed varies.
Each run is its own process, so that its peak RSS is its own.

    .venv/bin/python benchmarks/sim_scale.py [--big] [--lookups 1000000]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import resource
import subprocess
import sys
import time

MASK = (1 << 64) - 1


class ObjectNode:
    __slots__ = ("id", "fingers", "successors")

    def __init__(self, node_id: int) -> None:
        self.id = node_id
        self.fingers: list[ObjectNode] = []
        self.successors: list[ObjectNode] = []


def build_object_ring(n: int, r: int, rng: random.Random) -> list[ObjectNode]:
    ids_set: set[int] = set()
    while len(ids_set) < n:
        ids_set.add(rng.getrandbits(64))
    ids = sorted(ids_set)
    nodes = [ObjectNode(i) for i in ids]
    for pos, node in enumerate(nodes):
        node.successors = [nodes[(pos + j) % n] for j in range(1, min(r, n - 1) + 1)]
        for j in range(64):
            k = bisect.bisect_left(ids, (node.id + (1 << j)) & MASK)
            node.fingers.append(nodes[k % n])
    return nodes


def object_lookup(start: ObjectNode, k: int) -> tuple[int, int]:
    """(owner id, hops): the ToN'03 Fig. 5 rule with the successor list, one object at a time."""
    cur, hops = start, 0
    while True:
        me = cur.id
        succ = cur.successors[0]
        dk = (k - me) & MASK
        if 0 < dk <= ((succ.id - me) & MASK):
            return succ.id, hops
        limit = dk or MASK + 1
        best, best_d = cur, 0
        for f in reversed(cur.fingers):
            d = (f.id - me) & MASK
            if 0 < d < limit:
                best, best_d = f, d
                break
        for s in cur.successors:
            d = (s.id - me) & MASK
            if best_d < d < limit:
                best, best_d = s, d
        cur, hops = best, hops + 1


def baseline(n: int, count: int) -> dict:
    rng = random.Random(1)
    t0 = time.perf_counter()
    nodes = build_object_ring(n, 8, rng)
    build_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    hops = 0
    for _ in range(count):
        hops += object_lookup(nodes[rng.randrange(n)], rng.getrandbits(64))[1]
    lookup_s = time.perf_counter() - t1
    return {"nodes": n, "lookups": count, "build_s": build_s, "lookups_per_s": count / lookup_s,
            "mean_hops": hops / count, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def simulator(n: int, count: int, threads: int | None = None) -> dict:
    env = dict(os.environ)
    if threads is not None:
        env["NUMBA_NUM_THREADS"] = str(threads)
    proc = subprocess.run([sys.executable, "-m", "chordpub", "sim", "lookups", "--nodes", str(n), "--lookups",
                           str(count), "--seed", "1", "--json"], capture_output=True, text=True, check=True, env=env)
    return json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--big", action="store_true", help="also 10^8 nodes (about 4 GB and a minute)")
    ap.add_argument("--lookups", type=int, default=1_000_000)
    ap.add_argument("--baseline-lookups", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=5, help="runs of the 10^6 point (its median and range)")
    args = ap.parse_args()
    base = baseline(10_000, args.baseline_lookups)
    print(f"baseline: per-object Python ring, 10^4 nodes: build {base['build_s']:.2f} s, "
          f"{base['lookups_per_s']:,.0f} lookups/s, mean {base['mean_hops']:.3f} hops, "
          f"peak RSS {base['peak_rss_mb']:.0f} MB")
    same_n = simulator(10_000, args.lookups)
    print(f"the simulator at the same 10^4 nodes: {same_n['lookups_per_s']:,} lookups/s, "
          f"{same_n['lookups_per_s'] / base['lookups_per_s']:.1f}x the per-object ring")
    one = simulator(1_000_000, args.lookups, threads=1)
    print(f"the simulator on one core, 10^6 nodes: {one['lookups_per_s']:,} lookups/s")
    sizes = [1_000_000, 10_000_000] + ([100_000_000] if args.big else [])
    print(f"{'nodes':>11} {'build s':>8} {'lookups/s (median)':>18} {'range':>21} {'x 1 core':>8} {'mean hops':>9} "
          f"{'peak RSS MB':>11}")
    for n in sizes:
        runs = [simulator(n, args.lookups) for _ in range(args.repeat if n == 1_000_000 else 1)]
        rates = sorted(r["lookups_per_s"] for r in runs)
        s = runs[0]
        median = rates[len(rates) // 2]
        cores = median / one["lookups_per_s"] if n == 1_000_000 else float("nan")
        spread = f"{rates[0]:,}-{rates[-1]:,}" if len(rates) > 1 else ""
        print(f"{n:>11,} {s['build_s']:>8.2f} {median:>18,} {spread:>21} {cores:>8.2f}"
              f" {s['mean_hops']:>9.3f} {s['peak_rss_mb']:>11.0f}")


if __name__ == "__main__":
    main()
