"""The whole ring as numpy arrays: sorted node ids and their successors (SIGCOMM'01 §4).

A converged Chord ring is fully determined by its sorted ids: node i's successor is i + 1, its
successor list is i + 1 .. i + r, and its finger j is successor(id_i + 2^j) (ToN'03 §IV-A).
So the simulator stores only the ids (8 bytes a node; 10^7 nodes in 80 MB) and computes the one
finger a routing step needs with a binary search (sim/lookup.py). Virtual nodes: V ids per real
node, `owner_of_vnode` mapping each position back to its real node.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_BITS = 64  # ids are uint64


class RingError(ValueError):
    """Parameters no ring can have (more nodes than ids, bits out of range)."""


@dataclass(frozen=True)
class Ring:
    bits: int
    ids: np.ndarray  # uint64, sorted, unique: the ring's positions
    real: np.ndarray  # int64, the real node behind each position (virtual nodes share one)
    successors: int = 8  # successor-list length r

    @property
    def size(self) -> int:
        return len(self.ids)

    @property
    def mask(self) -> np.uint64:
        return np.uint64((1 << self.bits) - 1)

    @property
    def r(self) -> int:
        """Successor-list entries a node really has: r, or everyone else on a small ring."""
        return min(self.successors, self.size - 1)

    def distance(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Clockwise distance from id a to id b, mod 2^bits (uint64 arithmetic wraps mod 2^64)."""
        return (b - a) & self.mask

    def owner_index(self, keys: np.ndarray) -> np.ndarray:
        """The position that owns each key: the first id >= key, wrapping around."""
        idx = np.searchsorted(self.ids, keys, side="left")
        idx[idx == self.size] = 0
        return idx


def check(nodes: int, bits: int, virtual: int = 1) -> None:
    if not 1 <= bits <= MAX_BITS:
        raise RingError(f"bits must be 1..{MAX_BITS} in the simulator (uint64 ids), got {bits}")
    if nodes < 1:
        raise RingError(f"a ring needs at least one node, got {nodes}")
    if virtual < 1:
        raise RingError(f"virtual nodes per node must be >= 1, got {virtual}")
    if nodes * virtual > (1 << bits):
        raise RingError(f"{nodes * virtual} positions do not fit in a {bits}-bit id space")


def random_ring(nodes: int, bits: int = 64, seed: int | None = None, virtual: int = 1,
                successors: int = 8) -> Ring:
    """`nodes` real nodes with `virtual` uniformly random distinct ids each."""
    check(nodes, bits, virtual)
    rng = np.random.default_rng(seed)
    want = nodes * virtual
    high = np.uint64((1 << bits) - 1)
    ids = rng.integers(0, high, size=want, dtype=np.uint64, endpoint=True)
    real = np.repeat(np.arange(nodes, dtype=np.int64), virtual)
    ids, first = np.unique(ids, return_index=True)
    while len(ids) < want:  # collisions: rare at 64 bits, possible on small id spaces
        extra = rng.integers(0, high, size=want - len(ids), dtype=np.uint64, endpoint=True)
        ids, first = _merge(ids, first, extra, want)
    return Ring(bits, ids, real[first], successors)


def _merge(ids: np.ndarray, first: np.ndarray, extra: np.ndarray, want: int) -> tuple[np.ndarray, np.ndarray]:
    missing = np.setdiff1d(np.arange(want), first)[: len(extra)]
    allids = np.concatenate([ids, extra])
    owners = np.concatenate([first, missing])
    ids2, pick = np.unique(allids, return_index=True)
    return ids2, owners[pick]


def ring_from_ids(ids, bits: int = 64, successors: int = 8) -> Ring:
    """A ring of the given (distinct) ids, e.g. `key_id` of node names, one real node each."""
    arr = np.asarray([int(i) for i in ids], dtype=np.uint64)
    check(len(arr), bits)
    if len(np.unique(arr)) != len(arr):
        raise RingError("node ids must be distinct")
    if len(arr) and int(arr.max()) >= (1 << bits):
        raise RingError(f"an id does not fit in {bits} bits")
    order = np.argsort(arr, kind="stable")
    return Ring(bits, arr[order], order.astype(np.int64), successors)
