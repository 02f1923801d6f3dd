"""A node that joins tells exactly the nodes whose fingers it now begins (dht/fingers.py
`announce_join`, SIGCOMM'01 Fig. 6 update_others), over an in-memory ring of real routing tables.

To see it fail: make `announce_join` return at once (`if pred is None or pred == self.me:` -> `if True:`):
no node is told, and every node whose finger should now be the new one keeps the old.
"""

from __future__ import annotations

import random
import threading
from types import SimpleNamespace

from dht import wire
from dht.fingers import FingerMaintenance
from dht.ids import finger_start, successor_index
from dht.routing import Peer, RoutingTable
from dht.transport import Reply

BITS = 16


def exact_table(me: Peer, ring: list[Peer]) -> RoutingTable:
    """`me`'s routing table as the ring `ring` (sorted by id) would have it settled: Chord's fingers."""
    ids = [p.id for p in ring]
    rt = RoutingTable(me, bits=BITS, successors=2)
    at = ids.index(me.id)
    rt.successors = [ring[(at + 1) % len(ring)], ring[(at + 2) % len(ring)]]
    rt.predecessor = ring[at - 1]
    rt.fingers = [ring[successor_index(ids, finger_start(me.id, i, BITS))] for i in range(BITS)]
    return rt


class Ring:
    """Calls between routing tables, answered as dht/node.py answers them."""

    def __init__(self, tables: dict[str, RoutingTable]) -> None:
        self.tables = tables
        self.told: dict[str, bool] = {}

    def call(self, endpoint: str, op: str, **fields: object) -> Reply:
        rt = self.tables[endpoint]
        if op == "next_hop":
            hop = rt.next_hop(wire.decode_id(fields["key_id"]) if isinstance(fields["key_id"], bytes)
                              else fields["key_id"], fields.get("avoid", ()))
            return Reply(True, {"done": hop.done, "peer": wire.encode_peer(hop.peer)})
        if op == "get_links":
            return Reply(True, {"predecessor": wire.encode_peer(rt.predecessor), "successors": []})
        if op == "joined":
            peer = wire.decode_peer(fields["peer"])
            self.told[endpoint] = stale = rt.comes_before_a_finger(peer)
            if stale:
                for i in range(BITS):  # what the refresh then finds
                    start = rt.finger_start(i)
                    held = rt.fingers[i]
                    if peer.id == start or (held is not None and _between(peer.id, start, held.id)):
                        rt.fingers[i] = peer
            return Reply(True, {"stale": stale})
        raise AssertionError(f"unexpected op {op}")


def _between(x: int, a: int, b: int) -> bool:
    return 0 < (x - a) % (1 << BITS) < (b - a) % (1 << BITS)


def joined_node(new: Peer, before: list[Peer], ring: Ring) -> FingerMaintenance:
    after = sorted([*before, new], key=lambda p: p.id)
    at = after.index(new)
    pred, succ = after[at - 1], after[(at + 1) % len(after)]
    ring.tables[new.endpoint] = exact_table(new, after)
    ring.tables[pred.endpoint].successors = [new, succ]  # its stabilize and the notify did that much
    ring.tables[succ.endpoint].predecessor = new
    fm = FingerMaintenance()
    fm.me, fm.me_encoded = new, wire.encode_peer(new)
    fm.config = SimpleNamespace(bits=BITS)
    fm.node = SimpleNamespace(lock=threading.Lock(), routing=ring.tables[new.endpoint], stopped=threading.Event())
    fm.routing = ring.tables[new.endpoint]
    fm.rpc = ring
    fm.dead = lambda endpoint, reply: False
    fm.lost = lambda endpoint: None
    return fm


def test_a_joined_node_is_announced_to_every_node_whose_finger_it_now_begins():
    rng = random.Random(7)
    for trial in range(20):
        before = sorted({Peer(rng.randrange(1 << BITS), f"127.0.0.1:{2000 + i}") for i in range(24)},
                        key=lambda p: p.id)
        ids = {p.id for p in before}
        new = Peer(next(i for i in iter(lambda: rng.randrange(1 << BITS), None) if i not in ids), "127.0.0.1:9999")
        ring = Ring({p.endpoint: exact_table(p, before) for p in before})
        fm = joined_node(new, before, ring)
        pred = ring.tables[new.endpoint].predecessor
        after = sorted([*before, new], key=lambda p: p.id)
        should = {p.endpoint for p in before
                  if p != pred and exact_table(p, after).fingers != ring.tables[p.endpoint].fingers}
        fm.announce_join()
        stale = {e for e, s in ring.told.items() if s}
        assert should <= stale, f"trial {trial}: not told: {sorted(should - stale)}"
        for p in before:
            if p != pred:
                assert ring.tables[p.endpoint].fingers == exact_table(p, after).fingers, (trial, p)
        assert len(ring.told) <= 3 * BITS  # O(log N) calls, not a broadcast
