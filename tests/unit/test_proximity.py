"""dht/proximity.py: the live node's PNS samples and choice, and the ring check's view of them."""

from __future__ import annotations

from dht.proximity import RoundTrips, choose, interval_candidates
from dht.ringcheck import allowed_fingers
from dht.routing import Peer

BITS = 8


def peers(*ids: int) -> list[Peer]:
    return [Peer(i, f"h{i}:1") for i in ids]


def test_samples_are_the_interval_first_node_and_its_successors_inside_it():
    first, *rest = peers(130, 140, 150, 200, 3)
    # node 0, finger 7: [128, 256)
    assert [p.id for p in interval_candidates(0, 7, BITS, first, rest, 16)] == [130, 140, 150, 200]
    assert [p.id for p in interval_candidates(0, 7, BITS, first, rest, 2)] == [130, 140]
    # finger 6 of node 0 is [64, 128): empty, so its finger is plain Chord's, the first node after it
    assert [p.id for p in interval_candidates(0, 6, BITS, first, rest, 16)] == [130]
    # the top interval ends at the node itself
    assert [p.id for p in interval_candidates(100, 7, BITS, *peers(230), peers(240, 100, 5), 16)] == [230, 240]


def test_the_lowest_round_trip_wins_and_a_current_finger_stays_unless_clearly_beaten():
    a, b, c = peers(130, 140, 150)
    rtt = RoundTrips(window=1)
    assert choose([a, b, c], lambda p: rtt.get(p.endpoint)) == a  # nothing measured: the first
    rtt.observe(a.endpoint, 0.050)
    rtt.observe(b.endpoint, 0.001)
    rtt.observe(c.endpoint, 0.009)
    assert choose([a, b, c], lambda p: rtt.get(p.endpoint)) == b
    rtt.observe(c.endpoint, 0.00105)  # 5% slower than b: not worth a change
    assert choose([a, b, c], lambda p: rtt.get(p.endpoint), current=c) == c
    assert choose([a, b, c], lambda p: rtt.get(p.endpoint), current=a) == b
    rtt.observe(c.endpoint, 0.0014)  # 40% slower, but by 0.4 ms: loopback noise, not distance
    assert choose([a, b, c], lambda p: rtt.get(p.endpoint), current=c) == c


def test_a_round_trip_is_the_least_of_the_recent_samples_and_the_table_stays_bounded():
    rtt = RoundTrips(window=3, max_peers=3)
    for ms in (30, 12, 45, 80):  # late samples (a busy machine, a queue) do not move the distance
        rtt.observe("x:1", ms / 1000)
    assert rtt.get("x:1") == 12.0
    for ms in (40, 41, 42):  # the path itself got longer: the window forgets the old minimum
        rtt.observe("x:1", ms / 1000)
    assert rtt.get("x:1") == 40.0
    for i in range(10):
        rtt.observe(f"y{i}:1", 0.001)
    assert len(rtt) == 3 and rtt.get("x:1") is None


def test_ring_check_accepts_any_of_the_k_samples_and_nothing_else():
    ids = [0, 130, 140, 150, 200]
    assert allowed_fingers(ids, 0, 7, BITS, 0) == [130]
    assert allowed_fingers(ids, 0, 7, BITS, 3) == [130, 140, 150]
    assert allowed_fingers(ids, 0, 6, BITS, 3) == [130]  # empty interval: the successor only
    assert allowed_fingers(ids, 130, 0, BITS, 4) == [140]  # [131, 132) is empty


def test_a_peer_that_did_not_answer_is_down_for_a_while_and_up_once_it_answers():
    rtt = RoundTrips(down_rounds=3)
    rtt.observe("x:1", 0.002)
    rtt.now = 10
    rtt.observe("x:1", None)
    assert rtt.get("x:1") is None and rtt.down("x:1")
    rtt.now = 12
    assert rtt.down("x:1")
    rtt.now = 13
    assert not rtt.down("x:1")
    rtt.now = 14
    rtt.observe("x:1", None)
    rtt.observe("x:1", 0.001)
    assert not rtt.down("x:1") and rtt.get("x:1") == 1.0
