"""The five patterns austinjhunt's performance study reported (../shared/reference), checked on a
study report's points. Pure: numbers in, verdicts with their numbers out.

1. direct dissemination is faster than the broker (relay);
2. direct latency is spread evenly, the broker's has large outliers;
3. latency grows with the number of publishers and subscribers, in both modes;
4. it grows faster with the broker;
5. the growth is non-linear ("maybe quadratic", untested there).

Growth is fitted as latency = a + c·(pubs × subs)^b (scipy's curve_fit): `a` the latency of an
unloaded path, `b` the exponent, with a 95% interval from the fit's covariance (Student t). b = 1 is
linear in pubs × subs, which is quadratic in N when pubs = subs = N; b = 0.5 is linear in N.
"""

from __future__ import annotations

import math
from statistics import median

import numpy as np

MODES = ("direct", "relay")


def fit_growth(x: list[float], y: list[float]) -> dict | None:
    """latency = a + c·x^b by least squares; b with its 95% interval, and the log-log slope of the
    whole latency (with its interval) as a plainer second opinion. None with fewer than 4 points or
    fewer than 3 distinct loads."""
    from scipy import optimize, stats

    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.size < 4 or np.unique(xs).size < 3:
        return None
    loglog = stats.linregress(np.log(xs), np.log(ys))
    t2 = stats.t.ppf(0.975, xs.size - 2)
    out = {"points": int(xs.size), "loglog_slope": float(loglog.slope),
           "loglog_se": float(loglog.stderr),
           "loglog_ci": [float(loglog.slope - t2 * loglog.stderr), float(loglog.slope + t2 * loglog.stderr)],
           "loglog_r2": float(loglog.rvalue ** 2)}
    try:
        (a, c, b), cov = optimize.curve_fit(lambda v, a, c, b: a + c * v ** b, xs, ys,
                                            p0=(float(ys.min()), max(float(ys.max() - ys.min()), 1e-3) / xs.max(), 1.0),
                                            bounds=([0.0, 0.0, 0.0], [np.inf, np.inf, 4.0]), maxfev=20000)
        se = float(math.sqrt(cov[2][2])) if np.isfinite(cov[2][2]) else math.inf
    except (RuntimeError, ValueError):
        a = c = b = se = math.nan
    t3 = stats.t.ppf(0.975, xs.size - 3) if xs.size > 3 else math.inf
    out.update({"base_ms": float(a), "scale": float(c), "exponent": float(b),
                "exponent_ci": [float(b - t3 * se), float(b + t3 * se)]})
    return out


def by_axis(points: list[dict]) -> dict | None:
    """log p50 = a + bp·log pubs + bs·log subs (least squares): which of the two the latency follows,
    each exponent with its 95% interval. None without enough distinct points."""
    from scipy import stats

    if len(points) < 5 or len({p["pubs"] for p in points}) < 2 or len({p["subs"] for p in points}) < 2:
        return None
    X = np.column_stack([np.ones(len(points)), np.log([p["pubs"] for p in points]),
                         np.log([p["subs"] for p in points])])
    y = np.log([p["latency_p50_ms"] for p in points])
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    dof = len(points) - 3
    if dof < 1:
        return None
    resid = y - X @ coef
    cov = (resid @ resid / dof) * np.linalg.inv(X.T @ X)
    t = stats.t.ppf(0.975, dof)
    return {name: [_r(coef[i]), _r(coef[i] - t * math.sqrt(cov[i][i])), _r(coef[i] + t * math.sqrt(cov[i][i]))]
            for i, name in ((1, "pubs"), (2, "subs"))}


def _by_mode(points: list[dict]) -> dict[str, list[dict]]:
    return {m: [p for p in points if p.get("mode") == m and p.get("latency_p50_ms") is not None] for m in MODES}


def _pairs(points: list[dict]) -> list[tuple[dict, dict]]:
    """(direct, relay) points with every other parameter equal."""
    def key(p: dict) -> tuple:
        return tuple(sorted((k, str(v)) for k, v in p.items() if k in PARAMS and k != "mode"))

    relay = {key(p): p for p in points if p.get("mode") == "relay"}
    return [(d, relay[key(d)]) for d in points if d.get("mode") == "direct" and key(d) in relay]


PARAMS = ("pubs", "subs", "topics", "topics_per_pub", "topics_per_sub", "mode", "topo", "delay", "rate", "size",
          "dht")


def patterns(points: list[dict]) -> dict:
    """{"1".."5": {"pattern", "holds": bool | None, ...numbers}, "fits": {mode: fit}} (None: cannot tell)."""
    modes = _by_mode(points)
    pairs = [(d, r) for d, r in _pairs(points) if d.get("latency_p50_ms") and r.get("latency_p50_ms")]
    fits = {m: fit_growth([p["pubs"] * p["subs"] for p in ps], [p["latency_p50_ms"] for p in ps])
            for m, ps in modes.items()}
    fits99 = {m: fit_growth([p["pubs"] * p["subs"] for p in ps], [p["latency_p99_ms"] for p in ps])
              for m, ps in modes.items()}
    out: dict = {"fits_p50": fits, "fits_p99": fits99}

    ratios = [r["latency_p50_ms"] / d["latency_p50_ms"] for d, r in pairs]
    share = sum(x > 1 for x in ratios) / len(ratios) if ratios else None
    out["1"] = {"pattern": "direct is faster than relay", "pairs": len(pairs),
                "direct_faster": sum(x > 1 for x in ratios),
                "relay_over_direct_p50_median": round(median(ratios), 3) if ratios else None,
                "holds": None if share is None else (True if share >= 0.8 else False if share <= 0.5 else None)}

    spread = {m: [p["latency_p99_ms"] / p["latency_p50_ms"] for p in ps if p.get("latency_p99_ms")]
              for m, ps in modes.items()}
    tail = {m: round(median(v), 3) if v else None for m, v in spread.items()}
    excess = tail["relay"] / tail["direct"] if None not in tail.values() else None
    out["2"] = {"pattern": "direct is spread evenly, relay has large outliers", "p99_over_p50_median": tail,
                "relay_over_direct": _r(excess),  # a tail 20% heavier counts; within 10%, they are alike
                "holds": None if excess is None else (True if excess >= 1.2 else False if excess < 1.1 else None)}

    def grows(f: dict | None) -> bool | None:
        if f is None:
            return None
        lo, hi = f["loglog_ci"]
        return True if lo > 0 else False if hi < 0.05 else None  # flat within its interval: it does not grow

    verdicts3 = [grows(f) for f in fits.values()]
    out["3"] = {"pattern": "latency grows with publishers x subscribers in both modes",
                "loglog_slope": {m: _r(f and f["loglog_slope"]) for m, f in fits.items()},
                "loglog_ci": {m: f and [_r(v) for v in f["loglog_ci"]] for m, f in fits.items()},
                "by_axis": {m: by_axis(ps) for m, ps in modes.items()},
                "holds": True if all(v is True for v in verdicts3) else False if False in verdicts3 else None}

    d, r = fits["direct"], fits["relay"]
    faster, z = None, None
    if d is not None and r is not None:
        se = math.hypot(d["loglog_se"], r["loglog_se"])
        z = (r["loglog_slope"] - d["loglog_slope"]) / se if se > 0 else None
        faster = None if z is None else (True if z > 1.96 else False if z < -1.96 else None)
    out["4"] = {"pattern": "latency grows faster with relay than with direct",
                "slope_difference": _r(r["loglog_slope"] - d["loglog_slope"]) if d and r else None,
                "z": _r(z), "holds": faster}

    verdicts = {}
    for m, f in fits.items():
        if f is None or not math.isfinite(f["exponent_ci"][0]):
            verdicts[m] = None
            continue
        lo, hi = f["exponent_ci"]
        shape = ("super-linear" if lo > 1 else "sub-linear" if hi < 1
                 else "linear" if hi - lo <= 1 else "cannot tell")
        verdicts[m] = {"exponent": _r(f["exponent"]), "ci": [_r(lo), _r(hi)], "shape": shape,
                       "quadratic": bool(lo <= 2 <= hi) and shape != "cannot tell"}
    shapes = [v and v["shape"] for v in verdicts.values()]
    out["5"] = {"pattern": "the growth is non-linear (maybe quadratic)", "per_mode": verdicts,
                "holds": (True if any(s in ("super-linear", "sub-linear") for s in shapes)
                          else False if all(s == "linear" for s in shapes) else None)}
    return out


def _r(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 3)
