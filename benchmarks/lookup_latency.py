"""Lookup latency on a local ring against the raw pyzmq round trip, measured in the same run.

    python benchmarks/lookup_latency.py [--nodes 32] [--lookups 2000]

An iterative lookup of h hops costs h + 1 request/reply round trips, so the figure of merit is
    p50(lookup) / ((mean hops + 1) x p50(raw DEALER/ROUTER round trip)).
The raw round trip is a bare pyzmq ROUTER echo (one body frame, as chordpub sends; no msgpack,
no validation, no routing), measured two ways in the same run:
  spread: each round trip goes to a random one of N echo processes, as a lookup's hops go to
          different node processes (each wake-up of a process that was idle costs the OS ~80 us
          on this machine); this is the like-for-like baseline and the headline ratio;
  hot:    every round trip goes to the same, always-warm echo process (the lower bound).
A third baseline says what any Python server pays: N processes of the least a Python request path
can be (msgpack decode, a dict of ops, a reply dict, msgpack encode; no checks, no routing, no
state), asked msgpack requests by the least a Python client can be, spread like the raw one. Its
ratio to the raw round trip is the floor under chordpub's own (a Python node cannot go below it);
the lookup's ratio to it is what chordpub itself adds. Each block's lookups are also replayed on
it, h + 1 of its round trips in a row for a lookup of h hops, and scored by the same formula: what
a lookup would score if each of its hops cost no more than the least Python request path.
Lookups and the baselines run in alternating blocks so that all see the same load. The
machine's noise moves a single run's ratio by about +-0.07, so the whole measurement is repeated
(--repeat, fresh ring each time) and every run is printed with the median.
Goal: ratio <= 1.2.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgpack
import numpy as np
import zmq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.spread import said, verdict  # noqa: E402
from chordpub.launcher import LocalRing, stop_processes, wait_for  # noqa: E402
from dht.client import DhtClient  # noqa: E402

GOAL = 1.2  # lookup p50 against (mean hops + 1) raw round trips

ECHO = """
import sys, zmq
ctx = zmq.Context()
s = ctx.socket(zmq.ROUTER)
s.setsockopt(zmq.LINGER, 0)
if len(sys.argv) > 2:  # CURVE: the server's public and secret key (Z85)
    s.curve_publickey, s.curve_secretkey = sys.argv[2].encode(), sys.argv[3].encode()
    s.curve_server = True
port = s.bind_to_random_port("tcp://127.0.0.1")
open(sys.argv[1], "w").write(str(port))
while True:
    frames = s.recv_multipart()
    if frames[-1] == b"stop":
        break
    s.send_multipart(frames)
"""

FLOOR = """
import sys, msgpack, zmq
ctx = zmq.Context()
s = ctx.socket(zmq.ROUTER)
s.setsockopt(zmq.LINGER, 0)
port = s.bind_to_random_port("tcp://127.0.0.1")
open(sys.argv[1], "w").write(str(port))
OPS = {"next_hop": lambda req: {"node": "127.0.0.1:1", "id": req["key_id"] >> 1, "done": False}}
while True:
    frames = s.recv_multipart()
    if frames[-1] == b"stop":
        break
    req = msgpack.unpackb(frames[-1])
    reply = OPS[req["op"]](req)
    reply["v"], reply["id"], reply["ok"] = req["v"], req["id"], True
    s.send_multipart([frames[0], msgpack.packb(reply)])
"""


class RawEchoes:
    """N bare pyzmq ROUTER echo processes and a DEALER to each, to time raw round trips; with
    `curve` (a dht.curve.Curve) both ends use CurveZMQ, as chordpub's sockets do under --curve.
    `code`: what each process runs (ECHO, or FLOOR: the least Python request path)."""

    def __init__(self, tmp: Path, n: int, curve=None, code: str = ECHO) -> None:  # noqa: ANN001
        self.procs: list[subprocess.Popen] = []
        self.socks: list[zmq.Socket] = []
        try:
            files = []
            for i in range(n):
                files.append(tmp / f"echo{i}-{len(code)}.port")
                keys = [curve.server_public.decode(), curve.server_secret.decode()] if curve else []
                self.procs.append(subprocess.Popen([sys.executable, "-c", code, str(files[-1]), *keys]))
            for f in files:
                wait_for(lambda f=f: f.exists() and f.read_text(), timeout=30, what="echo server")
                sock = zmq.Context.instance().socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 0)
                if curve is not None:
                    curve.setup(sock, False)
                sock.connect(f"tcp://127.0.0.1:{f.read_text()}")
                self.socks.append(sock)
        except BaseException:
            self.close()
            raise

    def rtts(self, count: int, spread: bool, rng: random.Random,
             payload: bytes = b"\x00" * 64) -> list[float]:
        out = []
        for _ in range(count):
            sock = rng.choice(self.socks) if spread else self.socks[0]
            t0 = time.perf_counter()
            sock.send(payload)
            sock.recv_multipart()
            out.append((time.perf_counter() - t0) * 1000.0)
        return out

    def floor_lookups(self, hops: list[int], rng: random.Random) -> tuple[list[float], list[float]]:
        """For each lookup's hop count h, h + 1 round trips of msgpack requests to FLOOR processes in a
        row, each to a random one, decoded as the least Python client would: (each round trip, each
        such lookup), in ms."""
        rtts, lookups = [], []
        for h in hops:
            start = time.perf_counter()
            for rid in range(h + 1):
                sock = rng.choice(self.socks)
                t0 = time.perf_counter()
                sock.send(msgpack.packb({"v": 1, "op": "next_hop", "id": rid, "key_id": rng.getrandbits(62)}))
                reply = msgpack.unpackb(sock.recv_multipart()[-1])
                rtts.append((time.perf_counter() - t0) * 1000.0)
                assert reply["ok"]
            lookups.append((time.perf_counter() - start) * 1000.0)
        return rtts, lookups

    def close(self) -> None:
        for sock in self.socks:
            sock.send(b"stop")
            sock.close()
        stop_processes(self.procs, grace=2)


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def measure(args: argparse.Namespace, seed: int) -> dict:
    rng = random.Random(seed)
    block = 100
    hops: list[int] = []
    ms: list[float] = []
    spread: list[float] = []
    hot: list[float] = []
    floor: list[float] = []
    floor_ms: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, \
            LocalRing(Path(tmp), options={"stabilize": args.stabilize}) as ring:
        ring.start(args.nodes, timeout=120)
        ring.wait_consistent(timeout=120, fingers=True)
        endpoints = [n.endpoint for n in ring.nodes]
        echoes = RawEchoes(Path(tmp), args.nodes)
        floors = RawEchoes(Path(tmp), args.nodes, code=FLOOR)
        try:
            with DhtClient(endpoints[0]) as client:
                for b in range(args.lookups // block + 1):  # block 0 warms everything up
                    block_hops = []
                    for i in range(block):
                        found = client.lookup(f"bench-{b}-{i}-{rng.getrandbits(40)}",
                                              start=rng.choice(endpoints))
                        assert found.ok, found.error
                        block_hops.append(found.hops)
                        if b:
                            hops.append(found.hops)
                            ms.append(found.ms)
                    s = echoes.rtts(block, spread=True, rng=rng)
                    h = echoes.rtts(block, spread=False, rng=rng)
                    f, fl = floors.floor_lookups(block_hops, rng)
                    if b:
                        spread += s
                        hot += h
                        floor += f
                        floor_ms += fl
        finally:
            echoes.close()
            floors.close()
    rtts = float(np.mean(hops)) + 1
    p50 = pct(ms, 50)
    return {
        "nodes": args.nodes, "lookups": len(ms), "mean_hops": round(rtts - 1, 3),
        "lookup_p50_ms": round(p50, 3), "lookup_p99_ms": round(pct(ms, 99), 3),
        "raw_spread_p50_ms": round(pct(spread, 50), 4), "raw_spread_p99_ms": round(pct(spread, 99), 4),
        "raw_hot_p50_ms": round(pct(hot, 50), 4), "raw_hot_p99_ms": round(pct(hot, 99), 4),
        "ratio": round(p50 / (rtts * pct(spread, 50)), 3),
        "ratio_vs_hot": round(p50 / (rtts * pct(hot, 50)), 3),
        "floor_spread_p50_ms": round(pct(floor, 50), 4),
        "floor_ratio": round(pct(floor, 50) / pct(spread, 50), 3),
        "ratio_vs_floor": round(p50 / (rtts * pct(floor, 50)), 3),
        "floor_lookup_p50_ms": round(pct(floor_ms, 50), 3),
        "floor_lookup_ratio": round(pct(floor_ms, 50) / (rtts * pct(spread, 50)), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--lookups", type=int, default=2000)
    ap.add_argument("--stabilize", type=float, default=0.5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    runs = []
    for seed in range(args.repeat):
        runs.append(measure(args, seed))
        r = runs[-1]
        if not args.json:
            print(f"run {seed + 1}: {r['lookups']} lookups on {r['nodes']} nodes, "
                  f"mean hops {r['mean_hops']}; "
                  f"lookup p50 {r['lookup_p50_ms']} ms p99 {r['lookup_p99_ms']} ms; raw RTT over "
                  f"{r['nodes']} processes p50 {r['raw_spread_p50_ms']} ms, one hot process "
                  f"{r['raw_hot_p50_ms']} ms; ratio {r['ratio']} (vs hot {r['ratio_vs_hot']}); the least Python "
                  f"server {r['floor_spread_p50_ms']} ms, {r['floor_ratio']} x raw, lookup against it "
                  f"{r['ratio_vs_floor']}; a lookup of the least Python round trips (the same hops) "
                  f"{r['floor_lookup_p50_ms']} ms, ratio {r['floor_lookup_ratio']}")
    summary = {"runs": runs, "median_ratio": float(np.median([r["ratio"] for r in runs])),
               "median_ratio_vs_hot": float(np.median([r["ratio_vs_hot"] for r in runs])),
               "median_floor_ratio": float(np.median([r["floor_ratio"] for r in runs])), "goal": GOAL}
    if args.json:
        print(json.dumps(summary))
        return
    ratios = [r["ratio"] for r in runs]
    print(f"p50 / ((mean hops + 1) x raw RTT), like-for-like: {said(ratios, '.3f')}, goal <= {GOAL} "
          f"{verdict(ratios, lambda x: x <= GOAL)}; against one hot process: "
          f"{said([r['ratio_vs_hot'] for r in runs], '.3f')}")
    print(f"the least Python server's round trip against the raw one: {said([r['floor_ratio'] for r in runs], '.3f')}; "
          f"the lookup against (mean hops + 1) of those: {said([r['ratio_vs_floor'] for r in runs], '.3f')}")
    floors = [r["floor_lookup_ratio"] for r in runs]
    print(f"a lookup made of the least Python round trips (each lookup's hops, h + 1 of them in a row), by the "
          f"same formula: {said(floors, '.3f')}, goal <= {GOAL} {verdict(floors, lambda x: x <= GOAL)}")


if __name__ == "__main__":
    main()
