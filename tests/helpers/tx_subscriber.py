"""A test helper process: a durable subscriber of one topic that writes every message it is given into
the table `got` of an SQLite database, until it is killed.

    python -m tests.helpers.tx_subscriber --via H:P --topic T --db FILE --name N (--commit-with | --data-dir DIR)
                                          [--work-ms MS]

--commit-with: the insert and the subscription's position commit in one transaction (exactly once).
--data-dir DIR: a plain durable subscription (its positions in DIR): the insert commits on its own,
then the position (at least once: what was inserted and not yet committed comes again, flagged).
"""

from __future__ import annotations

import argparse
import json
import signal
import sqlite3
import threading
import time

from chordpub import Client
from pubsub.message import Message


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--via", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--commit-with", action="store_true")
    ap.add_argument("--data-dir")
    ap.add_argument("--work-ms", type=float, default=0.0, help="the application's work per message, after its insert")
    args = ap.parse_args()
    conn = sqlite3.connect(args.db, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    if not args.commit_with:  # its own commit per message: in WAL, NORMAL keeps a commit through a SIGKILL
        conn.execute("PRAGMA synchronous=NORMAL")  # (only power loss undoes one), without a sync per message
    conn.execute("CREATE TABLE IF NOT EXISTS got (id TEXT, publisher TEXT, seq INTEGER, redelivered INTEGER)")
    conn.commit()

    def take(m: Message) -> None:
        conn.execute("INSERT INTO got VALUES (?, ?, ?, ?)", (json.loads(m.payload)["id"], m.publisher, m.seq,
                                                            int(m.redelivered)))
        if not args.commit_with:
            conn.commit()  # the application's own commit; the position follows after the callback
        if args.work_ms:
            time.sleep(args.work_ms / 1000)  # the rest of the application's work on it

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Client(args.via, heartbeat=0.3, data_dir=args.data_dir) as client:
        client.subscribe(args.topic, durable=args.name, callback=take,
                         commit_with=conn if args.commit_with else None)
        print("subscribed", flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
