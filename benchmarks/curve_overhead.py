"""What --curve costs: lookup latency on a local ring with and without CurveZMQ, against raw pyzmq
round trips with and without CurveZMQ, all measured in the same run.

    python benchmarks/curve_overhead.py [--nodes 16] [--lookups 2000]

For each mode (plain, curve) a fresh ring of N node processes and N bare pyzmq ROUTER echo
processes (CurveZMQ servers in curve mode); lookups from random nodes alternate with raw round
trips to random echo processes, in blocks. Printed: lookup p50, raw round-trip p50, and
  ratio = lookup p50 / ((mean hops + 1) x raw p50)   (chordpub's own cost per round trip, per mode)
  curve cost = curve / plain, for lookups and for the raw round trip.
The encryption itself is libzmq's (libsodium); what this shows is whether chordpub adds anything on
top of it. Connections are long-lived, so the handshake (and the ZAP check) is paid once per peer.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from lookup_latency import RawEchoes, pct  # noqa: E402

from chordpub.launcher import LocalRing  # noqa: E402
from dht.client import DhtClient  # noqa: E402
from dht.curve import Curve, generate, start_authenticator  # noqa: E402


def measure(nodes: int, lookups: int, keys: Path | None, seed: int) -> dict:
    rng = random.Random(seed)
    client_curve = Curve.load(keys, "client") if keys else None
    if client_curve:
        start_authenticator(client_curve)
    hops: list[int] = []
    ms: list[float] = []
    raw: list[float] = []
    block = 100
    options = {"stabilize": 0.5, **({"curve": keys} if keys else {})}
    setup = client_curve.setup if client_curve else None
    with tempfile.TemporaryDirectory() as tmp, LocalRing(Path(tmp), options=options, setup=setup) as ring:
        ring.start(nodes, timeout=120)
        ring.wait_consistent(timeout=120, fingers=True)
        endpoints = [n.endpoint for n in ring.nodes]
        echoes = RawEchoes(Path(tmp), nodes, curve=client_curve)
        try:
            with DhtClient(endpoints[0], setup=setup) as client:
                for b in range(lookups // block + 1):  # block 0 warms up (handshakes included)
                    for i in range(block):
                        found = client.lookup(f"bench-{b}-{i}-{rng.getrandbits(40)}", start=rng.choice(endpoints))
                        assert found.ok, found.error
                        if b:
                            hops.append(found.hops)
                            ms.append(found.ms)
                    r = echoes.rtts(block, spread=True, rng=rng)
                    if b:
                        raw += r
        finally:
            echoes.close()
    trips = float(np.mean(hops)) + 1
    return {"mode": "curve" if keys else "plain", "lookups": len(ms), "mean_hops": round(trips - 1, 3),
            "lookup_p50_ms": round(pct(ms, 50), 3), "lookup_p99_ms": round(pct(ms, 99), 3),
            "raw_p50_ms": round(pct(raw, 50), 4), "ratio": round(pct(ms, 50) / (trips * pct(raw, 50)), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--lookups", type=int, default=2000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        keys = Path(tmp) / "keys"
        generate(keys)
        plain = measure(args.nodes, args.lookups, None, seed=1)
        curve = measure(args.nodes, args.lookups, keys, seed=1)
    out = {"nodes": args.nodes, "plain": plain, "curve": curve,
           "curve_cost_lookup": round(curve["lookup_p50_ms"] / plain["lookup_p50_ms"], 3),
           "curve_cost_raw": round(curve["raw_p50_ms"] / plain["raw_p50_ms"], 3)}
    if args.json:
        print(json.dumps(out))
        return
    print(f"{args.nodes} nodes, {plain['lookups']} lookups per mode")
    print("| mode | mean hops | lookup p50 | lookup p99 | raw RTT p50 | ratio |")
    print("|---|---|---|---|---|---|")
    for m in (plain, curve):
        print(f"| {m['mode']} | {m['mean_hops']} | {m['lookup_p50_ms']} ms | {m['lookup_p99_ms']} ms | "
              f"{m['raw_p50_ms']} ms | {m['ratio']} |")
    print(f"curve / plain: lookups {out['curve_cost_lookup']}x, raw pyzmq round trip {out['curve_cost_raw']}x")


if __name__ == "__main__":
    main()
