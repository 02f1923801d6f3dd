"""A quiet position's finger refreshes are spaced so that its whole round-robin cycle fits in
FINGER_CYCLE periods, counted from the runs it has left, not from the last cycle's (dht/fingers.py): a
finger made stale by a join far away waited 22 periods where the bound is 20.

To see it fail: make `_gap_left_in_cycle` return the doubled gap as it is (`return self._finger_gap`):
six runs left at a gap of 8 take 48 periods."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from dht.fingers import FINGER_CYCLE, FingerMaintenance
from dht.routing import Peer, RoutingTable


def position(owners: int, gap: int, elapsed: int, next_finger: int = 0) -> FingerMaintenance:
    """A position of a 16-bit ring whose fingers name `owners` distinct nodes beyond its successor."""
    me = Peer(0, "127.0.0.1:1")
    routing = RoutingTable(me, bits=16)
    routing.successors = [Peer(1, "127.0.0.1:2")]
    far = [Peer(2 ** (16 - owners + k), f"127.0.0.1:{10 + k}") for k in range(owners)]
    routing.fingers = [routing.successor if i < 16 - owners else far[i - (16 - owners)] for i in range(16)]
    fm = FingerMaintenance()
    fm.node = SimpleNamespace(lock=threading.Lock(), routing=routing)
    fm.routing = routing
    fm.init_fingers()
    fm._finger_gap, fm._cycle_periods, fm._next_finger = gap, elapsed, next_finger
    return fm


def test_the_runs_left_fit_in_what_is_left_of_the_cycle():
    assert position(owners=6, gap=8, elapsed=0)._gap_left_in_cycle() == FINGER_CYCLE // 6
    assert position(owners=2, gap=8, elapsed=0)._gap_left_in_cycle() == 8  # room for the doubled gap
    # late in a cycle, with runs still ahead, refreshes come every period
    assert position(owners=6, gap=8, elapsed=14, next_finger=11)._gap_left_in_cycle() == 1


def test_the_periods_of_a_cycle_stay_within_its_bound():
    """Refresh one run at a time, each after the gap asked then, until the cycle's runs are done."""
    fm = position(owners=6, gap=8, elapsed=0)
    periods, runs = 0, 0
    while runs < 6:
        gap = fm._gap_left_in_cycle()
        periods += gap
        fm._cycle_periods += gap
        runs += 1
        fm._next_finger = 16 - 6 + runs  # the next run starts at the next owner's first finger
    assert periods <= FINGER_CYCLE
