"""The whole ring as numpy arrays: sorted node ids and their successors (SIGCOMM'01 §4).

A converged Chord ring is fully determined by its sorted ids: node i's successor is i + 1, its
successor list is i + 1 .. i + r, and its finger j is successor(id_i + 2^j) (ToN'03 §IV-A).
So the simulator stores only the ids (8 bytes a node; 10^7 nodes in 80 MB) and computes the one
finger a routing step needs with a binary search (sim/lookup.py). Virtual nodes: V ids per real
node, `real` mapping each position back to its real node.

Fingers: finger j of a node is its successor list's farthest entry or nearer for every j with
2^j below a few average gaps, so only the top ~log2(N) + 2 levels are worth storing. `FingerTable`
keeps those (positions, int32 where they fit: 26 columns, 1 GB, at 10^7 nodes) and routing falls
back to a binary search on the rare step that needs a lower level.
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

    @property
    def real_nodes(self) -> int:
        return int(self.real.max()) + 1 if self.size else 0


@dataclass(frozen=True)
class FingerTable:
    """Fingers base..bits-1 of every position: `table[i, j - base]` = successor(id_i + 2^j)."""

    base: int
    table: np.ndarray  # (size, bits - base) positions

    @property
    def nbytes(self) -> int:
        return self.table.nbytes


def finger_table(ring: Ring, slack: int = 2) -> FingerTable:
    """The top levels of every node's fingers, one sorted binary search per level (ToN'03 §IV-C).

    Levels below `base` = bits - ceil(log2 N) - slack reach less than 2^-slack of an average gap
    past the node, so they are nearly always its successor and routing seldom asks for them.
    """
    n, bits = ring.size, ring.bits
    base = max(0, bits - max(1, (n - 1).bit_length()) - slack)
    dtype = np.int32 if n < (1 << 31) else np.int64
    table = np.empty((n, bits - base), dtype=dtype)
    top = 1 << bits
    for j in range(base, bits):
        # ids + 2^j is sorted but for one wrap: search the two runs apart so each stays sorted,
        # which keeps numpy's binary search cache-friendly (10x faster than random needles)
        wrap = int(np.searchsorted(ring.ids, np.uint64(top - (1 << j)), side="left"))
        targets = (ring.ids + np.uint64(1 << j)) & ring.mask
        col = table[:, j - base]
        col[:wrap] = np.searchsorted(ring.ids, targets[:wrap], side="left")
        col[wrap:] = np.searchsorted(ring.ids, targets[wrap:], side="left")
        col[col == n] = 0
    return FingerTable(base, table)


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
