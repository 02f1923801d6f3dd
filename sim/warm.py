"""Compile the simulator's loops once, into numba's cache beside their source (sim/__pycache__), before
many processes need them at once.

numba compiles a `cache=True` kernel on its first call in a process that finds no cache entry for it,
then writes one; every process that starts before that entry is written compiles the same kernel again.
A fresh clone's suite starts several such processes at once (notebooks, `sim` commands), each compiling
for 10-25 CPU-seconds. `make test` runs this first: one compile of every kernel (about 30 CPU-seconds
on a fresh tree, a second or two once the cache is there).

    python -m sim.warm
"""

from __future__ import annotations

import time


def warm() -> float:
    """Call every kernel once with the argument types the commands give it; returns the seconds taken."""
    from sim.failures import simultaneous_failures
    from sim.latency import from_spec
    from sim.load import load
    from sim.lookup import lookups
    from sim.proximity import pns_fingers
    from sim.ring import finger_table, random_ring

    t0 = time.perf_counter()
    ring = random_ring(64, 64, seed=0)
    model = from_spec(None, 64, 0)
    for fingers in (finger_table(ring), pns_fingers(ring, 4, model)):
        lookups(ring, 16, seed=0, fingers=fingers, latency=model)
        lookups(ring, 16, seed=0, fingers=fingers, latency=model, iterative=True, prs=True)
    simultaneous_failures(64, 64, 0.25, seed=0)
    load(64, 64, virtual=2, seed=0)
    return time.perf_counter() - t0


if __name__ == "__main__":
    print(f"the simulator's loops compiled and cached in {warm():.1f} s")
