"""Prometheus metrics of a discovery node (`node start --metrics-port`), read at scrape time.

Nothing is counted twice: the collector reads the node's own counters (rounds, successor changes,
next-hop steps served, bytes sent, the fix_fingers lookups it made) when Prometheus asks, so the
request path pays one integer increment at most.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

HOP_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32)


class LookupHops:
    """The hop counts of the node's own lookups, in fixed buckets (fix_fingers runs forever)."""

    def __init__(self) -> None:
        self.counts = [0] * (len(HOP_BUCKETS) + 1)
        self.total = 0
        self.failed = 0
        self._lock = threading.Lock()

    def add(self, found: Any) -> None:  # a dht.client.LookupResult
        with self._lock:
            if not found.ok:
                self.failed += 1
                return
            i = next((k for k, b in enumerate(HOP_BUCKETS) if found.hops <= b), len(HOP_BUCKETS))
            self.counts[i] += 1
            self.total += found.hops

    def family(self, labels: list[str]) -> HistogramMetricFamily:
        with self._lock:
            counts, total = list(self.counts), self.total
        h = HistogramMetricFamily("chordpub_node_lookup_hops", "Hops of the lookups this node made (fix_fingers).",
                                  labels=["node"])
        cumulative, buckets = 0, []
        for bound, c in zip([*map(str, HOP_BUCKETS), "+Inf"], counts, strict=True):
            cumulative += c
            buckets.append((bound, cumulative))
        h.add_metric(labels, buckets, total)
        return h


class NodeCollector:
    """Every position of a node process (dht/host.py), labelled `node` (the position's endpoint) and
    `process` (the process's); the gauge `chordpub_node_positions` and the histogram of lookup hops are
    the process's (label `node`: its endpoint)."""

    def __init__(self, host: Any, hops: LookupHops) -> None:  # a dht.host.ChordHost
        self.host, self.hops = host, hops

    def collect(self) -> Iterator[Any]:
        host = self.host
        process = host.endpoint
        families: dict[str, Any] = {}

        def add(kind: type, name: str, doc: str, labels: list[str], value: float, extra: tuple = ()) -> None:
            if name not in families:
                families[name] = kind(name, doc, labels=["node", "process", *extra])
            families[name].add_metric(labels, value)

        for node in host.positions:
            label = [node.endpoint, process]
            with node.lock:
                keys, stored = node.store.count(node.routing.owns), node.store.count()
                successors = len(node.routing.successors)
                members = node.members.counts()
            traffic = node.traffic()
            for name, doc, value in (
                    ("chordpub_node_stabilize_rounds", "Maintenance rounds (stabilize, fix_fingers, ...) run.",
                     node.rounds),
                    ("chordpub_node_successor_changes", "Rounds that ended with a different successor.",
                     node.successor_changes),
                    ("chordpub_node_lookups_served", "next_hop requests answered (lookup steps served).",
                     node.next_hops_served),
                    ("chordpub_node_sent_bytes", "Bytes sent: replies, own requests and record events.",
                     traffic["replies_bytes"] + traffic["requests_bytes"] + traffic["events_bytes"]),
                    ("chordpub_node_received_bytes", "Bytes of requests received.", node.bytes_in),
                    ("chordpub_node_record_items", "Record items served (registrations, renewals, reads).",
                     node.record_items),
                    ("chordpub_node_record_writes", "Record items that changed a record (registrations).",
                     node.record_writes),
                    ("chordpub_node_merges", "Probes and unify hints that found another ring.", node.prober.merges)):
                add(CounterMetricFamily, name, doc, label, value)
            for name, doc, value in (("chordpub_node_keys", "Keys this node owns.", keys),
                                     ("chordpub_node_stored", "Entries stored, replicas included.", stored),
                                     ("chordpub_node_successors", "Entries in the successor list.", successors),
                                     ("chordpub_node_joined", "1 once the node has joined the ring.",
                                      int(node.joined.is_set()))):
                add(GaugeMetricFamily, name, doc, label, value)
            for state, count in members.items():
                add(GaugeMetricFamily, "chordpub_node_members", "Remembered members by state: in this ring (ring), "
                    "alive in another ring (other-ring), not answering (unreachable), not probed since they left "
                    "the routing table (unknown).", [*label, state], count, ("state",))
        yield from families.values()
        g = GaugeMetricFamily("chordpub_node_positions", "Ring positions (virtual nodes) this process holds.",
                              labels=["node"])
        g.add_metric([process], len(host.positions))
        yield g
        c = CounterMetricFamily("chordpub_node_lookups_failed", "Lookups of this process's own that failed.",
                                labels=["node"])
        c.add_metric([process], self.hops.failed)
        yield c
        yield denials_family("node", process, host.denials.count)
        yield self.hops.family([process])


def denials_family(kind: str, name: str, count: dict[str, int]) -> CounterMetricFamily:
    """What a policy refused (dht/gate.py's Denials), by operation: publish, subscribe, history, ..."""
    c = CounterMetricFamily("chordpub_denials", "Requests and subscriptions a policy refused, by operation.",
                            labels=[kind, "op"])
    for op, n in sorted(count.items()):
        c.add_metric([name, op], n)
    return c


def serve(collector: Any, port: int, host: str) -> tuple[Any, threading.Thread]:
    """An HTTP /metrics endpoint for `collector` alone on host:port (port 0: a free one)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return start_http_server(port, addr=host, registry=registry)
