"""The whole ring as numpy arrays: sorted node ids and their successors (SIGCOMM'01 §4).

A converged Chord ring is fully determined by its sorted ids: node i's successor is i + 1, its
successor list is i + 1 .. i + r, and its finger j is successor(id_i + 2^j) (ToN'03 §IV-A).
So the simulator stores only the ids (8 bytes a node; 10^7 nodes in 80 MB) and derives the one
finger a routing step needs (sim/lookup.py). Virtual nodes: V ids per real
node, `real` mapping each position back to its real node.

Fingers are not stored for plain Chord: a bucket index over the ids' top bits (about one id a
bucket) finds successor(x) in two cache lines, so a ring of 10^8 nodes is its ids and its index
(1.3 GB). Under proximity neighbour selection the top ~log2(N) + 2 levels are stored (`FingerTable`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.limits import MAX_BITS, RingError  # noqa: F401 - (MAX_BITS: offered here as before)
from sim.limits import check_ring as check


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
    """Fingers base..bits-1 of every position: `table[j - base, i]` = finger j of position i; the
    levels below `base` are derived when a routing step asks for one, through the bucket index.

    Plain Chord's finger j is successor(id_i + 2^j), which the bucket index finds in two cache lines,
    so nothing is stored (base = bits) and a ring costs its ids and its index. Under PNS (`pns` = k > 1)
    finger j is the nearest of the first k nodes of [id_i + 2^j, id_i + 2^(j+1)) (sim/proximity.py):
    the levels where that is a real choice are stored.
    """

    base: int
    table: np.ndarray  # (bits - base, size) positions, one row per level
    index: np.ndarray  # int64 (2^B + 1): first position whose id >> shift is >= b
    shift: int
    pns: int = 0
    delay: tuple | None = None  # sim/latency.py kernel_params: what PNS measured distance with

    @property
    def nbytes(self) -> int:
        return self.table.nbytes + self.index.nbytes

    def routing(self, ring: Ring) -> tuple:
        """The packed routing state sim/kernels.py's loops take."""
        from sim.latency import kernel_params

        pd = self.delay if self.delay is not None else kernel_params(None, ring.real[:1])
        return (ring.ids, ring.mask, ring.bits, ring.r, self.table, self.base, self.pns, pd, self.index,
                np.uint64(self.shift))


def stored_levels(n: int, bits: int, slack: int = 2) -> int:
    """The first finger level worth storing: lower ones reach less than 2^-slack of an average gap
    past the node, so they are nearly always its successor and routing seldom asks for them."""
    return max(0, bits - max(1, (n - 1).bit_length()) - slack)


def bucket_index(ring: Ring) -> tuple[np.ndarray, int]:
    """(index, shift): about one id a bucket of the top B bits; index[b] = first position with
    id >> shift >= b (the size when none), one extra entry so a bucket's end is index[b + 1]."""
    n, bits = ring.size, ring.bits
    width = min(bits, max(1, (max(n, 2) - 1).bit_length()))
    shift = bits - width
    counts = np.bincount((ring.ids >> np.uint64(shift)).astype(np.int64), minlength=1 << width)
    index = np.zeros((1 << width) + 1, dtype=np.int64)
    np.cumsum(counts, out=index[1:])
    return index, shift


def finger_table(ring: Ring, pns: int = 0, delay: tuple | None = None, slack: int = 2) -> FingerTable:
    """Every node's fingers (ToN'03 §IV-C): the bucket index, and under PNS the top levels stored.

    `pns` > 1 picks each finger by proximity with `delay` (sim/latency.py kernel_params); the stored
    levels are computed by a linear merge per level, then each finger's choice, on every core.
    """
    from sim import kernels

    n, bits = ring.size, ring.bits
    index, shift = bucket_index(ring)
    pns = pns if pns > 1 else 0
    base = stored_levels(n, bits, slack) if pns else bits
    dtype = np.int32 if n < (1 << 31) else np.int64
    table = np.empty((bits - base, n), dtype=dtype)
    if pns:
        if delay is None:
            raise ValueError("proximity neighbour selection needs a delay model to choose by")
        kernels.finger_columns(ring.ids, ring.mask, bits, base, table)
        kernels.pns_columns(ring.ids, ring.mask, bits, base, pns, delay, table)
    return FingerTable(base, table, index, shift, pns, delay if pns else None)


def random_ring(nodes: int, bits: int = 64, seed: int | None = None, virtual: int = 1,
                successors: int = 8) -> Ring:
    """`nodes` real nodes with `virtual` uniformly random distinct ids each.

    The ids are drawn independently, so which real node sits at which sorted position is a uniformly
    random assignment: identity with one id per node, a random permutation with virtual nodes. That
    spares the argsort of a shuffle (a sort and a duplicate check make a ring of 10^7 in about a second).
    """
    check(nodes, bits, virtual)
    rng = np.random.default_rng(seed)
    want = nodes * virtual
    high = np.uint64((1 << bits) - 1)
    ids = np.sort(rng.integers(0, high, size=want, dtype=np.uint64, endpoint=True))
    while True:  # collisions: rare at 64 bits, possible on small id spaces
        dup = np.flatnonzero(ids[1:] == ids[:-1])
        if not dup.size:
            break
        ids = np.delete(ids, dup)
        extra = rng.integers(0, high, size=want - len(ids), dtype=np.uint64, endpoint=True)
        ids = np.sort(np.concatenate([ids, extra]))
    if virtual == 1:
        real = np.arange(nodes, dtype=np.int64)
    else:
        real = rng.permutation(want) // virtual
    return Ring(bits, ids, real, successors)


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
