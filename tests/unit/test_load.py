"""A ring's load from two samples of its nodes (dht/load.py)."""

from __future__ import annotations

import pytest

from dht.load import node_rates, report, spread


def sample(t: float, records: int, items: int, writes: int, relay: int | None = None) -> dict:
    return {"time": t, "records": records, "record_items": items, "record_writes": writes, "lookup_steps": items,
            "bytes_in": 10 * items, "bytes_out": 20 * items, "relay_messages": relay, "relay_bytes": None}


def test_rates_per_second_and_renewals_are_the_items_that_did_not_write():
    rates = node_rates(sample(10.0, 5, 100, 10, 0), sample(12.0, 6, 300, 30, 400))
    assert rates["registrations_per_s"] == 10 and rates["renewals_per_s"] == 90
    assert rates["relay_messages_per_s"] == 200 and rates["bytes_out_per_s"] == 2000 and rates["records"] == 6
    assert node_rates(sample(0, 1, 0, 0), sample(1, 1, 0, 0))["relay_messages_per_s"] is None, "no relay there"
    restarted = node_rates(sample(0, 1, 500, 50), sample(1, 1, 20, 2))
    assert restarted["renewals_per_s"] >= 0 and restarted["registrations_per_s"] == 0


def test_the_spread_is_max_and_p99_over_the_mean_and_a_new_node_has_no_rates():
    assert spread([1, 1, 1, 5]) == {"max": 5, "mean": 2.0, "max_over_mean": 2.5, "p99_over_mean": 2.5}
    assert spread([0, 0])["max_over_mean"] is None and spread([])["mean"] is None
    a, b = {"endpoint": "a", "id": 1}, {"endpoint": "b", "id": 2}
    out = report([{**a, "load": sample(0, 2, 0, 0)}],
                 [{**a, "load": sample(2, 2, 40, 4)}, {**b, "load": sample(2, 6, 0, 0)}])
    rows = {n["endpoint"]: n for n in out["nodes"]}
    assert rows["b"]["new"] and rows["b"]["renewals_per_s"] is None and rows["b"]["records"] == 6
    assert out["ring"]["records"]["max_over_mean"] == pytest.approx(1.5)
    assert out["ring"]["renewals_per_s"]["mean"] == 18, "over the nodes with rates"
