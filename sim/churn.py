"""Continuous churn as in SIGCOMM'01 §6.5 (Fig. 12): an event-driven ring with stale routing state.

The setup of the paper: a ring of 500 nodes; joins and failures are Poisson processes of rate R
each, so the size stays near 500; every node stabilizes at random intervals averaging S seconds
(uniform in [S/2, 3S/2]); lookups of random keys from random live nodes are a Poisson process of
rate 1/s and are not retried. Only failures of state consistency count, never lost keys. Two rates:
- `failed_lookups`, the paper's: a lookup fails when it meets a dead node (its timeout is not
  retried) or ends at a node that is not the key's true owner (the first live node after it);
- `failed_with_retries`, the live client's rule: a timeout makes the same node offer its next best
  candidate, and only a wrong or unreachable owner fails.

Each node keeps its own successor list, predecessor and fingers, changed only by its own events:
- join (ToN'03 Fig. 6): the new node learns its successor by a lookup (taken as correct) and that
  node's successor list; its fingers are filled by lookups too. Nobody else knows it yet;
- stabilize: drop dead successors from the front, adopt successor.predecessor when it lies in
  between, copy the successor's list (stale entries and all), notify the successor,
  check_predecessor, and fix every finger (with the ring as it is at that moment);
- failure: the node stops; everyone's references to it stay until their owners stabilize.
Lookups route over that state by the same rule as sim/lookup.py and the live client: a dead hop or
owner is a timeout and the same node is asked for the next best candidate. Rings of a few hundred
nodes and a lookup a second need no vectorizing: this is plain Python over small lists.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sim.limits import RingError, check_churn
from sim.lookup import LookupTrace
from sim.ring import random_ring

JOIN, FAIL, STABILIZE, LOOKUP = range(4)


@dataclass
class ChurnResult:
    rate: float
    stabilize: float
    duration: float
    nodes: int
    lookups: int
    failed_lookups: float
    failed_with_retries: float
    mean_hops: float
    mean_timeouts: float
    joins: int
    failures: int
    final_nodes: int
    trace: LookupTrace

    def summary(self) -> dict:
        return {"rate": self.rate, "failed_lookups": self.failed_lookups, "mean_hops": self.mean_hops,
                "mean_timeouts": self.mean_timeouts, "failed_with_retries": self.failed_with_retries,
                "nodes": self.nodes, "stabilize": self.stabilize,
                "duration": self.duration, "lookups": self.lookups, "joins": self.joins,
                "failures": self.failures, "final_nodes": self.final_nodes}


class ChurnRing:
    """Per-node Chord state (slots never reused) plus the true live ring for joins and for judging."""

    def __init__(self, nodes: int, bits: int, successors: int, rng: np.random.Generator) -> None:
        ring = random_ring(nodes, bits, seed=int(rng.integers(1 << 62)), successors=successors)
        self.bits, self.r, self.rng = bits, successors, rng
        self.mask = (1 << bits) - 1
        self.ids: list[int] = [int(i) for i in ring.ids]
        self.alive: list[bool] = [True] * nodes
        n = nodes
        r = min(successors, n - 1)
        self.succ: list[list[int]] = [[(i + j) % n for j in range(1, r + 1)] for i in range(n)]
        self.pred: list[int | None] = [(i - 1) % n if n > 1 else None for i in range(n)]
        self.live_ids = ring.ids.copy()  # sorted ids of live nodes
        self.live_slots = np.arange(n, dtype=np.int64)
        self.fingers: list[list[int]] = [self.true_fingers(i) for i in range(n)]

    # -- the truth -------------------------------------------------------------------------------
    def true_owner(self, k: int) -> int:
        i = int(np.searchsorted(self.live_ids, np.uint64(k), side="left"))
        return int(self.live_slots[i % len(self.live_ids)])

    def true_fingers(self, x: int) -> list[int]:
        """Distinct fingers of x, from the far end down (what fix_fingers would find now)."""
        powers = np.uint64(1) << np.arange(self.bits, dtype=np.uint64)
        starts = (np.uint64(self.ids[x]) + powers) & np.uint64(self.mask)
        idx = np.searchsorted(self.live_ids, starts, side="left") % len(self.live_ids)
        slots = self.live_slots[idx[::-1]]
        return [int(s) for s in dict.fromkeys(slots.tolist()) if s != x]

    def dist(self, a: int, b: int) -> int:
        return (b - a) & self.mask

    def between(self, a: int, x: int, b: int) -> bool:
        """Whether slot x's id lies in the open arc (a, b) of slot ids."""
        return 0 < self.dist(self.ids[a], self.ids[x]) < self.dist(self.ids[a], self.ids[b])

    # -- events ----------------------------------------------------------------------------------
    def join(self) -> int:
        while True:
            new_id = int(self.rng.integers(0, self.mask, endpoint=True, dtype=np.uint64))
            i = int(np.searchsorted(self.live_ids, np.uint64(new_id)))
            if i == len(self.live_ids) or int(self.live_ids[i]) != new_id:
                break
        x = len(self.ids)
        s = self.true_owner(new_id)
        self.ids.append(new_id)
        self.alive.append(True)
        self.succ.append(([s] + [y for y in self.succ[s] if y != x])[: self.r])
        self.pred.append(None)
        self.live_ids = np.insert(self.live_ids, i, np.uint64(new_id))
        self.live_slots = np.insert(self.live_slots, i, x)
        self.fingers.append(self.true_fingers(x))
        return x

    def fail(self) -> int:
        i = int(self.rng.integers(len(self.live_ids)))
        x = int(self.live_slots[i])
        self.alive[x] = False
        self.live_ids = np.delete(self.live_ids, i)
        self.live_slots = np.delete(self.live_slots, i)
        return x

    def stabilize(self, x: int) -> None:
        """ToN'03 Fig. 6 stabilize + notify + check_predecessor, §V-B's successor list, fix_fingers."""
        live = [y for y in self.succ[x] if self.alive[y]]
        if not live:  # the whole successor list died: fall back on the nearest live finger
            live = sorted((f for f in self.fingers[x] if self.alive[f]),
                          key=lambda f: self.dist(self.ids[x], self.ids[f]))
            if not live:
                return
        s = live[0]
        y = self.pred[s]
        if y is not None and y != x and self.alive[y] and self.between(x, y, s):
            s = y
        self.succ[x] = ([s] + [z for z in self.succ[s] if z != x])[: self.r]
        p = self.pred[s]
        if p is None or not self.alive[p] or self.between(p, x, s):
            self.pred[s] = x
        if self.pred[x] is not None and not self.alive[self.pred[x]]:
            self.pred[x] = None
        self.fingers[x] = self.true_fingers(x)

    def lookup(self, origin: int, k: int) -> tuple[int | None, int, int]:
        """(owner slot or None, hops, timeouts) by the next-hop rule over this node state."""
        cur, hops, timeouts = origin, 0, 0
        avoid: set[int] = set()
        for _ in range(4 * self.bits + 64):
            me = self.ids[cur]
            s = next((y for y in self.succ[cur] if y not in avoid and y != cur), None)
            if s is not None and 0 < self.dist(me, k) <= self.dist(me, self.ids[s]):
                if not self.alive[s]:
                    timeouts += 1
                    avoid.add(s)
                    continue
                return s, hops, timeouts
            limit = self.dist(me, k) or (self.mask + 1)
            best, best_d = None, 0
            for y in self.fingers[cur] + self.succ[cur]:
                d = self.dist(me, self.ids[y])
                if best_d < d < limit and y not in avoid:
                    best, best_d = y, d
            if best is None:
                return None, hops, timeouts
            if not self.alive[best]:
                timeouts += 1
                avoid.add(best)
                continue
            cur, hops = best, hops + 1
        return None, hops, timeouts


def continuous_churn(nodes: int = 500, rate: float = 0.05, stabilize: float = 30.0, duration: float = 3600.0,
                     successors: int = 8, lookup_rate: float = 1.0, seed: int | None = None, bits: int = 64,
                     warmup: float | None = None,
                     progress: Callable[[float], None] | None = None) -> ChurnResult:
    """Run the §6.5 experiment; lookups in the first `warmup` seconds (default 2 S) are not counted."""
    check_churn(nodes, rate, stabilize, duration, lookup_rate)
    rng = np.random.default_rng(seed)
    ring = ChurnRing(nodes, bits, successors, rng)
    warmup = 2 * stabilize if warmup is None else warmup
    events: list[tuple[float, int, int]] = []

    def later(mean: float) -> float:
        return float(rng.exponential(mean))

    for x in range(nodes):
        heapq.heappush(events, (float(rng.uniform(0, stabilize)), STABILIZE, x))
    if rate > 0:
        heapq.heappush(events, (later(1 / rate), JOIN, -1))
        heapq.heappush(events, (later(1 / rate), FAIL, -1))
    heapq.heappush(events, (later(1 / lookup_rate), LOOKUP, -1))
    rows: list[tuple] = []
    joins = failures = 0
    step = duration / 100
    next_report = step
    while events:
        t, kind, x = heapq.heappop(events)
        if t > duration:
            break
        if progress and t >= next_report:
            progress(t / duration)
            next_report += step
        if kind == STABILIZE:
            if ring.alive[x]:
                ring.stabilize(x)
                heapq.heappush(events, (t + float(rng.uniform(0.5, 1.5)) * stabilize, STABILIZE, x))
        elif kind == JOIN:
            x = ring.join()
            joins += 1
            heapq.heappush(events, (t + float(rng.uniform(0.5, 1.5)) * stabilize, STABILIZE, x))
            heapq.heappush(events, (t + later(1 / rate), JOIN, -1))
        elif kind == FAIL:
            if len(ring.live_ids) > 2:
                ring.fail()
                failures += 1
            heapq.heappush(events, (t + later(1 / rate), FAIL, -1))
        else:
            origin = int(ring.live_slots[rng.integers(len(ring.live_slots))])
            k = int(rng.integers(0, ring.mask, endpoint=True, dtype=np.uint64))
            owner, hops, timeouts = ring.lookup(origin, k)
            if t >= warmup:
                truth = ring.true_owner(k)
                rows.append((k, ring.ids[origin], ring.ids[owner] if owner is not None else 0, hops, timeouts,
                             owner == truth, t))
            heapq.heappush(events, (t + later(1 / lookup_rate), LOOKUP, -1))
    if progress:
        progress(1.0)
    if not rows:
        raise RingError(f"no lookup after the {warmup:g} s warm-up: lengthen the duration")
    cols = list(zip(*rows, strict=True))
    right_owner = np.asarray(cols[5], dtype=bool)
    ok = right_owner & (np.asarray(cols[4]) == 0)  # the paper's rule: a timeout ends the lookup
    trace = LookupTrace(np.asarray(cols[0], dtype=np.uint64), np.asarray(cols[1], dtype=np.uint64),
                        np.asarray(cols[2], dtype=np.uint64), np.asarray(cols[3], dtype=np.int32),
                        np.asarray(cols[4], dtype=np.int32), np.full(len(rows), np.nan), ok,
                        np.asarray(cols[6], dtype=np.float64))
    return ChurnResult(rate, stabilize, duration, nodes, len(rows), float(1 - ok.mean()),
                       float(1 - right_owner.mean()),
                       float(trace.hops.mean()), float(trace.timeouts.mean()), joins, failures,
                       len(ring.live_ids), trace)
