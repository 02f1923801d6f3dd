"""A position's answers to next_hop(k), precomputed from its routing table: one bisection per lookup
step instead of a scan of its fingers and successor list.

A lookup's hops land on node processes that were idle in between, whose caches no longer hold the
Python objects a request touches; each object and each function a hop needs then costs far more than
its warm price. Measured on this project's two-core machine (32 processes, each request to a random
one): the scan of RoutingTable.next_hop cost 13-15 us more than the least Python request path, a
bisection over these lists next to nothing. The answers are exactly RoutingTable.next_hop's with
nothing avoided (ToN'03 Fig. 5's closest_preceding_node: the highest finger in (me, k), then a closer
successor-list entry; §V-B), which a property test checks against it.

A table holds copies of the fingers and successor list it was built from; `current` compares them
with the routing table's (identity first: two lists, no peer touched), so that any change to either,
by whatever path, makes the owner build a new one.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Any

from dht.routing import RoutingTable


class HopTable:
    """next_hop(k) for one routing table as it stood, with each peer already encoded by `encode`."""

    def __init__(self, routing: RoutingTable, encode: Callable[[Any], Any]) -> None:
        self.fingers = list(routing.fingers)
        self.successors = list(routing.successors)
        me, size = routing.me, 1 << routing.bits
        self.me_id, self.size, self.prs = me.id, size, routing.prs
        self.me = encode(me)

        def dist(peer: Any) -> int:
            return (peer.id - me.id) % size

        # fingers: the highest index i with 0 < d_i < limit is the last one whose suffix minimum is
        # below the limit (entries that can never qualify count as `size`, above every limit)
        suffix: list[int] = []
        low = size
        for p in reversed(self.fingers):
            d = dist(p) if p is not None else 0
            low = min(low, d if d > 0 else size)
            suffix.append(low)
        suffix.reverse()
        self.finger_floor = suffix
        self.finger_peers = [encode(p) if p is not None else None for p in self.fingers]
        self.finger_dist = [dist(p) if p is not None else 0 for p in self.fingers]
        # successors: the farthest below the limit, the earliest in the list among equals
        ranked = sorted((dist(p), -i) for i, p in enumerate(self.successors) if dist(p) > 0)
        self.succ_dist = [d for d, _ in ranked]
        self.succ_rank = [-i for _, i in ranked]
        self.succ_peers = [encode(p) for p in self.successors]
        self.succ_order = [dist(p) for p in self.successors]  # in list order: the owner's test
        self.anyone = any(p is not None and p.id != me.id for p in [*self.fingers, *self.successors])

    def current(self, routing: RoutingTable) -> bool:
        """Whether the routing table still holds the fingers and successor list this was built from."""
        return self.fingers == routing.fingers and self.successors == routing.successors

    def next_hop(self, k: int) -> tuple[bool, Any] | None:
        """(done, encoded peer) as RoutingTable.next_hop(k) answers with nothing avoided, or None
        when it answers None (no step can be made)."""
        dk = (k - self.me_id) % self.size
        order = self.succ_order
        if not order:
            if not self.anyone:
                return True, self.me
            best = self._closest_preceding(dk)
            return None if best is self.me else (False, best)
        first = order[0]
        if first == 0 or 0 < dk <= first:
            return True, self.succ_peers[0]
        if self.prs:
            for i, d in enumerate(order):
                if d == 0 or 0 < dk <= d:
                    return True, self.succ_peers[i]
        return False, self._closest_preceding(dk)

    def _closest_preceding(self, dk: int) -> Any:
        limit = dk or self.size
        i = bisect_left(self.finger_floor, limit) - 1
        best, best_d = (self.finger_peers[i], self.finger_dist[i]) if i >= 0 else (self.me, 0)
        j = bisect_left(self.succ_dist, limit) - 1
        if j >= 0 and self.succ_dist[j] > best_d:
            best = self.succ_peers[self.succ_rank[j]]
        return best
