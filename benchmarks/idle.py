"""What an idle ring costs: CPU and bytes sent per node per second, and the maintenance messages behind them.

    python benchmarks/idle.py [--nodes 16] [--seconds 60] [--settle 60] [--stabilize 0.5,0.2] [--quiet-stretch S]
                              [--keys N] [--baseline REV [--baseline-python PY] [--baseline-quiet-stretch S]] [--json]

For each stabilize period, a ring of --nodes node processes on loopback (`chordpub node start`, default
options otherwise) is started and left alone until it is consistent with every finger exact, then for
--settle seconds more (a ring is idle once its joins are past). Over the next --seconds the node
processes' CPU is read from /proc (user + system ticks, so libzmq's I/O threads and the kernel's work
for them count too) with the requests their maintenance sent and the rounds it ran (the nodes' own
counters, `node info`, read before the settling and after the window: a client's call is news that
woke every node of older revisions), and the bytes they sent (replies, requests, record events and
consensus messages, from the same counters, over the settling and the window). With --baseline REV, a
second ring runs the code of that git revision (its tree, extracted to a temporary directory) beside the
first, over the same window: the ratios between them are measured in one run on one machine. With
--keys N, each ring is given N keys (each put at its owner, which replicates it) once it is consistent: an
idle ring that holds data, whose replicas are refreshed and expired as they age.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chordpub.launcher import LocalRing  # noqa: E402
from dht.client import DhtClient  # noqa: E402
from dht.ids import key_id  # noqa: E402
from dht.transport import RpcClient  # noqa: E402

PUT_WINDOW = 256  # puts in flight at once while a ring is given its --keys


def cpu_ticks(pid: int) -> int:
    """User + system clock ticks of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def counters(ring: LocalRing) -> dict[str, tuple[int, int, int]]:
    """(maintenance requests sent, rounds run, bytes sent) per node: the bytes of its replies, its own
    requests and its record events, and of its consensus groups' messages (none in revisions without)."""
    with DhtClient(ring.nodes[0].endpoint, timeout=5.0) as client:
        out = {}
        for n in ring.nodes:
            info = client.info(n.endpoint)
            sent = (info.get("load") or {}).get("bytes_out") or 0
            sent += (info.get("consensus") or {}).get("bytes_out", 0)
            out[n.endpoint] = (info["traffic"].get("requests", 0), info["rounds"], sent)
        return out


def extract(rev: str, into: Path) -> Path:
    """The tree of git revision `rev`, unpacked under `into` (its node processes run from there)."""
    tree = into / f"tree-{rev}"
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def start(workdir: Path, nodes: int, stabilize: float, code: Path | None = None,
          python: str | None = None, **options: object) -> LocalRing:
    ring = LocalRing(workdir, options={"stabilize": stabilize, **options}, code=code, python=python)
    ring.start(nodes, timeout=120)
    return ring


def fill(ring: LocalRing, keys: int) -> None:
    """Put `keys` keys of 20 bytes, each straight to its owner (the ring's ids, sorted), PUT_WINDOW at once."""
    with DhtClient(ring.nodes[0].endpoint, timeout=5.0) as client:
        owners = sorted((int(client.info(n.endpoint)["id"]), n.endpoint) for n in ring.nodes)
    ids = [i for i, _ in owners]
    answered, refused, first_refusal = [0], [0], [""]

    def took(reply) -> None:  # noqa: ANN001 - a Reply
        answered[0] += 1
        if not reply.ok:
            refused[0] += 1
            first_refusal[0] = first_refusal[0] or str(reply.err)

    with RpcClient(timeout=10.0) as rpc:
        sent = 0
        while answered[0] < keys:
            while sent < keys and sent - answered[0] < PUT_WINDOW:
                name = f"idle-{sent}"
                owner = owners[bisect.bisect_left(ids, key_id(name)) % len(owners)][1]
                rpc.send(owner, "put", on_reply=took, key=name, value=b"v" * 20)
                sent += 1
            if rpc.socket.poll(100):
                rpc.on_readable()
            rpc.expire()
    if refused[0]:
        raise SystemExit(f"{refused[0]} of {keys} puts refused, e.g. {first_refusal[0]}")


def measure(rings: dict[str, LocalRing], settle: float, seconds: float, keys: int = 0) -> dict[str, dict]:
    for ring in rings.values():
        ring.wait_consistent(timeout=120, fingers=True)
        if keys:
            fill(ring, keys)
    # the counters are read before the settling: a client's call woke a node's rounds in older revisions
    sent_before = {name: counters(r) for name, r in rings.items()}
    time.sleep(settle)  # past the joins: a duration, not a synchronization
    before = {name: (sent_before[name], {n.proc.pid: cpu_ticks(n.proc.pid) for n in r.nodes})
              for name, r in rings.items()}
    t0 = time.monotonic()
    time.sleep(seconds)  # the measuring window
    elapsed = time.monotonic() - t0
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for name, ring in rings.items():
        (sent0, ticks0), pids = before[name], [n.proc.pid for n in ring.nodes]
        sent1 = counters(ring)
        cpu = [(cpu_ticks(p) - ticks0[p]) / tick / elapsed for p in pids]
        requests = sum(sent1[e][0] - sent0[e][0] for e in sent0)
        rounds = sum(sent1[e][1] - sent0[e][1] for e in sent0)
        sent_bytes = sum(sent1[e][2] - sent0[e][2] for e in sent0)
        out[name] = {"nodes": len(pids), "cpu_percent_per_node": 100 * sum(cpu) / len(cpu),
                     "cpu_percent_max": 100 * max(cpu),
                     "requests_per_node_s": requests / (elapsed + settle) / len(pids),
                     "requests_per_round": requests / max(rounds, 1),
                     "bytes_per_node_s": sent_bytes / (elapsed + settle) / len(pids), "seconds": elapsed}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=16, help="Node processes in each ring.")
    ap.add_argument("--seconds", type=float, default=60.0, help="The measuring window.")
    ap.add_argument("--settle", type=float, default=60.0, help="Seconds left alone after the ring is exact (a quiet "
                    "position's rounds reach their full stretch in about 60 periods: 8 quiet rounds a doubling).")
    ap.add_argument("--stabilize", default="0.5,0.2", help="The periods to measure, comma-separated.")
    ap.add_argument("--baseline", help="A git revision whose ring runs beside this one's (e.g. 387f6ec).")
    ap.add_argument("--baseline-python", help="The interpreter the baseline's nodes run with (a venv that has "
                    "its dependencies; default: this one).")
    ap.add_argument("--quiet-stretch", type=int, help="This revision's nodes' --quiet-stretch (default: theirs; "
                    "the baseline's nodes run their own defaults).")
    ap.add_argument("--baseline-quiet-stretch", type=int, help="The baseline's nodes' --quiet-stretch (default: "
                    "theirs).")
    ap.add_argument("--keys", type=int, default=0, help="Keys each ring holds while it idles (default none).")
    ap.add_argument("--json", action="store_true", help="Print one JSON object.")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="chordpub-idle-") as tmp:
        base_tree = extract(args.baseline, Path(tmp)) if args.baseline else None
        for period in (float(p) for p in args.stabilize.split(",")):
            rings: dict[str, LocalRing] = {}
            try:
                rings["this"] = start(Path(tmp) / f"this-{period}", args.nodes, period,
                                      **({"quiet_stretch": args.quiet_stretch} if args.quiet_stretch else {}))
                if base_tree is not None:
                    rings["baseline"] = start(Path(tmp) / f"base-{period}", args.nodes, period, base_tree,
                                              args.baseline_python, **({"quiet_stretch": args.baseline_quiet_stretch}
                                                                       if args.baseline_quiet_stretch else {}))
                result = measure(rings, args.settle, args.seconds, args.keys)
            finally:
                for ring in rings.values():
                    ring.stop()
            row = {"stabilize": period, **{f"{k}_{name}": v for name, r in result.items() for k, v in r.items()
                                           if k != "seconds"}}
            if base_tree is not None:
                row["ratio"] = result["this"]["cpu_percent_per_node"] / result["baseline"]["cpu_percent_per_node"]
                row["bytes_ratio"] = (result["this"]["bytes_per_node_s"]
                                      / max(result["baseline"]["bytes_per_node_s"], 1e-9))
            rows.append(row)
            if not args.json:
                line = (f"stabilize {period:g} s: {result['this']['cpu_percent_per_node']:.3f} % of a core per node "
                        f"(max {result['this']['cpu_percent_max']:.3f}), "
                        f"{result['this']['requests_per_round']:.2f} requests a round, "
                        f"{result['this']['bytes_per_node_s']:.0f} bytes sent per node per second")
                if base_tree is not None:
                    b = result["baseline"]
                    line += (f"; {args.baseline}: {b['cpu_percent_per_node']:.3f} % "
                             f"({b['requests_per_round']:.2f} requests a round, {b['bytes_per_node_s']:.0f} "
                             f"bytes/s): CPU ratio {row['ratio']:.2f}, bytes ratio {row['bytes_ratio']:.2f}")
                print(line, flush=True)
    if args.json:
        print(json.dumps({"nodes": args.nodes, "seconds": args.seconds, "baseline": args.baseline, "rows": rows}))


if __name__ == "__main__":
    main()
