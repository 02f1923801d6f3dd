"""Keys per node (SIGCOMM'01 §6.2, Figs. 8 and 9): how evenly consistent hashing spreads keys.

K random keys go to their owners; a real node's load is the sum over its V virtual positions.
With one position per node the load is roughly exponential around the mean (a node owns the gap
before it), so the 99th percentile is about 4.6 times the mean and the 1st is 0; V virtual nodes
average V gaps and tighten it (Fig. 9).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.ring import Ring, RingError, random_ring


@dataclass
class LoadResult:
    nodes: int
    keys: int
    virtual: int
    counts: np.ndarray  # keys per real node, every trial's nodes together
    trials: int = 1

    def summary(self) -> dict:
        """The contract's figures over all trials' nodes, and the busiest node of a ring (averaged)."""
        c = self.counts
        p1, p50, p99 = np.percentile(c, [1, 50, 99])
        ring_max = c.reshape(self.trials, -1).max(axis=1).mean()
        return {"nodes": self.nodes, "keys": self.keys, "virtual": self.virtual, "mean": float(c.mean()),
                "p1": float(p1), "p50": float(p50), "p99": float(p99), "max": int(c.max()),
                "trials": self.trials, "max_per_ring": float(ring_max)}


def keys_per_node(ring: Ring, keys: int, rng: np.random.Generator) -> np.ndarray:
    stored = rng.integers(0, int(ring.mask), size=keys, dtype=np.uint64, endpoint=True)
    return np.bincount(ring.real[ring.owner_index(stored)], minlength=ring.real_nodes)


def load(nodes: int, keys: int, virtual: int = 1, seed: int | None = None, bits: int = 64,
         trials: int = 1) -> LoadResult:
    """Keys per real node over `trials` independent rings (pooled, as the paper averages runs)."""
    if keys < 0:
        raise RingError(f"keys must be >= 0, got {keys}")
    if trials < 1:
        raise RingError(f"trials must be >= 1, got {trials}")
    rng = np.random.default_rng(seed)
    counts = []
    for _ in range(trials):
        ring = random_ring(nodes, bits, seed=int(rng.integers(1 << 62)), virtual=virtual)
        counts.append(keys_per_node(ring, keys, rng))
    return LoadResult(nodes, keys, virtual, np.concatenate(counts), trials)


def keys_per_process(ids: list[int], process: list[int], keys: int, bits: int = 64, trials: int = 100,
                     seed: int | None = 0) -> np.ndarray:
    """Keys per process on the ring of exactly these position `ids` (`process[i]`: the process holding
    position i, 0..P-1), for `keys` uniformly random keys, `trials` times: a (trials, P) array. What
    consistent hashing predicts for a live ring of virtual nodes whose ids are known."""
    if not ids or len(ids) != len(process):
        raise RingError("one process index per position id, and at least one position")
    if bits > 64:
        raise RingError(f"the simulator's ids are at most 64 bits, got {bits}")
    order = np.argsort(np.asarray(ids, dtype=np.uint64), kind="stable")
    ring = Ring(bits, np.asarray(ids, dtype=np.uint64)[order], np.asarray(process, dtype=np.int64)[order])
    rng = np.random.default_rng(seed)
    return np.stack([keys_per_node(ring, keys, rng) for _ in range(trials)])
