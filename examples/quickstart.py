"""chordpub from Python: one client publishing on three topics, two clients following them.

    python examples/quickstart.py                    # starts a 3-node ring of its own on loopback
    python examples/quickstart.py --via 127.0.0.1:5555   # or uses yours (`chordpub ring up --nodes 3`)

What it shows: `Client` (one per process, any number of topics), `publish` (the first one on a topic
registers it), `subscribe` with a callback or pulled with `get()`, `unsubscribe` (nothing more is
delivered, and the topic's owner forgets the subscriber at once), and `Client.topic_info` (what the
ring holds for a topic). It ends with one JSON line of what it counted, which the test suite checks.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from chordpub import Client, Message
from chordpub.launcher import LocalRing, wait_for


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

        publisher = stack.enter_context(Client(via))
        alice = stack.enter_context(Client(via))  # follows news and sports, by callback
        bob = stack.enter_context(Client(via))  # follows sports and weather, by get()

        by_callback: Counter[str] = Counter()
        lock = threading.Lock()

        def on_message(msg: Message) -> None:
            print(f"alice got {msg.topic} #{msg.seq}: {msg.text} ({msg.latency_ms:.2f} ms)", flush=True)
            with lock:  # counted once printed, so that the report below is the last line
                by_callback[msg.topic] += 1

        alice.subscribe("news", callback=on_message)
        alice_sports = alice.subscribe("sports", callback=on_message)
        bob_subs = [bob.subscribe("sports"), bob.subscribe("weather")]

        for i in range(3):
            for topic in ("news", "sports", "weather"):
                publisher.publish(topic, f"{topic} update {i}")

        by_get: Counter[str] = Counter()
        for sub in bob_subs:
            for _ in range(3):
                msg = sub.get(timeout=5)
                if msg is not None:
                    by_get[msg.topic] += 1
                    print(f"bob got {msg.topic} #{msg.seq}: {msg.text}")
        wait_for(lambda: sum(by_callback.values()) == 6, timeout=5, what="alice's messages")
        with lock:
            first_round = dict(sorted(by_callback.items()))

        before = publisher.topic_info("sports")["subscribers"]
        alice_sports.unsubscribe()  # nothing more of sports for alice, and the owner drops her now
        after = publisher.topic_info("sports")["subscribers"]
        print(f"sports subscribers: {before} before alice unsubscribed, {after} after")
        publisher.publish("news", "one more")
        publisher.publish("sports", "alice will not see this")
        wait_for(lambda: by_callback["news"] == 4, timeout=5, what="the last news")
        assert bob_subs[0].get(timeout=5) is not None  # bob still follows sports

        with lock:
            print(json.dumps({"by_callback": first_round, "by_get": dict(sorted(by_get.items())),
                              "after_unsubscribe": dict(sorted(by_callback.items())),
                              "sports_subscribers": [before, after]}))


if __name__ == "__main__":
    main()
