"""A figure over several runs: its median and its run-to-run range, as every headline in BENCHMARKS.md
gives it (this machine's speed varies from run to run; one run's figure is not a result)."""

from __future__ import annotations

from statistics import median


def spread(values: list[float]) -> dict:
    """{"median", "min", "max", "runs"} of `values`."""
    if not values:
        raise ValueError("no runs")
    return {"median": float(median(values)), "min": float(min(values)), "max": float(max(values)),
            "runs": len(values)}


def said(values: list[float], fmt: str = ".2f") -> str:
    """"0.70 (0.66-0.74 over 3 runs)": the median, then the range."""
    s = spread(values)
    if s["runs"] == 1:
        return f"{s['median']:{fmt}} (one run)"
    return f"{s['median']:{fmt}} ({s['min']:{fmt}}-{s['max']:{fmt}} over {s['runs']} runs)"


def verdict(values: list[float], ok) -> str:  # noqa: ANN001 - a predicate on one figure
    """"met" when every run meets the goal, "NOT met" when none does, else "met in k of n runs"."""
    hits = sum(bool(ok(v)) for v in values)
    return "met" if hits == len(values) else "NOT met" if hits == 0 else f"met in {hits} of {len(values)} runs"
