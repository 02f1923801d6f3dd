"""What a policy (--acl) costs, per message and per registration, against no policy, in one run.

    python benchmarks/policy_overhead.py [--messages 50000] [--topics 200] [--rules 300] [--repeat 3]

Two rings of 2 nodes, both under CurveZMQ (a policy needs it, so CURVE is the baseline's too), one of
them with a policy of --rules rules (each principal's own, among others' patterns, so matching does
some work) that allows what is measured. For each ring, in turn and --repeat times:
- registrations: one client subscribes to --topics fresh topics one after another (each a placement
  and a read of the record at its owner, the node judging both), per subscribe;
- messages: one publishing client (under the policy, its PUB socket lets through only what each
  peer may read) sends --messages 100-byte messages to one subscribing client as fast as it can
  (throughput at the subscriber's callback), then 2000 paced at 2000/s (latency at the callback).
Each figure with its ratio to the same run's figure without the policy; medians over the runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.spread import said  # noqa: E402
from chordpub import Client  # noqa: E402
from chordpub.launcher import LocalRing, wait_for  # noqa: E402
from dht.curve import Curve, add_principal, generate  # noqa: E402


def policy_text(rules: int) -> str:
    lines = ['[principals.bench_pub.publish]', 'allow = ["bench/>"]', '[principals.bench_sub.subscribe]',
             'allow = ["bench/>"]']
    for i in range(rules):  # others' rules: the matcher walks past them
        lines += [f'[principals.other{i}.subscribe]', f'allow = ["team{i}/*/live", "team{i}/>"]',
                  f'deny = ["team{i}/secret"]']
    return "\n".join(lines) + "\n"


def registrations(via: str, keys: Path, topics: int, tag: str) -> float:
    with Client(via, curve=keys, role="bench_sub", heartbeat=1.0) as c:
        t0 = time.perf_counter()
        for i in range(topics):
            c.subscribe(f"bench/{tag}/{i}")
        return (time.perf_counter() - t0) / topics * 1000


def messages(via: str, keys: Path, acl: Path | None, n: int, tag: str) -> dict:
    topic = f"bench/{tag}/flood"
    stamps: list[int] = []
    latencies: list[float] = []
    with Client(via, curve=keys, role="bench_pub", acl=acl, heartbeat=1.0) as pub, \
            Client(via, curve=keys, role="bench_sub", heartbeat=1.0) as sub:
        pub.advertise(topic)
        phase = [0]

        def take(m) -> None:  # noqa: ANN001
            if phase[0] == 0:
                stamps.append(time.perf_counter_ns())
            else:
                latencies.append((time.time_ns() - m.sent_ns) / 1e6)

        sub.subscribe(topic, callback=take)
        for _ in range(n):
            pub.publish(topic, b"x" * 100)
        wait_for(lambda: len(stamps) + sub.subscriptions[topic].lost >= n, 120, what="the flood")
        got = len(stamps)
        phase[0] = 1
        t0 = time.monotonic()
        for i in range(2000):
            pub.publish(topic, b"y" * 100)
            time.sleep(max(t0 + (i + 1) / 2000 - time.monotonic(), 0))  # paced at 2000/s
        wait_for(lambda: len(latencies) >= 1900, 30, what="the paced messages")
    seconds = (stamps[-1] - stamps[0]) / 1e9
    return {"msg_per_s": (got - 1) / seconds, "delivered": got, "p50_ms": float(np.percentile(latencies, 50))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--topics", type=int, default=200)
    ap.add_argument("--rules", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {"none": [], "policy": []}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        keys = tmp / "keys"
        generate(keys)
        for name in ("bench_pub", "bench_sub"):
            add_principal(keys, name)
        acl = tmp / "acl.toml"
        acl.write_text(policy_text(args.rules))
        setup = Curve.load(keys, "client").setup
        with LocalRing(tmp / "plain", options={"stabilize": 0.5, "curve": keys}, setup=setup) as plain, \
                LocalRing(tmp / "policed", options={"stabilize": 0.5, "curve": keys, "acl": acl},
                          setup=setup) as policed:
            for ring in (plain, policed):
                ring.start(2)
                ring.wait_consistent(timeout=60)
            for r in range(args.repeat):
                for name, ring, policy in (("none", plain, None), ("policy", policed, acl)):
                    via = ring.nodes[0].endpoint
                    row = {"ms_per_subscribe": registrations(via, keys, args.topics, f"{name}{r}"),
                           **messages(via, keys, policy, args.messages, f"{name}{r}")}
                    runs[name].append(row)
                    if not args.json:
                        print(f"run {r + 1} {name:6s}: {row['ms_per_subscribe']:.3f} ms a subscribe, "
                              f"{row['msg_per_s']:.0f} msg/s ({row['delivered']} of {args.messages}), "
                              f"p50 {row['p50_ms']:.3f} ms", flush=True)
    ratios = {k: [p[k] / n[k] for p, n in zip(runs["policy"], runs["none"], strict=True)]
              for k in ("ms_per_subscribe", "msg_per_s", "p50_ms")}
    if args.json:
        print(json.dumps({"runs": runs, "policy_over_none": ratios, "rules": args.rules}))
        return
    print(f"\nwith a policy of {args.rules * 3 + 2} rules against none (both CurveZMQ), run by run:")
    print(f"  per subscribe (registration and record read at the owner): {said(ratios['ms_per_subscribe'])} x")
    print(f"  throughput: {said(ratios['msg_per_s'])} x; latency p50: {said(ratios['p50_ms'])} x")


if __name__ == "__main__":
    main()
