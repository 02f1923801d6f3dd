"""Remembered members (dht/membership.py): bounded, seeds kept, probed in turn, persisted, never trusted."""

from __future__ import annotations

import json

from dht.membership import (
    FILE,
    IN_RING,
    OTHER_RING,
    UNKNOWN,
    UNREACHABLE,
    Members,
    probe_outcome,
)
from dht.node_config import seed_list
from dht.routing import Peer

ME = "10.0.0.1:5555"


def peer(i: int) -> Peer:
    return Peer(i, f"10.0.1.{i}:5555")


def test_a_probe_finds_us_in_our_ring_and_someone_else_in_another():
    me = Peer(7, ME)
    assert probe_outcome(me, True, me) == IN_RING
    assert probe_outcome(me, True, peer(9)) == OTHER_RING
    assert probe_outcome(me, False, None) == UNREACHABLE
    # our own successor: we joined moments ago and our ring has not taken us in yet, no split
    assert probe_outcome(me, True, peer(9), successor=peer(9)) == IN_RING
    assert probe_outcome(me, True, peer(12), successor=peer(9)) == OTHER_RING


def test_seeds_are_remembered_without_ourselves_and_tried_first():
    m = Members(ME, [ME, "10.0.0.2:5555", "10.0.0.3:5555"])
    assert len(m) == 2 and ME not in m
    m.sync([peer(1)], now=100.0)
    assert m.endpoints()[:2] == ["10.0.0.2:5555", "10.0.0.3:5555"]


def test_the_list_is_bounded_and_seeds_are_never_evicted():
    m = Members(ME, ["10.0.0.2:5555"], limit=4)
    for i in range(1, 10):
        m.sync([peer(i)], now=float(i))
    assert len(m) == 4
    assert "10.0.0.2:5555" in m  # the seed stays
    assert {e for e in m.endpoints() if e != "10.0.0.2:5555"} == {peer(i).endpoint for i in (7, 8, 9)}


def test_a_member_that_left_the_table_is_unknown_until_probed():
    m = Members(ME)
    m.sync([peer(1), peer(2)], now=10.0)
    assert m.counts()[IN_RING] == 2
    m.sync([peer(1)], now=11.0)
    assert m.get(peer(2).endpoint).state == UNKNOWN
    m.probed(peer(2).endpoint, UNREACHABLE, now=12.0)
    assert m.counts() == {IN_RING: 1, OTHER_RING: 0, UNREACHABLE: 1, UNKNOWN: 0}


def test_probes_go_to_members_off_the_table_longest_unprobed_first():
    m = Members(ME, ["10.0.0.2:5555"])
    m.sync([peer(1), peer(2), peer(3)], now=1.0)
    table = {peer(1).endpoint}
    first = m.probe_target(table, now=2.0)
    assert first.endpoint == "10.0.0.2:5555"  # never probed, and a seed
    m.probed(first.endpoint, UNREACHABLE, now=2.0)
    seen = set()
    for t in (3.0, 4.0):
        target = m.probe_target(table, now=t)
        assert target.endpoint not in table
        m.probed(target.endpoint, IN_RING, now=t)
        seen.add(target.endpoint)
    assert seen == {peer(2).endpoint, peer(3).endpoint}
    assert m.probe_target(table, now=5.0).endpoint == "10.0.0.2:5555"  # round robin
    assert m.probe_target({e for e in m.endpoints()}, now=6.0) is None


def test_the_list_survives_a_restart_but_not_another_nodes_file(tmp_path):
    m = Members(ME, ["10.0.0.2:5555"])
    m.sync([peer(1), peer(2)], now=1.0)
    assert m.changed
    m.save(tmp_path)
    assert not m.changed
    again = Members(ME)
    assert again.load(tmp_path) == 3
    assert set(again.endpoints()) == {"10.0.0.2:5555", peer(1).endpoint, peer(2).endpoint}
    assert not again.get("10.0.0.2:5555").seed  # seeds are what the command line says this time
    assert all(again.get(e).state == UNKNOWN for e in again.endpoints())
    assert Members("10.0.0.9:5555").load(tmp_path) == 0  # another node's file
    (tmp_path / FILE).write_text("{not json")
    assert Members(ME).load(tmp_path) == 0
    (tmp_path / FILE).write_text(json.dumps({"me": ME, "members": [{"endpoint": 3}, {"nope": 1}, "x"]}))
    assert Members(ME).load(tmp_path) <= 1
    assert Members(ME).load(tmp_path / "missing") == 0


def test_join_takes_a_list_comma_separated_or_repeated():
    assert seed_list(None) == []
    assert seed_list("a:1") == ["a:1"]
    assert seed_list(["a:1,b:2", "c:3", "a:1", " d:4 , "]) == ["a:1", "b:2", "c:3", "d:4"]


def test_a_member_found_in_our_ring_again_and_again_is_probed_less_often_until_it_is_not():
    """Probes that keep finding a member in our ring double its wait (up to 8 intervals); one that
    finds it unreachable or in another ring brings it back to every interval (a partition or a
    restarted seed is found at full pace). To see it fail: `agreed` never counted (every probe due)."""
    m = Members(ME, [])
    m.sync([peer(2)], now=0.0)
    off_table: set[str] = set()
    due = []
    t = 1.0
    while t < 40.0:
        target = m.probe_target(off_table, now=t, every=1.0)
        if target is not None:
            due.append(t)
            m.probed(target.endpoint, IN_RING, now=t)
        t += 1.0
    gaps = [b - a for a, b in zip(due, due[1:], strict=False)]
    assert gaps[:3] == [2.0, 4.0, 8.0] and set(gaps[3:]) == {8.0}, gaps
    m.probed(peer(2).endpoint, UNREACHABLE, now=t)
    assert m.probe_target(off_table, now=t + 1.0, every=1.0) is not None
