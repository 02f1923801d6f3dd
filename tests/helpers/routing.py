"""Converged rings of dht/routing.py RoutingTables and the live client's lookup loop over them, without
sockets: what the simulator's routing is checked against."""

from __future__ import annotations

import bisect

from dht.ids import finger_start
from dht.routing import Peer, RoutingTable


def routing_tables(ids: list[int], bits: int, r: int, finger=None) -> dict[int, RoutingTable]:
    """A converged ring of RoutingTables: every successor list exact, finger j of the node at sorted
    position pos = finger(pos, j) as a position (default: plain Chord's, successor(id + 2^j))."""
    ids = sorted(ids)
    n = len(ids)
    peers = [Peer(i, str(i)) for i in ids]

    def successor_at(pos: int, j: int) -> int:
        return bisect.bisect_left(ids, finger_start(ids[pos], j, bits)) % n

    finger = finger or successor_at
    tables = {}
    for pos, me in enumerate(peers):
        t = RoutingTable(me, bits=bits, successors=r)
        t.fingers = [peers[finger(pos, j)] for j in range(bits)]
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
