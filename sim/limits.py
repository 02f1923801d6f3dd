"""The simulator's arguments, checked before anything heavy is imported: the commands say what is wrong
with their input at once (a fraction of a second) instead of after numba and networkx load (a second
and more), and the simulator's functions enforce the same limits for callers of the Python API."""

from __future__ import annotations

MAX_BITS = 64  # ids are uint64


class RingError(ValueError):
    """Parameters no ring can have (more nodes than ids, bits out of range)."""


def check_ring(nodes: int, bits: int, virtual: int = 1) -> None:
    """A ring of `nodes` nodes of `virtual` positions each in a `bits`-bit id space can exist."""
    if not 1 <= bits <= MAX_BITS:
        raise RingError(f"bits must be 1..{MAX_BITS} in the simulator (uint64 ids), got {bits}")
    if nodes < 1:
        raise RingError(f"a ring needs at least one node, got {nodes}")
    if virtual < 1:
        raise RingError(f"virtual nodes per node must be >= 1, got {virtual}")
    if nodes * virtual > (1 << bits):
        raise RingError(f"{nodes * virtual} positions do not fit in a {bits}-bit id space")


def check_failures(nodes: int, keys: int, fail: float, replicas: int, successors: int) -> None:
    """Simultaneous failures (SIGCOMM'01 §6.4) of a fraction `fail` that leaves someone alive."""
    if not 0 <= fail < 1:
        raise RingError(f"the failed fraction must be in [0, 1), got {fail}")
    if keys < 1:
        raise RingError(f"at least one key is needed, got {keys}")
    if replicas < 1 or successors < 1:
        raise RingError("replicas and successors must be at least 1")
    if round(fail * nodes) >= nodes:
        raise RingError(f"failing {fail} of {nodes} nodes leaves none alive")


def check_churn(nodes: int, rate: float, stabilize: float, duration: float, lookup_rate: float) -> None:
    """Continuous churn (SIGCOMM'01 §6.5) of a ring that can lose a node and still route."""
    if nodes < 2:
        raise RingError(f"churn needs at least 2 nodes, got {nodes}")
    if rate < 0 or stabilize <= 0 or duration <= 0 or lookup_rate <= 0:
        raise RingError("rate must be >= 0; stabilize, duration and lookup rate > 0")
