"""Prometheus scrapes of a live node and of a live subscriber show their counters moving. To see it
fail, leave the steps its server's lane answers out of a node's count (`next_hops_served` returning
`self.steps_handled` alone)."""

from __future__ import annotations

import json

from chordpub import Client
from chordpub.launcher import wait_for
from dht.client import DhtClient
from tests.helpers.prometheus import scrape, value


def test_a_node_and_a_subscriber_export_moving_counters(ring_factory, tmp_path):
    ring = ring_factory(metrics_port=0)
    ring.start(3)
    ring.wait_consistent(60)
    node = ring.nodes[0]
    metrics = json.loads((ring.workdir / "node0.ready").read_text()).get("metrics")
    assert metrics, "the ready file names the metrics endpoint"
    first = scrape(metrics)
    assert value(first, "chordpub_node_joined", node=node.endpoint) == 1
    # consistent means successor pointers agree; the rest of the list fills in within a round or two
    wait_for(lambda: value(scrape(metrics), "chordpub_node_successors", node=node.endpoint) >= 2, 10,
             what="a successor list of both other nodes")
    topic = "metered"
    with Client(node.endpoint) as publisher, Client(ring.nodes[1].endpoint, metrics_port=0) as subscriber:
        got: list = []
        subscriber.subscribe(topic, callback=got.append)
        for i in range(50):
            publisher.publish(topic, str(i))
        wait_for(lambda: len(got) == 50, 20, what="50 deliveries")
        sub = scrape(subscriber.metrics_endpoint)
        assert value(sub, "chordpub_messages_delivered_total", topic=topic) == 50
        assert value(sub, "chordpub_messages_lost_total", topic=topic) == 0
        assert value(sub, "chordpub_delivery_latency_ms_count", topic=topic) == 50
        assert value(sub, "chordpub_delivery_latency_ms_bucket", topic=topic, le="+Inf") == 50
        for i in range(30):
            publisher.publish(topic, str(i))
        wait_for(lambda: len(got) == 80, 20, what="30 more")
        assert value(scrape(subscriber.metrics_endpoint), "chordpub_messages_delivered_total", topic=topic) == 80
    wait_for(lambda: value(scrape(metrics), "chordpub_node_stabilize_rounds_total", node=node.endpoint)
             > value(first, "chordpub_node_stabilize_rounds_total", node=node.endpoint) + 2, 20,
             what="rounds counted")
    with DhtClient(ring.nodes[1].endpoint) as asker:  # steps the node surely serves: lookups started at it
        for k in range(5):
            assert asker.lookup_id(k * 7919, start=node.endpoint).ok
    later = scrape(metrics)
    assert value(later, "chordpub_node_lookups_served_total", node=node.endpoint) >= value(
        first, "chordpub_node_lookups_served_total", node=node.endpoint) + 5
    # fix_fingers' own lookups: a node whose successor holds more than half the circle never needs one
    # (every finger start falls before its successor), so count the three nodes' histograms together
    endpoints = {n.endpoint: json.loads((ring.workdir / f"node{i}.ready").read_text())["metrics"]
                 for i, n in enumerate(ring.nodes)}
    wait_for(lambda: sum(value(scrape(m), "chordpub_node_lookup_hops_count", node=e) for e, m in endpoints.items())
             > 0, 30, what="a lookup of the nodes' own in the hops histograms")
