"""The simulator routes exactly as dht/routing.py does (issue 4's cross-check), without sockets."""

from __future__ import annotations

import numpy as np
import pytest

from dht.ids import finger_start, key_id
from dht.routing import Peer, RoutingTable
from sim.lookup import floor_log2, lookups
from sim.ring import RingError, random_ring, ring_from_ids


def routing_tables(ids: list[int], bits: int, r: int) -> dict[int, RoutingTable]:
    """A converged ring of RoutingTables: every finger and successor list exact."""
    ids = sorted(ids)
    n = len(ids)
    peers = [Peer(i, str(i)) for i in ids]

    def successor_of(point: int) -> Peer:
        pos = int(np.searchsorted(np.asarray(ids, dtype=np.uint64), np.uint64(point), side="left"))
        return peers[pos % n]

    tables = {}
    for pos, me in enumerate(peers):
        t = RoutingTable(me, bits=bits, successors=r)
        t.fingers = [successor_of(finger_start(me.id, j, bits)) for j in range(bits)]
        t.successors = [peers[(pos + s) % n] for s in range(1, min(r, n - 1) + 1)]
        t.predecessor = peers[(pos - 1) % n]
        tables[me.id] = t
    return tables


def live_rule_lookup(tables: dict[int, RoutingTable], origin: int, k: int) -> tuple[int, int]:
    """dht.client.iterative_lookup's loop over next_hop, without sockets: (owner id, hops)."""
    cur, asked = origin, 0
    while True:
        asked += 1
        step = tables[cur].next_hop(k)
        if step.done:
            return step.peer.id, asked - 1
        cur = step.peer.id


@pytest.mark.parametrize("n", [1, 2, 3, 64, 512, 4096])
def test_owner_and_hops_equal_the_routing_rule(n):
    bits, r = 64, 8
    ids = [key_id(f"10.0.{i // 256}.{i % 256}:5555", bits) for i in range(n)]
    ring = ring_from_ids(ids, bits, successors=r)
    tables = routing_tables(ids, bits, r)
    batch = lookups(ring, 1000, seed=n)
    for k, o, owner, hops in zip(batch.keys, batch.origins, batch.owners, batch.hops, strict=True):
        want_owner, want_hops = live_rule_lookup(tables, int(ring.ids[o]), int(k))
        assert (int(ring.ids[owner]), int(hops)) == (want_owner, want_hops)


def test_small_id_spaces_and_keys_equal_to_node_ids():
    bits = 10
    ring = random_ring(50, bits=bits, seed=3, successors=3)
    tables = routing_tables([int(i) for i in ring.ids], bits, 3)
    keys = np.concatenate([ring.ids, np.arange(0, 1 << bits, 7, dtype=np.uint64)])
    origins = np.arange(len(keys)) % ring.size
    batch = lookups(ring, len(keys), keys=keys, origins=origins)
    for k, o, owner, hops in zip(batch.keys, batch.origins, batch.owners, batch.hops, strict=True):
        assert (int(ring.ids[owner]), int(hops)) == live_rule_lookup(tables, int(ring.ids[o]), int(k))


def test_floor_log2_is_exact_at_powers_of_two_and_their_neighbours():
    xs = [1, 2, 3] + [v for j in range(2, 64) for v in ((1 << j) - 1, 1 << j, (1 << j) + 1)] + [(1 << 64) - 1]
    got = floor_log2(np.asarray(xs, dtype=np.uint64))
    assert [int(g) for g in got] == [x.bit_length() - 1 for x in xs]


def test_impossible_rings_are_refused():
    with pytest.raises(RingError, match="bits"):
        random_ring(10, bits=65)
    with pytest.raises(RingError, match="do not fit"):
        random_ring(300, bits=8)
    with pytest.raises(RingError, match="distinct"):
        ring_from_ids([5, 5], bits=8)
