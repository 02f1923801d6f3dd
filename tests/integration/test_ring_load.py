"""`chordpub ring load`: what each node of a live ring carries, measured where it happens (dht/load.py).

To see it fail: make `Relay.stats` return zeros (the relay's owner shows no relay messages); drop
`self.record_items += 1` in `ChordNode._on_records` (no renewals anywhere).
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from chordpub import Client
from chordpub.launcher import wait_for
from dht.client import DhtClient
from tests.conftest import one_error_line, run_cli, start_module_ring

HB = 0.3
TOPICS = 60
RATE = 200  # relay messages a second


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from start_module_ring(tmp_path_factory, "load-ring", 3)


def owner_of(ring, topic: str) -> str:  # noqa: ANN001 - a LocalRing
    with DhtClient(ring.nodes[0].endpoint) as client:
        return client.lookup(topic).owner.endpoint


def test_ring_load_counts_records_renewals_and_relay_traffic_per_node(ring):
    via = ring.nodes[0].endpoint
    stop = threading.Event()
    with Client(via, heartbeat=HB) as subscriber, Client(via, heartbeat=HB) as publisher:
        for i in range(TOPICS):
            subscriber.subscribe(f"load-{i}")
        relayed = subscriber.subscribe("load-relayed", mode="relay")
        publisher.advertise("load-relayed", mode="relay")

        def publish() -> None:
            t0, n = time.monotonic(), 0
            while not stop.is_set():
                n += 1
                publisher.publish("load-relayed", b"x" * 100)
                time.sleep(max(t0 + n / RATE - time.monotonic(), 0))  # pacing the publisher, not synchronization

        thread = threading.Thread(target=publish, daemon=True)
        thread.start()
        try:
            wait_for(lambda: relayed.stats.received > RATE // 2, 20,
                     what="the relayed stream flowing")
            proc = run_cli("ring", "load", via, "--interval", "2", "--json")
        finally:
            stop.set()
            thread.join(10)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    nodes = {n["endpoint"]: n for n in out["nodes"]}
    assert sorted(nodes) == sorted(n.endpoint for n in ring.nodes) and not out["problems"]
    assert sum(n["records"] for n in nodes.values()) >= TOPICS + 1, "every topic's record, at its owner"
    renewals = sum(n["renewals_per_s"] for n in nodes.values())
    assert renewals >= TOPICS / 2, f"{TOPICS + 1} subscriptions and a publication renewed every {HB} s: {renewals}"
    relay_owner = owner_of(ring, "load-relayed")
    for endpoint, n in nodes.items():
        if endpoint == relay_owner:
            assert 0.5 * RATE <= n["relay_messages_per_s"] <= 1.5 * RATE, n
        else:
            assert n["relay_messages_per_s"] == 0, n
        assert n["bytes_in_per_s"] > 0 and n["bytes_out_per_s"] > 0
    records = [n["records"] for n in nodes.values()]
    assert out["ring"]["records"]["max_over_mean"] == pytest.approx(max(records) / (sum(records) / len(records)))
    human = run_cli("ring", "load", via, "--interval", "0.5")
    assert human.returncode == 0 and "max/mean" in human.stdout and relay_owner in human.stdout
    one_error_line(run_cli("ring", "load", via, "--interval", "0"), "--interval")
