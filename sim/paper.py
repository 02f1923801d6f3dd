"""The Chord paper's simulation results (Stoica et al., SIGCOMM 2001, §6), ours beside theirs.

Each figure is a list of independent points (one ring, one parameter value), so a point is a task:
`run` maps `run_point` over them with the builtin map, or with any mapper of the same shape, e.g.
Spark's (`chordpub sim paper --engine spark`). The paper's values come from its text:
- Fig. 8 (§6.2), 10^4 nodes: at 5x10^5 keys the 99th percentile is 4.6x the mean, the 1st is 0
  (the paper also notes a maximum of about 9.1x the mean: the busiest node of one ring, which we
  average over the trials' rings);
- Fig. 9: r virtual nodes per node take the 99th percentile from 4.8x to 1.6x the mean (r = 1 -> 20)
  and the 1st percentile from 0 to 0.5x;
- Fig. 10 (§6.3): the mean path length is about (1/2) log2 N, N = 2^3 .. 2^14 (fingers and one
  successor, the paper's setting);
- Fig. 11 (§6.4): with a fraction p of the nodes failed and the ring stabilized, about a fraction p
  of the lookups fail (their keys were on the failed nodes);
- Fig. 12 (§6.5): 500 nodes, joins and failures at rate R each, stabilization every 30 s on
  average, lookups not retried: about 3% fail at R = 0.1/s (3 failures per stabilization round).
`within` states whether ours are inside the tolerance we hold ourselves to (None: the paper gives no
value at that point).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from sim.churn import continuous_churn
from sim.failures import simultaneous_failures
from sim.load import load
from sim.lookup import LookupTrace, lookups, trace_of
from sim.ring import random_ring

FIGURES = ("8", "9", "10", "11", "12")
SCALES: dict[str, dict] = {
    "small": {"fig8": {"nodes": 10_000, "keys": [100_000, 500_000, 1_000_000], "trials": 2},
              "fig9": {"nodes": 10_000, "keys": 1_000_000, "virtual": [1, 2, 5, 10, 20], "trials": 1},
              "fig10": {"exponents": list(range(3, 13)), "lookups": 20_000},
              "fig11": {"nodes": 10_000, "keys": 100_000, "fail": [0.1, 0.2, 0.3, 0.4, 0.5], "lookups": 50_000},
              "fig12": {"nodes": 500, "rates": [0.01, 0.05, 0.1], "stabilize": 30.0, "duration": 1800.0,
                        "lookup_rate": 4.0}},
    "paper": {"fig8": {"nodes": 10_000, "keys": [k * 100_000 for k in range(1, 11)], "trials": 20},
              "fig9": {"nodes": 10_000, "keys": 1_000_000, "virtual": [1, 2, 5, 10, 20], "trials": 5},
              "fig10": {"exponents": list(range(3, 15)), "lookups_per_node": 100},
              "fig11": {"nodes": 10_000, "keys": 1_000_000, "fail": [0.1, 0.2, 0.3, 0.4, 0.5],
                        "lookups": 1_000_000},
              "fig12": {"nodes": 500, "rates": [0.01 * i for i in range(1, 11)], "stabilize": 30.0,
                        "duration": 7200.0, "lookup_rate": 1.0}},
}


@dataclass(frozen=True)
class Point:
    figure: str
    x: float  # the figure's x value: keys, virtual nodes, N, p or R
    params: tuple  # sorted (name, value) pairs
    seed: int


@dataclass
class PointResult:
    figure: str
    x: float
    metrics: dict
    trace: LookupTrace | None = field(default=None, repr=False)
    nodes: int | None = None


def points(scale: str = "small", seed: int = 0, figures: Iterable[str] = FIGURES) -> list[Point]:
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; use {' or '.join(SCALES)}")
    s = SCALES[scale]
    out: list[Point] = []

    def add(fig: str, x: float, **params: object) -> None:
        out.append(Point(fig, float(x), tuple(sorted(params.items())), seed + len(out)))

    wanted = set(figures)
    if "8" in wanted:
        for k in s["fig8"]["keys"]:
            add("8", k, nodes=s["fig8"]["nodes"], keys=k, trials=s["fig8"]["trials"])
    if "9" in wanted:
        for v in s["fig9"]["virtual"]:
            add("9", v, nodes=s["fig9"]["nodes"], keys=s["fig9"]["keys"], virtual=v, trials=s["fig9"]["trials"])
    if "10" in wanted:
        f = s["fig10"]
        for e in f["exponents"]:
            add("10", 2 ** e, nodes=2 ** e, lookups=f.get("lookups") or f["lookups_per_node"] * 2 ** e)
    if "11" in wanted:
        f = s["fig11"]
        for p in f["fail"]:
            add("11", p, nodes=f["nodes"], keys=f["keys"], fail=p, lookups=f["lookups"])
    if "12" in wanted:
        f = s["fig12"]
        for r in f["rates"]:
            add("12", round(r, 4), nodes=f["nodes"], rate=round(r, 4), stabilize=f["stabilize"],
                duration=f["duration"], lookup_rate=f["lookup_rate"])
    return out


def run_point(point: Point) -> PointResult:
    """One point of one figure: a ring built and measured from scratch (a self-contained task)."""
    p = dict(point.params)
    if point.figure in ("8", "9"):
        s = load(p["nodes"], p["keys"], p.get("virtual", 1), seed=point.seed, trials=p["trials"]).summary()
        mean = s["mean"]
        return PointResult(point.figure, point.x, {**s, "p1_over_mean": s["p1"] / mean,
                                                   "p99_over_mean": s["p99"] / mean,
                                                   "max_over_mean": s["max_per_ring"] / mean})
    if point.figure == "10":
        ring = random_ring(p["nodes"], seed=point.seed, successors=1)
        batch = lookups(ring, p["lookups"], seed=point.seed + 1)
        p1, p50, p99 = np.percentile(batch.hops, [1, 50, 99])
        return PointResult("10", point.x, {"nodes": p["nodes"], "lookups": p["lookups"],
                                           "mean_hops": float(batch.hops.mean()), "p1_hops": float(p1),
                                           "p50_hops": float(p50), "p99_hops": float(p99)},
                           trace_of(ring, batch), p["nodes"])
    if point.figure == "11":
        r = simultaneous_failures(p["nodes"], p["keys"], p["fail"], lookup_count=p["lookups"], seed=point.seed)
        return PointResult("11", point.x, r.summary(), r.trace, p["nodes"])
    r = continuous_churn(p["nodes"], p["rate"], p["stabilize"], p["duration"], lookup_rate=p["lookup_rate"],
                         seed=point.seed)
    return PointResult("12", point.x, r.summary(), r.trace, p["nodes"])


def _row(fig: str, x: float, metric: str, ours: float, paper: float | None, ok: bool | None) -> dict:
    return {"figure": fig, "x": float(x), "metric": metric, "ours": round(float(ours), 4),
            "paper": None if paper is None else round(float(paper), 4), "within": None if ok is None else bool(ok)}


def compare(results: list[PointResult]) -> list[dict]:
    """The paper's values beside ours, point by point, with whether ours are within tolerance."""
    rows: list[dict] = []
    by_fig: dict[str, list[PointResult]] = {}
    for r in sorted(results, key=lambda r: (int(r.figure), r.x)):
        by_fig.setdefault(r.figure, []).append(r)
    for r in by_fig.get("8", []):
        m = r.metrics
        at = r.x == 500_000
        rows.append(_row("8", r.x, "p99/mean", m["p99_over_mean"], 4.6 if at else None,
                         abs(m["p99_over_mean"] - 4.6) <= 0.4 if at else None))
        rows.append(_row("8", r.x, "p1/mean", m["p1_over_mean"], 0.0 if at else None, m["p1"] == 0 if at else None))
        rows.append(_row("8", r.x, "max/mean", m["max_over_mean"], 9.1 if at else None, None))
    for r in by_fig.get("9", []):
        m, v = r.metrics, r.x
        ref99 = {1: 4.8, 20: 1.6}.get(int(v))
        rows.append(_row("9", v, "p99/mean", m["p99_over_mean"], ref99, m["p99_over_mean"] <= 1.9 if v == 20 else None))
        rows.append(_row("9", v, "p1/mean", m["p1_over_mean"], {1: 0.0, 20: 0.5}.get(int(v)), None))
    fig10 = by_fig.get("10", [])
    for r in fig10:
        half = 0.5 * np.log2(r.x)
        rows.append(_row("10", r.x, "mean hops", r.metrics["mean_hops"], round(half, 3),
                         abs(r.metrics["mean_hops"] - half) <= 1))
    if len(fig10) >= 2:
        slope = np.polyfit(np.log2([r.x for r in fig10]), [r.metrics["mean_hops"] for r in fig10], 1)[0]
        rows.append(_row("10", 0, "hops per doubling of N", slope, 0.5, abs(slope - 0.5) <= 0.05))
    for r in by_fig.get("11", []):
        rows.append(_row("11", r.x, "failed lookups", r.metrics["failed_lookups"], r.x,
                         abs(r.metrics["failed_lookups"] - r.x) <= 0.02))
    for r in by_fig.get("12", []):
        f = r.metrics["failed_lookups"]
        ok = f <= 0.015 if r.x <= 0.01 else (0.01 <= f <= 0.06 if abs(r.x - 0.1) < 1e-9 else None)
        rows.append(_row("12", r.x, "failed lookups", f, 0.03 if abs(r.x - 0.1) < 1e-9 else None, ok))
    return rows


Mapper = Callable[[Callable[[Point], PointResult], list[Point]], Iterable[PointResult]]


def run(scale: str = "small", seed: int = 0, figures: Iterable[str] = FIGURES,
        mapper: Mapper | None = None) -> tuple[list[PointResult], list[dict]]:
    """Every point of the chosen figures (through `mapper`), and the comparison table."""
    todo = points(scale, seed, figures)
    results = list((mapper or map)(run_point, todo))
    return results, compare(results)
