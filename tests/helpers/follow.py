"""A test helper process: one reliable subscriber that records every message's (publisher, seq).

    python -m tests.helpers.follow --via H:P --topic T --count N --seconds S --out FILE [--heartbeat 0.5]
                                   [--ready FILE]

Touches the --ready file once subscribed (the subscription is in place at the topic's owner).
Writes FILE (JSON: {"seqs": {publisher: [seq, ...]}, "epochs": [each message's epoch, in delivery order],
"received": n}) once N messages came or S seconds passed, and exits 0 if N came, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from chordpub import Client


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--via", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--heartbeat", type=float, default=0.5)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--ready", help="Touch this file once subscribed.")
    args = ap.parse_args()
    seqs: dict[str, list[int]] = {}
    epochs: list[int] = []
    received = 0
    with Client(args.via, heartbeat=args.heartbeat, host=args.host) as client:
        sub = client.subscribe(args.topic, reliable=True)
        if args.ready:
            Path(args.ready).touch()
        deadline = time.monotonic() + args.seconds
        while received < args.count and time.monotonic() < deadline:
            msg = sub.get(timeout=0.5)
            if msg is not None:
                seqs.setdefault(msg.publisher, []).append(msg.seq)
                epochs.append(msg.epoch)
                received += 1
    tmp = Path(args.out + ".tmp")
    tmp.write_text(json.dumps({"seqs": seqs, "epochs": epochs, "received": received}))
    os.replace(tmp, args.out)
    return 0 if received >= args.count else 1


if __name__ == "__main__":
    raise SystemExit(main())
