"""The live ring: real node processes talking ZeroMQ on loopback (issue 2's acceptance)."""

from __future__ import annotations

import json
import math
import random
import time

from chordpub.launcher import wait_for
from dht.client import DhtClient
from dht.ids import in_half_open, key_id, owner_of
from tests.conftest import PERIOD


def grow(ring, n: int) -> None:
    """Successive joins: each node starts only after the previous one is serving."""
    ring.start(1)
    for _ in range(n - 1):
        ring.add()


def test_sixteen_successive_joins_become_consistent_and_fingers_exact(ring_factory, record_property):
    ring = ring_factory()
    grow(ring, 16)
    report, took = ring.wait_consistent(timeout=10 * PERIOD)
    assert report["nodes"] == 16
    record_property("consistent_after_periods", round(took / PERIOD, 1))
    report, took_f = ring.wait_consistent(timeout=20 * PERIOD, fingers=True)
    assert report["fingers_correct"] == 1.0
    record_property("fingers_exact_after_periods", round((took + took_f) / PERIOD, 1))


def test_lookups_return_the_true_owner_in_about_half_log_n_hops(ring_factory):
    ring = ring_factory()
    ring.start(16)
    ring.wait_consistent(timeout=30, fingers=True)
    ids = sorted(n.id for n in ring.nodes)
    endpoints = [n.endpoint for n in ring.nodes]
    rng = random.Random(3)
    hops = []
    with DhtClient(endpoints[0]) as client:
        for i in range(500):
            key = f"topic-{i}-{rng.getrandbits(32)}"
            found = client.lookup(key, start=rng.choice(endpoints))
            assert found.ok, found.error
            assert found.owner.id == owner_of(ids, key_id(key)), key
            assert found.path[0] in endpoints and found.hops == len(found.path) - 1
            hops.append(found.hops)
    mean = sum(hops) / len(hops)
    assert mean <= 0.5 * math.log2(len(ids)) + 1, mean


def test_with_prs_a_node_answers_a_key_its_successor_list_covers_with_the_owner(ring_factory):
    """`node start --prs`: a lookup started at a node whose successor list holds the key's owner ends
    there, the owner named by that node (0 hops; plain Chord goes on to the owner's predecessor), and
    every lookup still finds the true owner. (Take `RoutingTable.prs` away: the hops are not 0.)"""
    ring = ring_factory(prs=True)
    ring.start(16)
    ring.wait_consistent(timeout=30, fingers=True)
    order = sorted(ring.nodes, key=lambda n: n.id)
    ids = [n.id for n in order]
    rng = random.Random(5)
    with DhtClient(order[0].endpoint) as client:
        for i in range(200):
            key = f"k-{i}-{rng.getrandbits(32)}"
            owner = owner_of(ids, key_id(key))
            at = ids.index(owner)
            start = order[(at - rng.randint(2, 8)) % len(order)]  # 2..8 places before the owner: in its list
            found = client.lookup(key, start=start.endpoint)
            assert found.ok and found.owner.id == owner, (key, found)
            assert found.hops == 0, (key, found.path)


def neighbours_apart(ring, count: int, rng: random.Random) -> list:
    """`count` nodes of which no two are ring neighbours."""
    order = sorted(ring.nodes, key=lambda n: n.id)
    n = len(order)
    while True:
        picks = sorted(rng.sample(range(n), count))
        gaps = [(b - a) % n for a, b in zip(picks, picks[1:] + picks[:1], strict=True)]
        if all(g >= 2 for g in gaps):
            return [order[i] for i in picks]


def stored_total(ring) -> int:
    with DhtClient(ring.live[0].endpoint) as client:
        return sum(client.info(n.endpoint)["stored"] for n in ring.live)


def test_keys_survive_three_killed_nodes_no_two_neighbours(ring_factory, record_property):
    ring = ring_factory(replicas=3)
    ring.start(12)
    ring.wait_consistent(timeout=30)
    keys = {f"key-{i}": f"value-{i}".encode() for i in range(200)}
    with DhtClient(ring.nodes[0].endpoint) as client:
        for k, v in keys.items():
            client.put(k, v)
    # every key is on its owner and the owner's first two successors before the failure
    wait_for(lambda: stored_total(ring) == 3 * len(keys), timeout=20 * PERIOD, what="3 copies of each key")
    for victim in neighbours_apart(ring, 3, random.Random(11)):
        ring.kill(victim)
    _, took = ring.wait_consistent(timeout=10 * PERIOD)
    record_property("healed_after_periods", round(took / PERIOD, 1))
    with DhtClient(ring.live[0].endpoint) as client:
        for k, v in keys.items():
            assert client.get(k) == v, k


def test_graceful_leave_loses_no_key(ring_factory):
    ring = ring_factory(replicas=1)  # one copy: only the hand-over can save the leaver's keys
    ring.start(6)
    ring.wait_consistent(timeout=30)
    keys = {f"leave-{i}": str(i).encode() for i in range(100)}
    with DhtClient(ring.nodes[0].endpoint) as client:
        for k, v in keys.items():
            client.put(k, v)
        leaver = max(ring.nodes[1:], key=lambda n: client.info(n.endpoint)["keys"])
        assert client.info(leaver.endpoint)["keys"] > 0
        client.leave(leaver.endpoint)
        leaver.proc.wait(timeout=10)
    ring.wait_consistent(timeout=10 * PERIOD)
    with DhtClient(ring.live[0].endpoint) as client:
        for k, v in keys.items():
            assert client.get(k) == v, k


def test_a_joining_node_ends_up_with_exactly_its_keys_and_replicas(ring_factory):
    replicas = 2
    ring = ring_factory(replicas=replicas)
    ring.start(6)
    ring.wait_consistent(timeout=30)
    keys = [f"join-{i}" for i in range(300)]
    with DhtClient(ring.nodes[0].endpoint) as client:
        for k in keys:
            client.put(k, b"x")
        # placed in the middle of the widest arc, so that it surely takes keys over
        ids = sorted(n.id for n in ring.nodes)
        gap, start = max(((b - a) % 2**64, a) for a, b in zip(ids, ids[1:] + ids[:1], strict=True))
        newcomer = ring.add(id=(start + gap // 2) % 2**64)
        ring.wait_consistent(timeout=10 * PERIOD)
        ids = sorted(n.id for n in ring.nodes)
        pos = ids.index(newcomer.id)
        owned = {k for k in keys if in_half_open(key_id(k), ids[pos - 1], newcomer.id)}
        # replicas it should hold: the keys of its replicas-1 predecessors
        held_for = {k for k in keys
                    for j in range(1, replicas)
                    if in_half_open(key_id(k), ids[pos - j - 1], ids[pos - j])}
        assert owned, "the test needs the newcomer to own something"

        def settled() -> bool:
            info = client.info(newcomer.endpoint)
            return info["keys"] == len(owned) and info["stored"] == len(owned | held_for)

        wait_for(settled, timeout=30 * PERIOD, what="the newcomer's keys")
        for k in owned:
            assert client.get(k) == b"x"


def test_thirty_two_nodes_started_at_once_converge(ring_factory, record_property, tmp_path):
    ring = ring_factory(stabilize=0.5)
    t0 = time.monotonic()
    ring.start(32, timeout=120)
    started = time.monotonic()
    report, took = ring.wait_consistent(timeout=20 * 0.5)
    assert report["nodes"] == 32
    periods = took / 0.5
    record_property("converged_after_periods", round(periods, 1))
    (tmp_path / "convergence.json").write_text(json.dumps(
        {"start_s": started - t0, "consistent_after_s": took, "periods": periods}))
    print(f"32 nodes: all serving after {started - t0:.1f}s, consistent {took:.2f}s later "
          f"({periods:.1f} periods)")


def test_a_delete_outlives_the_owner_and_is_not_resurrected_by_a_replica(ring_factory):
    ring = ring_factory(replicas=3)
    ring.start(6)
    ring.wait_consistent(timeout=30)
    with DhtClient(ring.nodes[0].endpoint) as client:
        client.put("doomed", b"v1")
        client.put("kept", b"v2")
        wait_for(lambda: stored_total(ring) == 6, timeout=20 * PERIOD, what="3 copies of both keys")
        client.delete("doomed")
        assert client.get("doomed") is None
        # the tombstone reaches the replicas; then the owner dies
        wait_for(lambda: stored_total(ring) == 3, timeout=20 * PERIOD, what="tombstones replicated")
        owner = client.lookup("doomed").owner
    victim = next(n for n in ring.nodes if n.endpoint == owner.endpoint)
    ring.kill(victim)
    ring.wait_consistent(timeout=10 * PERIOD)
    with DhtClient(ring.live[0].endpoint) as client:
        assert client.get("doomed") is None
        assert client.get("kept") == b"v2"
