"""A work queue with chordpub: three workers share one topic's jobs, a fourth joins halfway, one fails
on a job it cannot do, and every job is done once.

    python examples/work_queue.py                        # starts a 3-node ring of its own on loopback
    python examples/work_queue.py --via 127.0.0.1:5555   # or uses yours (`chordpub ring up --nodes 3`)

What it shows: `subscribe(topic, group=...)` (each message goes to one member of the group, by credit:
`prefetch` unacknowledged at most), a callback returning acks its job and raising naks it (it is sent
again, to any member, and dead-lettered after `max_deliver` deliveries), `publish(..., key=...)` with
`ordering="key"` in a second group (every job of one key to one worker at a time, in order), and
`topic_info` for each group's figures. It ends with one JSON line of what it counted, which the test
suite checks.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections import Counter, defaultdict
from contextlib import ExitStack
from pathlib import Path

from chordpub import Client, DeadLetter, Message
from chordpub.launcher import LocalRing, wait_for

JOBS = 300


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--via", help="a node of a running ring (default: start a 3-node ring here)")
    args = ap.parse_args()
    with ExitStack() as stack:
        via = args.via
        if via is None:
            ring = stack.enter_context(LocalRing(Path(stack.enter_context(tempfile.TemporaryDirectory()))))
            ring.start(3)
            ring.wait_consistent(timeout=30)
            via = ring.nodes[0].endpoint
            print(f"started a ring of 3 nodes; entering it at {via}")

        done: Counter[str] = Counter()  # job -> times it was done
        by_worker: Counter[str] = Counter()
        dead: list[DeadLetter] = []
        orders: dict[str, list[int]] = defaultdict(list)  # key -> the order numbers as the ledger saw them
        lock = threading.Lock()

        def worker(name: str):  # noqa: ANN202 - a callback
            def resize(msg: Message) -> None:
                if msg.text == "job broken":
                    raise ValueError("this job cannot be done")  # naked: sent again, then dead-lettered
                time.sleep(0.001)  # the work
                with lock:
                    done[msg.text] += 1
                    by_worker[name] += 1
            return resize

        def ledger(msg: Message) -> None:
            customer, number = msg.text.split(":")
            with lock:
                orders[customer].append(int(number))

        shop = stack.enter_context(Client(via))
        workers = []
        for name in ("w1", "w2", "w3"):
            client = stack.enter_context(Client(via, on_dead_letter=dead.append))
            client.subscribe("images", group="resizers", prefetch=10, max_deliver=3, callback=worker(name))
            client.subscribe("orders", group="ledgers", ordering="key", callback=ledger)
            workers.append(client)

        for i in range(JOBS):
            shop.publish("images", f"job {i}")
            shop.publish("orders", f"customer-{i % 7}:{i}", key=f"customer-{i % 7}")  # one key per customer
            if i == JOBS // 2:
                late = stack.enter_context(Client(via, on_dead_letter=dead.append))  # a fourth worker joins halfway
                late.subscribe("images", group="resizers", prefetch=10, max_deliver=3, callback=worker("w4"))
                # the rest once the shop dispatches to all four (on a busy machine the last 150 jobs could
                # otherwise be done before the newcomer's subscription reaches the shop)
                wait_for(lambda: sum(m["joined"] > 0 for m in shop.topic_info("images")["groups"]["resizers"]
                                     ["per_member"].values()) == 4, 30, what="the fourth worker joined")
                shop.publish("images", "job broken")
        try:
            wait_for(lambda: len(done) >= JOBS and len(dead) == 1 and sum(map(len, orders.values())) >= JOBS, 30,
                     what="every job done")
        except TimeoutError:
            raise SystemExit(f"not every job was done within 30 s: {len(done)} of {JOBS} jobs, "
                             f"{sum(map(len, orders.values()))} of {JOBS} orders, {len(dead)} dead-lettered; "
                             f"images: {shop.topic_info('images')['groups']}") from None
        group = shop.topic_info("images")["groups"]["resizers"]
        print(f"{len(done)} jobs done by {dict(sorted(by_worker.items()))}; {len(dead)} dead-lettered "
              f"({dead[0].payload!r} after {group['redelivered'] + 1} deliveries)")
        print(json.dumps({"jobs": len(done), "each_once": set(done.values()) == {1}, "workers": len(by_worker),
                          "dead_lettered": [d.payload.decode() for d in dead],
                          "keys_in_order": all(v == sorted(v) for v in orders.values()),
                          "group_delivered": group["delivered"]}))


if __name__ == "__main__":
    main()
