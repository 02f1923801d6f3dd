"""Prometheus scrapes in the tests: every sample of a /metrics page, and one of them by name and labels."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape(endpoint: str) -> dict[tuple[str, tuple], float]:
    """Every sample of http://endpoint/metrics, keyed by (name, sorted labels)."""
    with urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    hits = [v for (n, ls), v in samples.items() if n == name and all((k, x) in ls for k, x in labels.items())]
    assert len(hits) == 1, (name, labels, [k for k in samples if k[0] == name])
    return hits[0]
