"""The simulator routes exactly as dht/routing.py does (issue 4's cross-check), without sockets."""

from __future__ import annotations

import numpy as np
import pytest

from dht.ids import key_id
from dht.routing import RoutingTable
from sim.kernels import floor_log2
from sim.lookup import lookups
from sim.ring import RingError, random_ring, ring_from_ids
from tests.helpers.routing import live_rule_lookup, routing_tables


@pytest.mark.parametrize("prs", [False, True])
@pytest.mark.parametrize("n", [1, 2, 3, 64, 512, 4096])
def test_owner_and_hops_equal_the_routing_rule(n, prs):
    """With `prs` (proximity route selection for the last hop) on both sides too: the live rule
    answering a key its successor list covers with the owner, and the simulator ending there."""
    bits, r = 64, 8
    ids = [key_id(f"10.0.{i // 256}.{i % 256}:5555", bits) for i in range(n)]
    ring = ring_from_ids(ids, bits, successors=r)
    tables = routing_tables(ids, bits, r)
    for t in tables.values():
        t.prs = prs
    batch = lookups(ring, 1000, seed=n, prs=prs)
    for k, o, owner, hops in zip(batch.keys, batch.origins, batch.owners, batch.hops, strict=True):
        want_owner, want_hops = live_rule_lookup(tables, int(ring.ids[o]), int(k))
        assert (int(ring.ids[owner]), int(hops)) == (want_owner, want_hops)


def live_rule_lookup_with_failures(tables: dict[int, RoutingTable], dead: set[int], origin: int,
                                   k: int) -> tuple[int | None, int, int]:
    """The live client's loop when nodes have died since the tables converged: a dead next hop (or
    owner) times out, joins the lookup's avoid set, and the same node is asked again."""
    cur, hops, timeouts, avoid = origin, 0, 0, set()
    while True:
        step = tables[cur].next_hop(k, avoid)
        if step is None or step.peer.id == cur:
            return None, hops, timeouts
        if step.peer.id in dead:
            timeouts += 1
            avoid.add(step.peer.endpoint)
            continue
        if step.done:
            return step.peer.id, hops, timeouts
        cur, hops = step.peer.id, hops + 1


@pytest.mark.parametrize(("n", "r", "fail"), [(64, 8, 0.3), (512, 4, 0.5), (512, 2, 0.7), (4096, 8, 0.2)])
def test_with_dead_nodes_owner_hops_and_timeouts_equal_the_routing_rule(n, r, fail):
    bits = 64
    ids = [key_id(f"10.1.{i // 256}.{i % 256}:5555", bits) for i in range(n)]
    ring = ring_from_ids(ids, bits, successors=r)
    tables = routing_tables(ids, bits, r)
    rng = np.random.default_rng(n + r)
    alive = rng.random(ring.size) >= fail
    dead = {int(ring.ids[i]) for i in np.flatnonzero(~alive)}
    batch = lookups(ring, 1000, seed=n, alive=alive)
    assert batch.timeouts.sum() > 0
    for i in range(len(batch)):
        owner = int(ring.ids[batch.owners[i]]) if batch.ok[i] else None
        got = (owner, int(batch.hops[i]), int(batch.timeouts[i]))
        assert got == live_rule_lookup_with_failures(tables, dead, int(ring.ids[batch.origins[i]]),
                                                     int(batch.keys[i]))


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
    assert [floor_log2(np.uint64(x)) for x in xs] == [x.bit_length() - 1 for x in xs]


def test_impossible_rings_are_refused():
    with pytest.raises(RingError, match="bits"):
        random_ring(10, bits=65)
    with pytest.raises(RingError, match="do not fit"):
        random_ring(300, bits=8)
    with pytest.raises(RingError, match="distinct"):
        ring_from_ids([5, 5], bits=8)
