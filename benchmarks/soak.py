"""Soak: one subscriber at a publisher's full rate for 10^7 messages; does its memory hold flat?

    python benchmarks/soak.py [--messages 10000000] [--size 100] [--json]

A 2-node ring on loopback; a publishing Client sends 100-byte messages as fast as it can, in its own
process, to one subscribing Client (callback) in another, until the subscriber has seen --messages
of them (received, or known lost: a subscriber slower than its publisher loses messages at the
publishers' high-water mark, and says how many). The subscriber prints its RSS (/proc/self/statm)
and the subscription's latency p50/p99 (its own figure: send to the frame leaving its socket)
when it has seen 10^6 and --messages messages; growth is the
RSS at the end less the RSS at 10^6. Baseline, same run: bare pyzmq PUB -> SUB for the same count,
whose subscriber keeps nothing at all (its growth is the floor).
Goal: the subscriber's growth <= 50 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.spread import said, verdict  # noqa: E402
from chordpub.launcher import LocalRing, stop_processes, wait_for  # noqa: E402

TOPIC = "soak"
FIRST = 1_000_000


def rss_mb() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_publisher(args: argparse.Namespace) -> None:
    stop = Path(args.stop)
    payload = b"\x00" * args.size
    if args.variant == "raw":
        import zmq

        sock = zmq.Context.instance().socket(zmq.PUB)
        sock.setsockopt(zmq.SNDHWM, 100_000)
        Path(args.port_file).write_text(str(sock.bind_to_random_port("tcp://127.0.0.1")))
        send = sock.send
        frame = b"soak" + payload
        i = 0
        while not stop.exists():
            for _ in range(10_000):
                send(frame)
            i += 1
        sock.close(linger=0)
        return
    from chordpub import Client

    with Client(args.via) as client:
        client.advertise(TOPIC)
        publish = client.publish
        while not stop.exists():
            for _ in range(10_000):
                publish(TOPIC, payload)


def run_subscriber(args: argparse.Namespace) -> None:
    out = Path(args.out)
    marks: dict[str, dict] = {}
    start_rss = rss_mb()
    if args.variant == "raw":
        import zmq

        sock = zmq.Context.instance().socket(zmq.SUB)
        sock.setsockopt(zmq.RCVHWM, 100_000)
        sock.setsockopt(zmq.SUBSCRIBE, b"soak")
        wait_for(lambda: Path(args.port_file).exists() and Path(args.port_file).read_text(), timeout=30,
                 what="the raw publisher's port")
        sock.connect(f"tcp://127.0.0.1:{Path(args.port_file).read_text()}")
        Path(args.ready).write_text("1")
        recv = sock.recv
        n = 0
        t0 = time.monotonic()
        for mark in (FIRST, args.messages):
            while n < mark:
                recv()
                n += 1
            marks[str(mark)] = {"rss_mb": round(rss_mb(), 1), "seconds": round(time.monotonic() - t0, 1)}
        out.write_text(json.dumps({"start_rss_mb": round(start_rss, 1), "marks": marks}))
        return
    from chordpub import Client

    seen = [0]

    def on_message(_m: object) -> None:
        seen[0] += 1

    with Client(args.via) as client:
        sub = client.subscribe(TOPIC, callback=on_message)
        Path(args.ready).write_text("1")
        t0 = time.monotonic()
        for mark in (FIRST, args.messages):
            # seen: delivered, or lost before us (the publisher's high-water mark) or at our queue
            wait_for(lambda mark=mark: seen[0] + sub.lost + sub.stats.dropped >= mark, timeout=3600,
                     interval=0.05, what=f"{mark} messages")
            stats = sub.stats
            marks[str(mark)] = {"rss_mb": round(rss_mb(), 1), "seconds": round(time.monotonic() - t0, 1),
                                "delivered": stats.received, "lost": sub.lost, "dropped": stats.dropped,
                                "latency_p50_ms": round(stats.latency.quantile(0.5), 3),
                                "latency_p99_ms": round(stats.latency.quantile(0.99), 3)}
        out.write_text(json.dumps({"start_rss_mb": round(start_rss, 1), "marks": marks}))


def run(variant: str, via: str, tmp: Path, args: argparse.Namespace) -> dict:
    files = {k: tmp / f"{variant}.{k}" for k in ("ready", "stop", "out", "port")}
    common = ["--variant", variant, "--via", via, "--ready", str(files["ready"]), "--stop", str(files["stop"]),
              "--out", str(files["out"]), "--port-file", str(files["port"]), "--messages", str(args.messages),
              "--size", str(args.size)]
    me = [sys.executable, str(Path(__file__).resolve())]
    procs = [subprocess.Popen([*me, "--child", "sub", *common], stdin=subprocess.DEVNULL)]
    try:
        if variant == "raw":
            procs.append(subprocess.Popen([*me, "--child", "pub", *common], stdin=subprocess.DEVNULL))
        wait_for(lambda: files["ready"].exists() or procs[0].poll() is not None, timeout=60, what="subscriber")
        if variant != "raw":
            procs.append(subprocess.Popen([*me, "--child", "pub", *common], stdin=subprocess.DEVNULL))
        wait_for(lambda: files["out"].exists() or procs[0].poll() is not None, timeout=7200, interval=0.5,
                 what=f"{variant} subscriber")
        if not files["out"].exists():
            raise SystemExit(f"the {variant} subscriber failed (exit {procs[0].returncode})")
        return json.loads(files["out"].read_text())
    finally:
        files["stop"].write_text("1")
        stop_processes(procs, grace=10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=10_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3, help="runs, each on a fresh ring (the goal is judged on each)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", choices=("pub", "sub"), help=argparse.SUPPRESS)
    for hidden in ("--variant", "--via", "--ready", "--stop", "--out", "--port-file"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        (run_publisher if args.child == "pub" else run_subscriber)(args)
        return
    if args.messages <= FIRST:
        raise SystemExit(f"--messages must exceed {FIRST}")
    every = [one_run(args) for _ in range(args.repeat)]
    if args.json:
        print(json.dumps(every if args.repeat > 1 else every[0]))
        return
    for i, results in enumerate(every, 1):
        for v, r in results.items():
            first, last = r["marks"][str(FIRST)], r["marks"][str(args.messages)]
            extra = ""
            if v == "chordpub":
                extra = (f"; at {args.messages:.0e}: delivered {last['delivered']}, lost {last['lost']} (publisher's "
                         f"high-water mark), dropped {last['dropped']}; latency p50 {last['latency_p50_ms']} ms, "
                         f"p99 {last['latency_p99_ms']} ms (at 10^6: {first['latency_p50_ms']} / "
                         f"{first['latency_p99_ms']})")
            print(f"run {i} {v:9s} RSS start {r['start_rss_mb']} MB, at 10^6 {first['rss_mb']} MB "
                  f"({first['seconds']} s), at {args.messages:.0e} {last['rss_mb']} MB ({last['seconds']} s): "
                  f"growth {r['growth_mb']} MB{extra}")
    growth = [r["chordpub"]["growth_mb"] for r in every]
    raw = [r["raw"]["growth_mb"] for r in every]
    print(f"goal: growth <= 50 MB, run by run: {said(growth, '.1f')} MB, {verdict(growth, lambda g: g <= 50)} "
          f"(raw pyzmq: {said(raw, '.1f')} MB)")


def one_run(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp, LocalRing(Path(tmp) / "ring", options={"stabilize": 0.5}) as ring:
        ring.start(2)
        ring.wait_consistent(timeout=60)
        results = {v: run(v, ring.nodes[0].endpoint, Path(tmp), args) for v in ("raw", "chordpub")}
    for r in results.values():
        r["growth_mb"] = round(r["marks"][str(args.messages)]["rss_mb"] - r["marks"][str(FIRST)]["rss_mb"], 1)
    return results


if __name__ == "__main__":
    main()
