"""What V ring positions cost in one process (`node start --vnodes V`) against V processes of one each.

    python benchmarks/vnodes.py [--vnodes 1,4,16,64] [--base 2] [--stabilize 0.5] [--window 20]

For each V, two rings on loopback, each started from --base plain nodes:
  vnodes:   one process holding V positions joins them;
  separate: V processes of one position each join them (the baseline, measured in the same run).
Once the ring is consistent and quiet (fingers exact), over --window seconds: the resident memory of
the V positions' process(es), their CPU, and the maintenance messages they send per second (stabilize,
notify, check_predecessor, fix_fingers, replication: the requests each position's maintenance makes,
counted by the node itself) with the bytes, each in all and as the ratio vnodes / separate.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chordpub.launcher import LocalRing  # noqa: E402
from dht.client import DhtClient  # noqa: E402


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    """Resident memory of a process now (/proc/PID/statm)."""
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def counters(via: str, endpoints: list[str]) -> tuple[int, int]:
    """(maintenance requests, their bytes) summed over the positions at `endpoints`."""
    with DhtClient(via, timeout=5.0) as client:
        traffic = [client.info(e)["traffic"] for e in endpoints]
    return sum(t.get("requests", 0) for t in traffic), sum(t["requests_bytes"] for t in traffic)


def measure(v: int, separate: bool, base: int, stabilize: float, window: float, workdir: Path) -> dict:
    with LocalRing(workdir, options={"stabilize": stabilize}) as ring:
        ring.start(base, timeout=120)
        if separate:
            extra = ring.start(v, timeout=300)
        else:
            extra = [ring.add(vnodes=v, timeout=120)]
        ring.wait_consistent(timeout=60 + 5 * v, fingers=True)
        endpoints = [p["endpoint"] for n in extra for p in (n.positions or [{"endpoint": n.endpoint}])]
        pids = [n.proc.pid for n in extra]
        via = ring.nodes[0].endpoint
        sent0, bytes0 = counters(via, endpoints)
        cpu0 = sum(map(cpu_seconds, pids))
        t0 = time.monotonic()
        time.sleep(window)  # the measuring window: a duration, not a synchronization
        seconds = time.monotonic() - t0
        cpu1 = sum(map(cpu_seconds, pids))
        sent1, bytes1 = counters(via, endpoints)
        rss = sum(map(rss_bytes, pids))
    return {"v": v, "separate": separate, "processes": len(extra), "rss_mb": rss / 2**20,
            "cpu": (cpu1 - cpu0) / seconds, "messages_per_s": (sent1 - sent0) / seconds,
            "bytes_per_s": (bytes1 - bytes0) / seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vnodes", default="1,4,16,64", help="The V to measure, comma-separated.")
    ap.add_argument("--base", type=int, default=2, help="Plain nodes each ring starts from.")
    ap.add_argument("--stabilize", type=float, default=0.5)
    ap.add_argument("--window", type=float, default=20.0, help="Seconds measured, on a quiet ring.")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="chordpub-vnodes-") as tmp:
        for v in (int(x) for x in args.vnodes.split(",")):
            pair = {}
            for separate in (True, False):
                r = measure(v, separate, args.base, args.stabilize, args.window,
                            Path(tmp) / f"v{v}-{'separate' if separate else 'vnodes'}")
                pair[separate] = r
                print(f"V={v} {'separate' if separate else 'vnodes'}: {r['rss_mb']:.0f} MB, "
                      f"{r['messages_per_s']:.0f} msg/s", file=sys.stderr)
            rows.append(pair)
    print(f"stabilize {args.stabilize}s, {args.base} plain nodes besides, {args.window:g}s measured on a quiet ring")
    print(f"{'V':>3} | {'RSS MB':>14} {'ratio':>6} | {'CPU':>13} {'ratio':>6} | {'maint. msg/s':>15} {'ratio':>6} | "
          f"{'maint. KB/s':>15}")
    print(f"{'':>3} | {'vnodes/separate':>14} {'':>6} | {'vnodes/separ.':>13} {'':>6} | {'vnodes/separate':>15} "
          f"{'':>6} | {'vnodes/separate':>15}")
    for pair in rows:
        a, b = pair[False], pair[True]
        print(f"{a['v']:>3} | {a['rss_mb']:>6.0f}/{b['rss_mb']:<7.0f} {a['rss_mb'] / b['rss_mb']:>5.2f}x | "
              f"{a['cpu']:>5.1%}/{b['cpu']:<7.1%} {a['cpu'] / b['cpu'] if b['cpu'] else float('nan'):>5.2f}x | "
              f"{a['messages_per_s']:>6.0f}/{b['messages_per_s']:<8.0f} "
              f"{a['messages_per_s'] / b['messages_per_s']:>5.2f}x | "
              f"{a['bytes_per_s'] / 1024:>6.1f}/{b['bytes_per_s'] / 1024:<8.1f}")


if __name__ == "__main__":
    main()
