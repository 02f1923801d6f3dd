"""Vectorized iterative lookups following dht/routing.py's rule exactly, with dead nodes and latency.

One routing step at node `me` for key k (ToN'03 Fig. 5 with §V-B's successor list), as
`RoutingTable.next_hop` takes it: the successor is the first successor-list entry the lookup has
not found dead; if k is in (me, successor] that node owns it; otherwise go to the farthest known node
that precedes k, among the fingers (scanned top-down) and the successor list, skipping nodes this
lookup already found dead. The routing state is the converged ring's (`alive` marks who has failed
since), and on a converged ring that farthest node has a closed form, which makes this fast:
- let q be the farthest position a candidate may have (first: the last node strictly before k).
  Finger j is successor(me + 2^j); it lies at or before q exactly when 2^j <= d(me, q), so the
  farthest such finger is finger floor(log2 d(me, q)): one row of the finger table;
- the successor list holds me+1 .. me+r; its farthest entry at or before q is q if q is within r
  steps, else me+r.
The step takes whichever is farther. A candidate found dead costs a timeout and the same node is
asked again with the candidate excluded (q moves to just before it), as the live client does when
it backs up (dht/client.py) and as ToN'03 §V-B describes. The lookup ends by contacting the owner,
so a dead owner is a timeout too and the next successor is tried. `hops` counts the nodes that
answered, less the first, as the live client does; `latency_ms` sums the hops' delays and
`timeout_ms` per timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sim.ring import FingerTable, Ring, finger_table

CHUNK = 1 << 18  # lookups advanced together: bounds the temporaries' memory

Delay = Callable[[np.ndarray, np.ndarray], np.ndarray]  # ms from position a to position b


@dataclass
class LookupBatch:
    keys: np.ndarray  # uint64
    origins: np.ndarray  # int64 positions
    owners: np.ndarray  # int64 positions; -1 when the lookup failed
    hops: np.ndarray  # int32
    timeouts: np.ndarray  # int32
    latency_ms: np.ndarray  # float64; NaN without a delay model
    ok: np.ndarray  # bool: an owner was reached

    def __len__(self) -> int:
        return len(self.keys)


def floor_log2(x: np.ndarray) -> np.ndarray:
    """floor(log2 x) for uint64 x > 0, exact (float64 rounding is corrected)."""
    e = np.minimum(np.frexp(x.astype(np.float64))[1] - 1, 63).astype(np.uint64)  # 2^64-1 rounds up to 2^64
    over = np.left_shift(np.uint64(1), e) > x
    e[over] -= np.uint64(1)
    return e


class _Dead:
    """The nodes each lookup has found dead (few per lookup: a small growing matrix)."""

    def __init__(self, lookups: int) -> None:
        self.seen = np.full((lookups, 2), -1, dtype=np.int64)
        self.count = np.zeros(lookups, dtype=np.int64)

    def known(self, lanes: np.ndarray, pos: np.ndarray) -> np.ndarray:
        return (self.seen[lanes] == pos[:, None]).any(axis=1)

    def add(self, lanes: np.ndarray, pos: np.ndarray) -> None:
        if not lanes.size:
            return
        if self.count[lanes].max() >= self.seen.shape[1]:
            grown = np.full((len(self.seen), 2 * self.seen.shape[1]), -1, dtype=np.int64)
            grown[:, : self.seen.shape[1]] = self.seen
            self.seen = grown
        self.seen[lanes, self.count[lanes]] = pos
        self.count[lanes] += 1


def _farthest_candidate(ring: Ring, ft: FingerTable, c: np.ndarray, me: np.ndarray,
                        q: np.ndarray, idq: np.ndarray) -> np.ndarray:
    """The farthest finger or successor-list entry of c at or before position q (q != c, idq = its id)."""
    n, r = ring.size, ring.r
    steps = (q - c) % n
    best = q.copy()
    far = np.flatnonzero(steps > r)  # q is out of the successor list's reach: compare with a finger
    if far.size:
        cf, mf = c[far], me[far]
        level = floor_log2(ring.distance(mf, idq[far])).astype(np.int64)
        cols = ft.table.shape[1]
        flat = ft.table.reshape(-1)
        low = level < ft.base
        if not low.any():
            finger = flat[cf * cols + (level - ft.base)].astype(np.int64)
        else:
            finger = np.empty(far.size, dtype=np.int64)
            stored = ~low
            finger[stored] = flat[cf[stored] * cols + (level[stored] - ft.base)]
            start = (mf[low] + np.left_shift(np.uint64(1), level[low].astype(np.uint64))) & ring.mask
            finger[low] = ring.owner_index(start)
        listed = (cf + r) % n
        farther = ring.distance(mf, ring.ids[finger]) > ring.distance(mf, ring.ids[listed])
        best[far] = np.where(farther, finger, listed)
    return best


def _route(ring: Ring, ft: FingerTable, keys: np.ndarray, start: np.ndarray, alive: np.ndarray | None,
           delay: Delay | None, timeout_ms: float) -> tuple[np.ndarray, ...]:
    n, ids, r = ring.size, ring.ids, ring.r
    m = len(keys)
    owners = np.full(m, -1, dtype=np.int64)
    hops = np.zeros(m, dtype=np.int32)
    timeouts = np.zeros(m, dtype=np.int32)
    latency = np.zeros(m, dtype=np.float64)
    if n == 1:
        owners[:] = 0
        return owners, hops, timeouts, latency
    order = np.argsort(keys)
    before = np.empty(m, dtype=np.int64)
    before[order] = ring.owner_index(keys[order]) - 1  # the last position before each key (sorted: cache-friendly)
    before[before < 0] = n - 1
    dead = _Dead(m) if alive is not None else None
    max_hops = 4 * ring.bits + 16
    lane, c, k, p = np.arange(m), start.astype(np.int64), keys, before
    q, idp = p.copy(), ids[p]
    idq = idp.copy()
    while lane.size:
        me = ids[c]
        s = c + 1
        s[s == n] = 0
        gone = np.zeros(lane.size, dtype=bool)  # every successor known dead: only fingers are left
        if dead is not None:
            skip = np.ones(lane.size, dtype=np.int64)
            known = dead.known(lane, s)
            while known.any():
                skip[known] += 1
                gone |= known & (skip > r)
                known &= ~gone
                s[known] = (c[known] + skip[known]) % n
                known[known] = dead.known(lane[known], s[known])
        dk = ring.distance(me, k)
        done = (dk != 0) & (dk <= ring.distance(me, ids[s])) & ~gone
        fail = hops[lane] > max_hops
        timed = np.zeros(lane.size, dtype=bool)
        if dead is not None:
            timed = done & ~alive[s]
            done &= ~timed
            dead.add(lane[timed], s[timed])
        owners[lane[done]] = s[done]
        route = np.flatnonzero(~(done | fail | timed))
        if route.size:
            stuck = q[route] == c[route]  # no candidate left before k (next_hop gives up too)
            fail[route[stuck]] = True
            route = route[~stuck]
            best = _farthest_candidate(ring, ft, c[route], me[route], q[route], idq[route])
            move = np.ones(route.size, dtype=bool)
            if dead is not None:
                lr = lane[route]
                seen = dead.known(lr, best)
                died = ~seen & ~alive[best]
                dead.add(lr[died], best[died])
                move = ~(seen | died)
                again = route[~move]
                q[again] = (best[~move] - 1) % n  # ask the same node for the next best
                idq[again] = ids[q[again]]
                timed[route[died]] = True
            mv = route[move]
            if delay is not None:
                latency[lane[mv]] += delay(c[mv], best[move])
            c[mv] = best[move]
            q[mv] = p[mv]
            idq[mv] = idp[mv]
            hops[lane[mv]] += 1
        if timed.any():
            timeouts[lane[timed]] += 1
        keep = ~(done | fail)
        if not keep.all():
            lane, c, k, p, q, idp, idq = (a[keep] for a in (lane, c, k, p, q, idp, idq))
    latency += timeouts * timeout_ms
    return owners, hops, timeouts, latency


def lookups(ring: Ring, count: int, seed: int | None = None, keys: np.ndarray | None = None,
            origins: np.ndarray | None = None, *, alive: np.ndarray | None = None,
            delay: Delay | None = None, timeout_ms: float = 0.0,
            fingers: FingerTable | None = None,
            progress: Callable[[int], None] | None = None) -> LookupBatch:
    """`count` lookups of random keys (or `keys`) from random live positions (or `origins`).

    `alive` (bool per position) marks the nodes still up while the routing state is still the
    converged ring's; `delay(a, b)` gives each hop's delay in ms.
    """
    rng = np.random.default_rng(seed)
    if keys is None:
        keys = rng.integers(0, int(ring.mask), size=count, dtype=np.uint64, endpoint=True)
    if origins is None:
        pool = np.flatnonzero(alive) if alive is not None else None
        if pool is not None and not pool.size:
            raise ValueError("every node is dead: no lookup can start")
        draw = rng.integers(0, ring.size if pool is None else pool.size, size=len(keys), dtype=np.int64)
        origins = draw if pool is None else pool[draw]
    keys = np.asarray(keys, dtype=np.uint64)
    origins = np.asarray(origins, dtype=np.int64)
    ft = fingers if fingers is not None else finger_table(ring)
    out = [np.empty(len(keys), dtype=t) for t in (np.int64, np.int32, np.int32, np.float64)]
    for lo in range(0, len(keys), CHUNK):
        hi = lo + CHUNK
        for arr, part in zip(out, _route(ring, ft, keys[lo:hi], origins[lo:hi], alive, delay, timeout_ms),
                             strict=True):
            arr[lo:hi] = part
        if progress:
            progress(min(hi, len(keys)))
    owners, hops, timeouts, latency = out
    if delay is None:
        latency[:] = np.nan  # no network model: hops only
    return LookupBatch(keys, origins, owners, hops, timeouts, latency, owners >= 0)


@dataclass
class LookupTrace:
    """Per-lookup columns in the trace schema's terms: node ids, not ring positions."""

    key_id: np.ndarray  # uint64
    origin: np.ndarray  # uint64
    owner: np.ndarray  # uint64, meaningful where ok
    hops: np.ndarray
    timeouts: np.ndarray
    latency_ms: np.ndarray  # float64, NaN where the model gave none
    ok: np.ndarray  # bool
    ts: np.ndarray  # float64 seconds (simulated time, or the lookup's index)

    def __len__(self) -> int:
        return len(self.key_id)


def trace_of(ring: Ring, batch: LookupBatch, ok: np.ndarray | None = None,
             ts: np.ndarray | None = None) -> LookupTrace:
    """`batch` as a trace; `ok` overrides "an owner was reached" (e.g. "and it holds the key")."""
    owners = np.where(batch.owners >= 0, batch.owners, 0)
    return LookupTrace(batch.keys, ring.ids[batch.origins], ring.ids[owners], batch.hops, batch.timeouts,
                       batch.latency_ms, batch.ok if ok is None else ok,
                       np.arange(len(batch), dtype=np.float64) if ts is None else ts)
