"""A consumer-group member as a process of its own, for the tests that kill or restart members.

    python -m tests.helpers.worker --via H:P --topic T --group G --out FILE [--delay S] [--prefetch N]
                                   [--ordering none|key] [--heartbeat S] [--fail-on TEXT] [--durable] [--db FILE]

Each message it takes is one JSON line in FILE (topic, seq, publisher, key, priority, deliveries, redelivered,
payload, t: wall-clock seconds when the handler began), written before the handler's work (`--delay`
seconds of it), so a message the process held when it was killed is in FILE too. A payload containing
`--fail-on` raises (the message is naked). With `--db`, the handler inserts the payload into the table
`orders` of that SQLite database and acks with `commit_with` (exactly once across the group's members);
an ack that finds the message applied already is a line {"skipped": seq} in FILE. "ready" goes to
stdout once it has joined; SIGTERM closes it
gracefully (it leaves the group).
"""

from __future__ import annotations

import argparse
import json
import signal
import sqlite3
import sys
import threading
import time

from chordpub import Client, Message


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--via", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--prefetch", type=int, default=100)
    ap.add_argument("--ordering", default="none")
    ap.add_argument("--heartbeat", type=float, default=0.5)
    ap.add_argument("--fail-on")
    ap.add_argument("--durable", action="store_true")
    ap.add_argument("--db")
    args = ap.parse_args()
    conn = None
    if args.db:
        conn = sqlite3.connect(args.db, timeout=30, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE IF NOT EXISTS orders (payload TEXT)")
        conn.commit()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    out = open(args.out, "a", buffering=1)  # noqa: SIM115 - closed at the end

    def handle(m: Message) -> None:
        out.write(json.dumps({"topic": m.topic, "seq": m.seq, "publisher": m.publisher, "key": m.key,
                              "priority": m.priority, "deliveries": m.deliveries, "redelivered": m.redelivered,
                              "payload": m.text, "t": time.time()}) + "\n")
        if args.delay:
            time.sleep(args.delay)  # the work itself
        if args.fail_on and args.fail_on in m.text:
            raise ValueError(f"cannot handle {m.text!r}")
        if conn is not None:
            conn.execute("INSERT INTO orders VALUES (?)", (m.text,))
            if not m.ack(commit_with=conn):
                out.write(json.dumps({"skipped": m.seq}) + "\n")

    with Client(args.via, heartbeat=args.heartbeat) as client:
        client.subscribe(args.topic, group=args.group, prefetch=args.prefetch, ordering=args.ordering,
                         durable=args.durable, callback=handle)
        print("ready", flush=True)
        stop.wait()
    out.close()


if __name__ == "__main__":
    sys.exit(main())
