"""Simultaneous node failures (SIGCOMM'01 §6.4, Fig. 11), before and after the ring stabilizes.

A fraction p of the real nodes fails at once. A key lives on its owner and the next R - 1 positions
(R = 1 is the paper's setting), so it is lost when all R of them fail. Two measurements:
- before stabilization: the routing state is still the converged ring's; lookups meet dead fingers
  and successors, time out and try the next best candidate (sim/lookup.py), and succeed when they
  reach the first live node after the key while it holds the key;
- after stabilization: the survivors form a converged ring (the paper waits for this), so a lookup
  fails exactly when its key was lost: the failed fraction is about p for R = 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.latency import LatencyModel
from sim.limits import check_failures
from sim.lookup import LookupTrace, lookups, trace_of
from sim.ring import Ring, random_ring


@dataclass
class FailureResult:
    fail: float
    nodes: int
    keys: int
    replicas: int
    failed_lookups: float  # after stabilization
    mean_hops: float
    mean_timeouts: float
    keys_lost: float  # fraction of the stored keys with no live holder
    before: dict  # the same three figures measured before stabilization
    trace: LookupTrace  # the lookups after stabilization

    def summary(self) -> dict:
        return {"fail": self.fail, "failed_lookups": self.failed_lookups, "mean_hops": self.mean_hops,
                "mean_timeouts": self.mean_timeouts, "nodes": self.nodes, "keys": self.keys,
                "replicas": self.replicas, "keys_lost": self.keys_lost, "before": self.before}


def simultaneous_failures(nodes: int, keys: int, fail: float, replicas: int = 1, successors: int = 8,
                          lookup_count: int | None = None, seed: int | None = None, bits: int = 64,
                          ring: Ring | None = None, latency: LatencyModel | None = None,
                          timeout_ms: float = 0.0) -> FailureResult:
    """Fail round(p * nodes) random real nodes, then look up stored keys before and after stabilizing."""
    check_failures(nodes, keys, fail, replicas, successors)
    ring = ring or random_ring(nodes, bits, seed=seed, successors=successors)
    rng = np.random.default_rng(None if seed is None else seed + 1)
    stored = rng.integers(0, int(ring.mask), size=keys, dtype=np.uint64, endpoint=True)
    dead_real = rng.choice(ring.real_nodes, size=round(fail * ring.real_nodes), replace=False)
    alive = ~np.isin(ring.real, dead_real)
    n = ring.size
    home = ring.owner_index(stored)
    held = np.zeros(keys, dtype=bool)
    for j in range(min(replicas, n)):
        held |= alive[(home + j) % n]
    pick = rng.integers(0, keys, size=lookup_count or min(keys, 100_000))

    stale = lookups(ring, len(pick), keys=stored[pick], alive=alive, seed=rng.integers(1 << 62),
                    latency=latency, timeout_ms=timeout_ms)
    # the first live node after the key holds it iff it is one of the key's R homes
    reached_holds = ((stale.owners - home[pick]) % n < replicas) & stale.ok
    before = {"failed_lookups": float(1 - reached_holds.mean()), "mean_hops": float(stale.hops.mean()),
              "mean_timeouts": float(stale.timeouts.mean())}

    survivors = np.flatnonzero(alive)
    healed = Ring(ring.bits, ring.ids[survivors], ring.real[survivors], successors)
    settled = lookups(healed, len(pick), keys=stored[pick], seed=rng.integers(1 << 62),
                      latency=latency)
    ok = held[pick] & settled.ok
    return FailureResult(fail, ring.real_nodes, keys, replicas, float(1 - ok.mean()),
                         float(settled.hops.mean()), float(settled.timeouts.mean()),
                         float(1 - held.mean()), before, trace_of(healed, settled, ok=ok))

