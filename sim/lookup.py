"""Lookups on a converged ring following dht/routing.py's rule exactly, with dead nodes and latency.

One routing step at node `me` for key k (ToN'03 Fig. 5 with §V-B's successor list), as
`RoutingTable.next_hop` takes it: the successor is the first successor-list entry the lookup has
not found dead; if k is in (me, successor] that node owns it; otherwise go to the farthest known node
that precedes k, among the fingers (scanned top-down) and the successor list, skipping nodes this
lookup already found dead. The routing state is the converged ring's (`alive` marks who has failed
since), and on a converged ring that farthest node has a closed form:
- let q be the farthest position a candidate may have (first: the last node strictly before k).
  Finger j lies at or past me + 2^j, so the farthest finger at or before q is finger
  floor(log2 d(me, q)), or the one below it when that finger (chosen by proximity) overshoots q;
- the successor list holds me+1 .. me+r; its farthest entry at or before q is q if q is within r
  steps, else me+r.
The step takes whichever is farther. A candidate found dead costs a timeout and the same node is
asked again with the candidate excluded (q moves to just before it), as the live client does when
it backs up (dht/client.py) and as ToN'03 §V-B describes. A dead owner is a timeout too and the
next successor is tried. `hops` counts the nodes that answered, less the first, as the live client
does. `latency_ms` sums the hops' delays (recursive routing: each node forwards to the next) or,
`iterative`, the round trips from the origin to every node it asks after the first (the live
client's way), plus `timeout_ms` per timeout. The loop itself is compiled (sim/kernels.py) and runs
the lookups on every core.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sim import kernels
from sim.latency import LatencyModel, kernel_params
from sim.ring import FingerTable, Ring, finger_table

CHUNK = 1 << 18  # lookups per compiled call: the progress bar's step


@dataclass
class LookupBatch:
    keys: np.ndarray  # uint64
    origins: np.ndarray  # int64 positions
    owners: np.ndarray  # int64 positions; -1 when the lookup failed
    hops: np.ndarray  # int32
    timeouts: np.ndarray  # int32
    latency_ms: np.ndarray  # float64; NaN without a delay model
    ok: np.ndarray  # bool: an owner was reached
    last: np.ndarray | None = None  # int64 positions: the node that named the owner

    def __len__(self) -> int:
        return len(self.keys)


def lookups(ring: Ring, count: int, seed: int | None = None, keys: np.ndarray | None = None,
            origins: np.ndarray | None = None, *, alive: np.ndarray | None = None,
            latency: LatencyModel | None = None, timeout_ms: float = 0.0, iterative: bool = False,
            fingers: FingerTable | None = None, prs: bool = False,
            progress: Callable[[int], None] | None = None) -> LookupBatch:
    """`count` lookups of random keys (or `keys`) from random live positions (or `origins`).

    `alive` (bool per position) marks the nodes still up while the routing state is still the
    converged ring's; `latency` (sim/latency.py) gives each hop's delay, real node to real node.
    `fingers` defaults to plain Chord's table. `prs` (proximity route selection for the last hop, as
    DHash++ ends a lookup): a node whose successor list holds the owner names it at once, rather than
    forwarding to the owner's predecessor (which would name it).
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
    keys = np.ascontiguousarray(keys, dtype=np.uint64)
    origins = np.ascontiguousarray(origins, dtype=np.int64)
    ft = fingers if fingers is not None else finger_table(ring)
    m, n = len(keys), ring.size
    owners = np.zeros(m, dtype=np.int64)
    hops = np.zeros(m, dtype=np.int32)
    timeouts = np.zeros(m, dtype=np.int32)
    lat = np.zeros(m, dtype=np.float64)
    last = np.zeros(m, dtype=np.int64)
    if n == 1:
        lat[:] = 0.0 if latency is not None else np.nan
        return LookupBatch(keys, origins, owners, hops, timeouts, lat, owners >= 0, last)
    d = kernel_params(latency, ring.real)
    rt = ft.routing(ring)
    max_hops = 4 * ring.bits + 16
    before = np.empty(m, dtype=np.int64)
    kernels.positions_before(keys, ring.ids, ft.index, np.uint64(ft.shift), before)
    for lo in range(0, m, CHUNK):
        hi = min(lo + CHUNK, m)
        part = (keys[lo:hi], origins[lo:hi], before[lo:hi])
        if alive is not None:
            kernels.route_all(*part, rt, np.ascontiguousarray(alive, dtype=np.bool_), d, iterative,
                              float(timeout_ms), max_hops, owners[lo:hi], hops[lo:hi], timeouts[lo:hi],
                              lat[lo:hi], last[lo:hi], prs)
        else:
            kernels.route_live(*part, rt, d, iterative, max_hops, owners[lo:hi], hops[lo:hi], lat[lo:hi],
                               last[lo:hi], prs)
        if progress:
            progress(hi)
    if latency is None:
        lat[:] = np.nan  # no network model: hops only
    return LookupBatch(keys, origins, owners, hops, timeouts, lat, owners >= 0, last)


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
