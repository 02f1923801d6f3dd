"""Ring unification on Mininet: time to one ring after a partition heals, and what probing costs.

    python benchmarks/partition.py [--sizes 8,16,32] [--stabilize 0.5] [--cut 10] [--window 20]

For each size N: N nodes on two switches (N/2 each, topologies/partition.py), one consistent ring.
  probe cost: over --window seconds with nothing split, the probes and bytes the probers sent, per node
              per second, beside the maintenance thread's own requests in the same window (the
              baseline: stabilize, fix_fingers, replication), as a ratio;
  merge:      the link between the switches cut until each side is a consistent ring of its own (and
              at least --cut seconds), then restored: seconds (and stabilization periods) until
              `ring check` finds one consistent ring of N with no member alive elsewhere.
Needs root and Mininet (`make test` installs it).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from topologies.partition import partitioned_ring  # noqa: E402


def measure(n: int, stabilize: float, cut: float, window: float, workdir: Path) -> dict:
    half = n // 2
    with partitioned_ring(half, n - half, workdir, stabilize) as ring:
        ring.start_nodes()
        a, b = ring.side_a[0], ring.side_b[0]
        if ring.wait_ring(a, n, timeout=120)["seconds"] is None:
            raise RuntimeError(f"{n} nodes never made one consistent ring")
        before = ring.stats(a)
        t0 = time.monotonic()
        time.sleep(window)  # the measuring window: a duration, not a synchronization
        after = ring.stats(a)
        span = (time.monotonic() - t0) * n
        probe_rate = (after["probes"] - before["probes"]) / span
        probe_bytes = (after["probe_bytes"] - before["probe_bytes"]) / span
        base_bytes = (after["requests_bytes"] - before["requests_bytes"]) / span
        ring.link(up=False)
        cut_at = time.monotonic()
        for host, size in ((a, half), (b, n - half)):
            if ring.wait_ring(host, size, timeout=60)["seconds"] is None:
                raise RuntimeError(f"a side of {size} did not settle into its own ring")
        time.sleep(max(0.0, cut - (time.monotonic() - cut_at)))  # the cut's length, not a synchronization
        ring.link(up=True)
        healed = ring.wait_ring(b, n, timeout=120, since=time.time())["seconds"]  # from the heal itself
    return {"n": n, "merge_s": healed, "merge_periods": None if healed is None else healed / stabilize,
            "probes_per_node_s": probe_rate, "probe_bytes_per_node_s": probe_bytes,
            "maintenance_bytes_per_node_s": base_bytes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="8,16,32")
    ap.add_argument("--stabilize", type=float, default=0.5)
    ap.add_argument("--cut", type=float, default=10.0)
    ap.add_argument("--window", type=float, default=20.0)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="chordpub-partition-") as tmp:
        for n in (int(x) for x in args.sizes.split(",")):
            rows.append(measure(n, args.stabilize, args.cut, args.window, Path(tmp) / f"n{n}"))
            r = rows[-1]
            print(f"N={n}: merged {r['merge_s']}s after the heal", file=sys.stderr)
    print(f"stabilize {args.stabilize}s, cut >= {args.cut}s, probe window {args.window}s")
    print(f"{'N':>4} {'merge s':>8} {'periods':>8} {'probes/node/s':>14} {'probe B/node/s':>15} "
          f"{'maint. B/node/s':>16} {'probe/maint.':>13}")
    for r in rows:
        merge = "never" if r["merge_s"] is None else f"{r['merge_s']:.2f}"
        periods = "-" if r["merge_periods"] is None else f"{r['merge_periods']:.1f}"
        ratio = r["probe_bytes_per_node_s"] / r["maintenance_bytes_per_node_s"] if r[
            "maintenance_bytes_per_node_s"] else float("nan")
        print(f"{r['n']:>4} {merge:>8} {periods:>8} {r['probes_per_node_s']:>14.2f} "
              f"{r['probe_bytes_per_node_s']:>15.0f} {r['maintenance_bytes_per_node_s']:>16.0f} {ratio:>12.2f}x")


if __name__ == "__main__":
    main()
