"""A test helper process: one Client that publishes on many topics, then takes them away.

    python -m tests.helpers.hot_topics --via H:P --names FILE --ready FILE --done FILE [--heartbeat 1]

Advertises every topic named in FILE `names` (one a line), writes FILE `ready` once the owners hold
them all, waits for FILE `done` to appear, then closes the client, which unregisters every topic.
`names_in_arc` makes such names, crowded into one node's arc.
"""

from __future__ import annotations

import argparse
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from chordpub import Client
from chordpub.launcher import wait_for
from dht.ids import in_half_open, key_id


def names_in_arc(pred: int, node: int, n: int, bits: int = 64) -> list[str]:
    """n topic names whose ids lie in the first quarter of the arc (pred, node]: skewed within it too."""
    size = 1 << bits
    quarter = ((node - pred) % size) // 4
    names: list[str] = []
    i = 0
    while len(names) < n:
        name = f"hot-{i}"  # one level: no prefix record shares the load (dht/subjects.py)
        if in_half_open(key_id(name, bits), pred, (pred + quarter) % size):
            names.append(name)
        i += 1
    return names


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("--via", "--names", "--ready", "--done"):
        ap.add_argument(name, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--heartbeat", type=float, default=1.0)  # the Client default
    args = ap.parse_args()
    # the registrar says when a renewal went unanswered or an owner was lost: the story of a lease that ran out
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    names = Path(args.names).read_text().split()
    with Client(args.via, host=args.host, heartbeat=args.heartbeat) as client:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(client.advertise, names))
        Path(args.ready).write_text(str(len(names)))
        wait_for(lambda: Path(args.done).exists(), 3600, interval=0.1, what="the done file")


if __name__ == "__main__":
    main()
