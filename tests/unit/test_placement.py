"""topologies/placement.py: round-robin and seeded random placement, and the course's dht.json."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from topologies.placement import PlacementError, load_dht_json, place

HOSTS = [f"h{i}" for i in range(1, 9)]


def test_round_robin_puts_one_process_per_host_while_hosts_last():
    slots = place(HOSTS, dht=4, pubs=2, subs=2)
    assert [(s.role, s.name, s.host) for s in slots] == [
        ("dht", "dht1", "h1"), ("dht", "dht2", "h2"), ("dht", "dht3", "h3"), ("dht", "dht4", "h4"),
        ("pub", "pub1", "h5"), ("pub", "pub2", "h6"), ("sub", "sub1", "h7"), ("sub", "sub2", "h8")]
    assert all(s.port == 5555 for s in slots if s.role == "dht")


def test_round_robin_wraps_and_gives_nodes_sharing_a_host_distinct_ports():
    slots = place(["h1", "h2", "h3", "h4"], dht=6, pubs=2, subs=2)
    nodes = [(s.host, s.port) for s in slots if s.role == "dht"]
    assert nodes == [("h1", 5555), ("h2", 5555), ("h3", 5555), ("h4", 5555), ("h1", 5556), ("h2", 5556)]
    assert Counter(s.host for s in slots) == {"h1": 3, "h2": 3, "h3": 2, "h4": 2}


def test_random_placement_is_seeded_and_balanced():
    a = place(HOSTS, 4, 2, 2, how="random", seed=3)
    assert a == place(HOSTS, 4, 2, 2, how="random", seed=3)
    assert [s.host for s in a] != [s.host for s in place(HOSTS, 4, 2, 2, how="random", seed=4)]
    assert sorted(s.host for s in a) == sorted(HOSTS)  # still one process per host


@pytest.mark.parametrize("kwargs, message", [
    ({"how": "spread"}, "placement must be one of"),
    ({"dht": 0}, "at least one discovery node"),
])
def test_bad_placements(kwargs, message):
    args = {"dht": 2, "pubs": 1, "subs": 1, **kwargs}
    with pytest.raises(PlacementError, match=message):
        place(HOSTS, **args)


def write(tmp_path, doc) -> str:
    path = tmp_path / "dht.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


COURSE = {"dht": [{"id": "dht1", "hash": 40000, "IP": "10.0.0.1", "port": 5555, "host": "h1"},
                  {"id": "dht2", "hash": 123, "IP": "10.0.0.3", "port": 5555, "host": "h3"},
                  {"id": "dht3", "hash": 9999, "IP": "10.0.0.3", "port": 5556, "host": "h3"}]}


def test_a_course_file_places_exactly_its_nodes(tmp_path):
    entries = load_dht_json(write(tmp_path, COURSE), bits=16)
    slots = place(HOSTS, dht=99, pubs=1, subs=1, entries=entries)
    nodes = [(s.name, s.host, s.port, s.node_id) for s in slots if s.role == "dht"]
    assert nodes == [("dht1", "h1", 5555, 40000), ("dht2", "h3", 5555, 123), ("dht3", "h3", 5556, 9999)]
    assert [s.host for s in slots if s.role != "dht"] == ["h4", "h5"]


@pytest.mark.parametrize("doc, message", [
    ("{not json", "is not JSON"),
    ({"nodes": []}, "expected"),
    ({"dht": [{"id": "a", "hash": 1, "IP": "10.0.0.1", "port": 1}]}, "needs id, hash, IP, port and host"),
    ({"dht": [{"id": "a", "hash": "x", "IP": "10.0.0.1", "port": 1, "host": "h1"}]}, "must be integers"),
    ({"dht": [{"id": "a", "hash": 70000, "IP": "10.0.0.1", "port": 1, "host": "h1"}]}, "does not fit in 16 bits"),
    ({"dht": [{"id": "a", "hash": 1, "IP": "10.0.0.1", "port": 0, "host": "h1"}]}, "is not 1..65535"),
    ({"dht": [{"id": "a", "hash": 1, "IP": "10.0.0.1", "port": 5, "host": "h1"},
              {"id": "b", "hash": 1, "IP": "10.0.0.2", "port": 5, "host": "h2"}]}, "share the same hash"),
])
def test_bad_course_files_are_refused_clearly(tmp_path, doc, message):
    with pytest.raises(PlacementError, match=message):
        load_dht_json(write(tmp_path, doc), bits=16)


def test_a_course_file_naming_a_missing_host_is_refused(tmp_path):
    entries = load_dht_json(write(tmp_path, COURSE), bits=16)
    with pytest.raises(PlacementError, match="lacks: h3"):
        place(["h1", "h2"], dht=1, pubs=0, subs=0, entries=entries)
