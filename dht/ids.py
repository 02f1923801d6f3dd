"""Identifiers on the Chord circle: the stable id function, arcs and finger starts.

Chord (Stoica et al., SIGCOMM 2001, §4.1) places nodes and keys on a circle of 2**bits
identifiers. A key is owned by its *successor*: the first node whose id is equal to or
follows the key's id. Everything here is pure arithmetic; no sockets, no clocks.

The id function is a stable contract (DESIGN.md): the top `bits` bits of the unsigned
128-bit x64 MurmurHash3 of the UTF-8 key with seed 0.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import mmh3

MIN_BITS = 8
MAX_BITS = 128


def check_bits(bits: int) -> int:
    """Return `bits` if it is a supported identifier width, else raise ValueError."""
    if not isinstance(bits, int) or isinstance(bits, bool) or not MIN_BITS <= bits <= MAX_BITS:
        raise ValueError(f"bits must be an integer in {MIN_BITS}..{MAX_BITS}, got {bits!r}")
    return bits


def key_id(key: str, bits: int = 64) -> int:
    """The identifier of `key` on a circle of 2**bits ids (the stable contract)."""
    check_bits(bits)
    full = mmh3.hash128(key.encode("utf-8"), seed=0, x64arch=True, signed=False)
    return full >> (128 - bits)


def node_id(host: str, port: int, bits: int = 64) -> int:
    """A node's default id: the id of its endpoint string "host:port"."""
    return key_id(f"{host}:{port}", bits)


# -- virtual nodes: one process, several ring positions -----------------------------------------
MAX_VNODES = 256  # positions one process may hold


def position_endpoint(process: str, index: int) -> str:
    """The endpoint of ring position `index` of the process at "host:port": the process's own for
    position 0 (so that a process of one position is addressed as before), "host:port/index" else."""
    return process if index == 0 else f"{process}/{index}"


def process_of(endpoint: str) -> str:
    """The "host:port" of the process holding the position at `endpoint`."""
    return endpoint.partition("/")[0]


def position_of(endpoint: str) -> int:
    """The index of the position at `endpoint` within its process (0 without a "/index" suffix)."""
    _, slash, index = endpoint.partition("/")
    return int(index) if slash else 0


def position_id(process: str, index: int, bits: int = 64) -> int:
    """A position's default id: the id of its endpoint string, so position 0 keeps the node's id
    (Chord's virtual nodes, SIGCOMM'01 §6.2: each real node holds V ids)."""
    return key_id(position_endpoint(process, index), bits)


def ring_size(bits: int) -> int:
    return 1 << bits


def in_open(x: int, a: int, b: int) -> bool:
    """x in the open arc (a, b), walking clockwise from a.

    (a, a) is the whole circle except a, as Chord's pseudo-code needs for a one-node ring.
    """
    if a < b:
        return a < x < b
    if a > b:
        return x > a or x < b
    return x != a


def in_half_open(x: int, a: int, b: int) -> bool:
    """x in the arc (a, b]; (a, a] is the whole circle (a lone node owns every key)."""
    if a < b:
        return a < x <= b
    if a > b:
        return x > a or x <= b
    return True


def distance(a: int, b: int, bits: int) -> int:
    """Clockwise distance from a to b."""
    return (b - a) % ring_size(bits)


def finger_start(n: int, i: int, bits: int) -> int:
    """Start of finger i (0-based): (n + 2**i) mod 2**bits (SIGCOMM'01 Table 1, with k = i + 1)."""
    if not 0 <= i < bits:
        raise ValueError(f"finger index must be in 0..{bits - 1}, got {i}")
    return (n + (1 << i)) % ring_size(bits)


def finger_starts(n: int, bits: int) -> list[int]:
    return [finger_start(n, i, bits) for i in range(bits)]


def successor_index(sorted_ids: Sequence[int], k: int) -> int:
    """Index in `sorted_ids` (ascending, non-empty) of the owner of id k: smallest id >= k, wrapping."""
    if not sorted_ids:
        raise ValueError("no nodes")
    i = bisect.bisect_left(sorted_ids, k)
    return 0 if i == len(sorted_ids) else i


def owner_of(sorted_ids: Sequence[int], k: int) -> int:
    """The id of the node owning id k among `sorted_ids` (ascending, non-empty)."""
    return sorted_ids[successor_index(sorted_ids, k)]
