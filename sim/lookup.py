"""Vectorized iterative lookups on a converged ring, following dht/routing.py's rule exactly.

One routing step at node `me` for key k (ToN'03 Fig. 5 with §V-B's successor list), as
`RoutingTable.next_hop` takes it: if k is in (me, successor] the successor owns it; otherwise go to
the farthest known node that precedes k, among the fingers (scanned top-down) and the successor
list. On a converged ring that node has a closed form, which is what makes this fast:
- let p be the last node strictly before k, at distance dp from me. Finger j is
  successor(me + 2^j), and it precedes k exactly when 2^j <= dp, so the farthest preceding finger is
  finger floor(log2 dp): one binary search for its position;
- the successor list holds me+1 .. me+r; its farthest entry before k is p if p is within r steps,
  else me+r.
The step goes to whichever of the two is farther. `hops` counts the steps, as the live client
does (the nodes asked, less the first).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.ring import Ring

CHUNK = 1 << 18  # lookups advanced together: bounds the temporaries' memory


@dataclass
class LookupBatch:
    keys: np.ndarray  # uint64
    origins: np.ndarray  # int64 positions
    owners: np.ndarray  # int64 positions
    hops: np.ndarray  # int32


def floor_log2(x: np.ndarray) -> np.ndarray:
    """floor(log2 x) for uint64 x > 0, exact (float64 rounding is corrected)."""
    e = np.minimum(np.frexp(x.astype(np.float64))[1] - 1, 63).astype(np.uint64)  # 2^64-1 rounds up to 2^64
    over = np.left_shift(np.uint64(1), e) > x
    e[over] -= np.uint64(1)
    return e


def _route(ring: Ring, keys: np.ndarray, cur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, ids, r = ring.size, ring.ids, ring.r
    owners = np.empty(len(keys), dtype=np.int64)
    hops = np.zeros(len(keys), dtype=np.int32)
    if n == 1:
        owners[:] = 0
        return owners, hops
    before = ring.owner_index(keys) - 1  # the last position strictly before each key
    before[before < 0] = n - 1
    live = np.arange(len(keys))
    while live.size:
        c = cur[live]
        me = ids[c]
        k = keys[live]
        succ = c + 1
        succ[succ == n] = 0
        limit = ring.distance(me, k)
        done = (limit != 0) & (limit <= ring.distance(me, ids[succ]))
        owners[live[done]] = succ[done]
        keep = ~done
        live, c, me, k = live[keep], c[keep], me[keep], k[keep]
        if not live.size:
            break
        p = before[live]
        level = floor_log2(ring.distance(me, ids[p]))
        finger = ring.owner_index((me + np.left_shift(np.uint64(1), level)) & ring.mask)
        steps = (p - c) % n
        listed = np.where(steps <= r, p, (c + r) % n)
        farther = ring.distance(me, ids[listed]) > ring.distance(me, ids[finger])
        cur[live] = np.where(farther, listed, finger)
        hops[live] += 1
    return owners, hops


def lookups(ring: Ring, count: int, seed: int | None = None, keys: np.ndarray | None = None,
            origins: np.ndarray | None = None) -> LookupBatch:
    """`count` lookups of random keys (or `keys`) from random positions (or `origins`)."""
    rng = np.random.default_rng(seed)
    if keys is None:
        keys = rng.integers(0, int(ring.mask), size=count, dtype=np.uint64, endpoint=True)
    if origins is None:
        origins = rng.integers(0, ring.size, size=len(keys), dtype=np.int64)
    keys = np.asarray(keys, dtype=np.uint64)
    origins = np.asarray(origins, dtype=np.int64)
    owners = np.empty(len(keys), dtype=np.int64)
    hops = np.empty(len(keys), dtype=np.int32)
    for lo in range(0, len(keys), CHUNK):
        hi = lo + CHUNK
        owners[lo:hi], hops[lo:hi] = _route(ring, keys[lo:hi], origins[lo:hi].copy())
    return LookupBatch(keys, origins, owners, hops)
