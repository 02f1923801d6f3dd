"""A test helper process: several chordpub Clients in one process, each publishing its own topics.

    python -m tests.helpers.publishers --via H:P --clients 5 --topics 100 --first 0 --messages 5 \
        --ready FILE --go FILE --done FILE [--heartbeat 1.0] [--timeout 10] [--reliable]

Client c advertises topics "many-<n>" (--prefix) for n in first + c*topics .. first + (c+1)*topics - 1
(--lazy: leaves it to each topic's first publish; --announce: publishes message 0 on each and waits for
their registrations before `ready`), writes
FILE `ready` (JSON: the client ids), waits for FILE `go`, publishes `messages` numbered messages on
each of its topics, then keeps serving (history, repair) until FILE `done` appears.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from chordpub import Client
from chordpub.launcher import wait_for

ANNOUNCE_ATTEMPTS = 5  # rounds of first publishes (--announce) before a topic that will not register fails the run


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("--via", "--ready", "--go", "--done"):
        ap.add_argument(name, required=True)
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--topics", type=int, default=1)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--messages", type=int, default=1)
    ap.add_argument("--heartbeat", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=10.0, help="each Client's timeout (a registration's wait)")
    ap.add_argument("--reliable", action="store_true")
    ap.add_argument("--prefix", default="many-", help="topic names: PREFIX<n>")
    ap.add_argument("--lazy", action="store_true", help="no advertise: each topic's first publish registers it")
    ap.add_argument("--announce", action="store_true",
                    help="with --lazy: publish message 0 on each topic before `ready` (registering it)")
    args = ap.parse_args()
    unregistered: set[str] = set()  # topics whose registration failed: their first message a dead letter
    clients = [Client(args.via, heartbeat=args.heartbeat, timeout=args.timeout,
                      on_dead_letter=lambda d: unregistered.add(d.topic)) for _ in range(args.clients)]
    try:
        mine = {}
        for c, client in enumerate(clients):
            first = args.first + c * args.topics
            mine[client] = [f"{args.prefix}{n}" for n in range(first, first + args.topics)]

        def advertise_all(client: Client) -> None:
            for topic in mine[client] if not args.lazy else ():
                client.advertise(topic, reliable=args.reliable)

        with ThreadPoolExecutor(len(clients)) as pool:  # the clients register at once, each its topics in turn
            list(pool.map(advertise_all, clients))
        if args.announce:  # registered by a first publish each, in the background and batched
            todo = {client: list(topics) for client, topics in mine.items()}
            for _attempt in range(ANNOUNCE_ATTEMPTS):  # a loaded ring may time some out: those go again
                for client, topics in todo.items():
                    for topic in topics:
                        client.publish(topic, f"{topic}:0")
                for client in clients:
                    if not client.publisher.advertiser.flush(600):
                        raise SystemExit("the topics' registrations did not finish")
                todo = {client: [t for t in topics if t in unregistered] for client, topics in mine.items()}
                unregistered.clear()
                if not any(todo.values()):
                    break
            else:
                raise SystemExit(f"{sum(map(len, todo.values()))} topics could not be registered")
        tmp = Path(args.ready + ".tmp")
        tmp.write_text(json.dumps([c.id for c in clients]))
        os.replace(tmp, args.ready)
        wait_for(lambda: Path(args.go).exists(), timeout=600, interval=0.01, what="go")
        for i in range(1, args.messages + 1):
            for client, topics in mine.items():
                for topic in topics:
                    client.publish(topic, f"{topic}:{i}")
            time.sleep(0.001)  # pacing (a rate), not synchronization
        wait_for(lambda: Path(args.done).exists(), timeout=600, interval=0.05, what="done")
    finally:
        for client in clients:
            client.close()


if __name__ == "__main__":
    main()
