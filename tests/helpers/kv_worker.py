"""A test helper process: one client of the ring's linearizable keys, recording its history.

    python -m tests.helpers.kv_worker --via H:P --name C --seconds S --out FILE [--keys 10] [--seed N]
                                      [--rate OPS_PER_S]

Runs puts, compare-and-sets, gets and deletes on keys k0..k9 for S seconds, one at a time, and writes
each as a JSON line to FILE when it ends: {"key", "kind", "value", "if_version", "output", "call",
"ret"} with wall-clock times (all Mininet hosts share the machine's clock). An operation that failed
without an answer (no majority, a timeout: it may still have taken effect) has "output" null and "ret"
null; a refused compare-and-set has ["refused", version found]. tests/helpers/linearizable.py checks
the histories of all clients together.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from dht.consensus_client import ConsensusClient, ConsensusError, VersionMismatch


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--via", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--keys", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=2.0)
    ap.add_argument("--rate", type=float, default=0.0, help="Operations a second at most (0: no pause).")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    seen: dict[str, int] = {}  # the version this client last saw of each key: its compare-and-sets' guess
    end = time.monotonic() + args.seconds
    n = 0
    with ConsensusClient(args.via, timeout=args.timeout) as client, open(args.out, "w", buffering=1) as out:
        t0 = time.monotonic()
        while time.monotonic() < end:
            if args.rate:  # paced: the machine runs other tests beside this one
                time.sleep(max(0.0, t0 + n / args.rate - time.monotonic()))
            key, roll, n = f"k{rng.randrange(args.keys)}", rng.random(), n + 1
            value = f"{args.name}-{n}"
            row: dict = {"key": key, "value": None, "if_version": None, "call": time.time()}
            try:
                if roll < 0.4:
                    row.update(kind="get")
                    got, version = client.get(key)
                    row["output"] = [None if got is None else got.decode(), version]
                elif roll < 0.75:
                    row.update(kind="put", value=value, if_version=seen.get(key, 0))
                    row["output"] = ["ok", client.put(key, value, if_version=row["if_version"])]
                elif roll < 0.9:
                    row.update(kind="put", value=value)
                    row["output"] = ["ok", client.put(key, value)]
                else:
                    row.update(kind="delete", if_version=seen.get(key) if rng.random() < 0.5 else None)
                    client.delete(key, if_version=row["if_version"])
                    row["output"] = ["ok"]
                row["ret"] = time.time()
            except VersionMismatch as exc:
                row.update(output=["refused", exc.version_found], ret=time.time())
            except ConsensusError:
                row.update(output=None, ret=None)
            out_ = row["output"]
            if out_ is not None:
                seen[key] = out_[1] if row["kind"] in ("get", "put") or out_[0] == "refused" else 0
            out.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
