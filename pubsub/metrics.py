"""Prometheus metrics of a `chordpub.Client` (`Client(metrics_port=)`, `pub`/`sub --metrics-port`).

Read at scrape time from what the client keeps anyway (publication sequence numbers, each
subscription's fixed-memory statistics), so publishing and delivery pay nothing for them. Labels
are per topic: a process follows and publishes a bounded set of topics it chose.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

LATENCY_BUCKETS_MS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 10_000)


class ClientCollector:
    def __init__(self, client: Any) -> None:  # a chordpub.Client
        self.client = client

    def collect(self) -> Iterator[Any]:
        client = self.client
        label = client.id
        sent = CounterMetricFamily("chordpub_messages_sent", "Messages published, per topic.",
                                   labels=["client", "topic"])
        not_resent = CounterMetricFamily("chordpub_publish_duplicates", "Publishes with a msg id sent within the "
                                         "dedup window: not sent again.", labels=["client", "topic"])
        evicted = CounterMetricFamily("chordpub_dedup_evicted", "Msg ids pushed out of the dedup window by its "
                                      "bounds before their time (sent again, they go again).",
                                      labels=["client", "topic"])
        for topic, pub in list(client.publishing.publications.items()):
            sent.add_metric([label, topic], pub.seq)
            if pub.dedup is not None:
                not_resent.add_metric([label, topic], pub.dedup.duplicates)
                evicted.add_metric([label, topic], pub.dedup.evicted)
        yield sent
        yield not_resent
        yield evicted
        families = {name: CounterMetricFamily(f"chordpub_messages_{name}", doc, labels=["client", "topic"])
                    for name, doc in (
                        ("delivered", "Messages delivered to the application (recovered included)."),
                        ("recovered", "Delivered messages that came from a publisher's history."),
                        ("lost", "Messages owed and never delivered (docs/contracts.md, Accounting)."),
                        ("duplicates", "Messages that arrived again and were not delivered twice."),
                        ("dropped", "Messages not taken by the application in time (the subscription's queue "
                                    "was full)."))}
        publishers = GaugeMetricFamily("chordpub_topic_publishers", "Publishers a subscription has met.",
                                       labels=["client", "topic"])
        latency = HistogramMetricFamily("chordpub_delivery_latency_ms", "Publisher send to subscriber receive, "
                                        "milliseconds.", labels=["client", "topic"])
        for topic, sub in list(client._subscriptions.items()):
            s = sub.summary()
            for name in ("recovered", "lost", "duplicates", "dropped"):
                families[name].add_metric([label, topic], s[name])
            families["delivered"].add_metric([label, topic], s["received"])
            publishers.add_metric([label, topic], s["publishers"])
            buckets, total = _buckets(sub.stats.latency)
            latency.add_metric([label, topic], buckets, total)
        yield from families.values()
        yield publishers
        yield latency
        yield from _groups(client, label)
        from dht.metrics import denials_family

        yield denials_family("client", label, client.publishing.denials.count)


def _groups(client: Any, label: str) -> Iterator[Any]:
    """A publisher's consumer groups (what it dispatched, what waits, what is in flight per member) and
    a member's settlements."""
    gauges = {name: GaugeMetricFamily(f"chordpub_group_{name}", doc, labels=["client", "topic", "group"])
              for name, doc in (("backlog", "Messages waiting at this publisher for a member of the group."),
                                ("members", "Members of the group this publisher dispatches to."))}
    counters = {name: CounterMetricFamily(f"chordpub_group_{name}", doc, labels=["client", "topic", "group"])
                for name, doc in (("dispatched", "Messages this publisher sent to the group's members (every "
                                                 "delivery, redeliveries included)."),
                                  ("dead_lettered", "Messages the group will never get from this publisher "
                                                    "(max_deliver reached, or retention let them go)."))}
    in_flight = GaugeMetricFamily("chordpub_group_in_flight", "Messages sent to a member and not yet acknowledged.",
                                  labels=["client", "topic", "group", "member"])
    redelivered = CounterMetricFamily("chordpub_group_redelivered", "Deliveries to a member of a message that "
                                      "had been delivered before.", labels=["client", "topic", "group", "member"])
    with client.publishing.lock:
        stats = [(t, name, g.stats()) for t, name, g in client.publishing.groups.items()]
    for topic, name, g in stats:
        gauges["backlog"].add_metric([label, topic, name], g["backlog"])
        gauges["members"].add_metric([label, topic, name], sum(m["connected"] for m in g["members"].values()))
        counters["dispatched"].add_metric([label, topic, name], g["dispatched"])
        counters["dead_lettered"].add_metric([label, topic, name], g["dead_lettered"])
        for member, m in g["members"].items():
            in_flight.add_metric([label, topic, name, member], m["in_flight"])
            redelivered.add_metric([label, topic, name, member], m["redelivered"])
    settled = CounterMetricFamily("chordpub_member_settled", "Messages this member settled, by outcome.",
                                  labels=["client", "topic", "group", "outcome"])
    for topic, sub in list(client._subscriptions.items()):
        s = sub.summary()
        if s.get("group") is not None:
            for outcome in ("acked", "naked", "dead_lettered"):
                settled.add_metric([label, topic, s["group"], outcome], s[outcome])
    yield from gauges.values()
    yield from counters.values()
    yield in_flight
    yield redelivered
    yield settled


def _buckets(histogram: Any) -> tuple[list[tuple[str, int]], float]:
    """A pubsub.stats.LatencyHistogram folded into Prometheus's cumulative buckets (each of its 2%-wide
    buckets goes to the first bound at or above its upper edge) and an estimated sum."""
    from pubsub.stats import _BASE, _MIN_MS

    counts = [0] * (len(LATENCY_BUCKETS_MS) + 1)
    total = 0.0
    for i, c in histogram.buckets():
        if c:
            upper = _MIN_MS * _BASE ** i
            counts[bisect.bisect_left(LATENCY_BUCKETS_MS, upper)] += c
            total += c * _MIN_MS * _BASE ** max(i - 0.5, 0)
    out, cumulative = [], 0
    for bound, c in zip([*map(str, LATENCY_BUCKETS_MS), "+Inf"], counts, strict=True):
        cumulative += c
        out.append((bound, cumulative))
    return out, total
