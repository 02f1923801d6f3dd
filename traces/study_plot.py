"""The study report's figure: latency p50 and p99 against publishers × subscribers per mode (log
scales), and the latency CDFs of every point, one colour per mode."""

from __future__ import annotations

from pathlib import Path

COLORS = {"direct": "tab:blue", "relay": "tab:red"}


def series_key(point: dict, varying: list[str]) -> str:
    """One line per mode and per value of every other varying axis except pubs and subs."""
    others = [k for k in varying if k not in ("pubs", "subs", "mode")]
    return " ".join([str(point["mode"])] + [f"{k}={point[k]}" for k in others])


def draw(report: dict, varying: list[str], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [p for p in report["points"] if p.get("latency_p50_ms") is not None]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    lines: dict[str, list[dict]] = {}
    for p in points:
        lines.setdefault(series_key(p, varying), []).append(p)
    for ax, q, title in ((axes[0], "latency_p50_ms", "p50"), (axes[1], "latency_p99_ms", "p99")):
        for key, ps in sorted(lines.items()):
            by_load: dict[int, list[float]] = {}
            for p in ps:
                by_load.setdefault(p["pubs"] * p["subs"], []).append(p[q])
            xs = sorted(by_load)
            ax.plot(xs, [sum(by_load[x]) / len(by_load[x]) for x in xs], "o-", label=key,
                    color=COLORS.get(key.split()[0]), alpha=0.9 if key in COLORS else 0.6)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("publishers × subscribers")
        ax.set_ylabel(f"latency {title} (ms)")
        ax.set_title(f"delivery latency {title}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax = axes[2]
    steps = None
    for curve in report.get("cdf", []):
        q = curve["quantiles_ms"]
        steps = [i / (len(q) - 1) for i in range(len(q))]
        ax.plot(q, steps, color=COLORS.get(curve["mode"], "grey"), alpha=0.5, linewidth=1)
    for mode, color in COLORS.items():
        ax.plot([], [], color=color, label=mode)
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("fraction of deliveries")
    ax.set_title("latency CDF, one line per point" if steps else "no deliveries")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
