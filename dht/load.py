"""What each node of a ring carries, and how evenly: `chordpub ring load`. Pure: two walks' `info`
replies in, per-node rates and the ring's spread out.

A node's `load` (dht/node.py) holds what it owns now (records) and counters since it started: record
items served (registrations, renewals and reads of records it owns) and the writes among them,
lookup steps served, bytes in and out, messages its relay took from publishers. Two samples some
seconds apart give rates. The spread of each figure over the nodes is said as max/mean and p99/mean,
the Chord paper's measure of balance (Stoica et al., SIGCOMM 2001, Fig. 8-9: keys per node). A
process holding several ring positions (virtual nodes) carries their sum: `processes` adds them up,
and the spread over processes is what virtual nodes even out (Fig. 9).
"""

from __future__ import annotations

import math

from dht.ids import process_of

FIGURES = ("records", "keys", "registrations_per_s", "renewals_per_s", "lookup_steps_per_s", "relay_messages_per_s",
           "bytes_in_per_s", "bytes_out_per_s")


def node_rates(before: dict, after: dict) -> dict:
    """One node's figures from two of its `load` samples (the later one's records)."""
    seconds = max(after["time"] - before["time"], 1e-9)

    def rate(key: str) -> float | None:
        if after.get(key) is None or before.get(key) is None:
            return None
        return max(after[key] - before[key], 0) / seconds  # a restarted node's counters begin again

    writes = rate("record_writes")
    items = rate("record_items")
    return {"records": after["records"], "registrations_per_s": writes,
            "renewals_per_s": None if items is None or writes is None else max(items - writes, 0.0),
            "lookup_steps_per_s": rate("lookup_steps"), "relay_messages_per_s": rate("relay_messages"),
            "bytes_in_per_s": rate("bytes_in"), "bytes_out_per_s": rate("bytes_out"), "seconds": seconds}


def spread(values: list[float]) -> dict:
    """max, mean, max/mean and p99/mean (nearest rank) of one figure over the nodes."""
    if not values:
        return {"max": None, "mean": None, "max_over_mean": None, "p99_over_mean": None}
    ordered = sorted(values)
    mean = sum(ordered) / len(ordered)
    p99 = ordered[max(math.ceil(0.99 * len(ordered)) - 1, 0)]
    return {"max": ordered[-1], "mean": mean, "max_over_mean": ordered[-1] / mean if mean else None,
            "p99_over_mean": p99 / mean if mean else None}


def report(first: list[dict], second: list[dict]) -> dict:
    """Per node (in ring order, as the second walk met them) and for the ring. A node met only in the
    second walk (it joined meanwhile) is listed without rates."""
    earlier = {i["endpoint"]: i["load"] for i in first if i.get("load")}
    nodes = []
    for info in second:
        if not info.get("load"):
            continue  # a node too old to say its load
        row = {"endpoint": info["endpoint"], "id": info["id"], "split_id": info["load"].get("split_id")}
        before = earlier.get(info["endpoint"])
        if before is None:
            row.update({k: None for k in FIGURES}, records=info["load"]["records"], new=True)
        else:
            row.update(node_rates(before, info["load"]), new=False)
        row["keys"] = info.get("keys")
        nodes.append(row)
    ring = {k: spread([n[k] for n in nodes if n[k] is not None]) for k in FIGURES}
    processes = by_process(nodes)
    return {"nodes": nodes, "ring": ring, "processes": processes,
            "per_process": {k: spread([p[k] for p in processes if p[k] is not None]) for k in FIGURES}}


def by_process(nodes: list[dict]) -> list[dict]:
    """Rows of `report` summed per process ("host:port" of the positions "host:port/i"): a figure is
    None for a process when it is None for any of its positions (one that joined between the walks)."""
    out: dict[str, dict] = {}
    for n in nodes:
        name = process_of(n["endpoint"])
        p = out.setdefault(name, {"process": name, "positions": 0, **{k: 0 for k in FIGURES}})
        p["positions"] += 1
        for k in FIGURES:
            p[k] = None if p[k] is None or n.get(k) is None else p[k] + n[k]
    return list(out.values())
