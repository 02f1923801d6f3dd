"""`chordpub ring show --png`: the identifier circle as the Chord paper draws it (SIGCOMM'01 Fig. 3):
nodes at their ids, the fingers of one node as chords, keys (here topics) at their ids joined to the
node that owns them, their successor on the circle."""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.figure import Figure  # no pyplot: a file is written, no window or backend involved
from matplotlib.patches import Circle

from dht.ids import key_id

LABELLED_TOPICS = 40  # beyond this many, topics are drawn as dots without names


def position(k: int, bits: int, radius: float = 1.0) -> tuple[float, float]:
    """Clockwise from the top, as the paper draws the circle."""
    angle = math.pi / 2 - 2 * math.pi * k / (1 << bits)
    return radius * math.cos(angle), radius * math.sin(angle)


def radial_label(ax: object, k: int, bits: int, radius: float, text: str, inward: bool = False,
                 **style: object) -> None:
    """A label along the radius, so that neighbours on the circle do not overwrite each other."""
    angle = math.degrees(math.pi / 2 - 2 * math.pi * k / (1 << bits)) % 360
    right = angle < 90 or angle > 270
    ha = ("right" if right else "left") if inward else ("left" if right else "right")
    ax.text(*position(k, bits, radius), text, rotation=angle if right else angle - 180, rotation_mode="anchor",
            ha=ha, va="center", **style)


def draw_ring(infos: list[dict], fingers_of: str, png: Path) -> dict:
    """Draw the ring the walk found; returns how many distinct fingers and topics were drawn."""
    bits = int(infos[0].get("bits") or 64)
    fig = Figure(figsize=(9, 9))
    ax = fig.subplots()
    ax.add_patch(Circle((0, 0), 1.0, fill=False, color="0.7", lw=1))
    for info in infos:
        x, y = position(info["id"], bits)
        me = info["endpoint"] == fingers_of
        ax.plot(x, y, "o", ms=9 if me else 6, color="tab:red" if me else "tab:blue", zorder=3)
        radial_label(ax, info["id"], bits, 1.04, info["endpoint"], fontsize=7)
    source = next(i for i in infos if i["endpoint"] == fingers_of)
    targets = {f["endpoint"]: f["id"] for f in source["fingers"] if f is not None and f["endpoint"] != fingers_of}
    sx, sy = position(source["id"], bits)
    for fid in targets.values():
        tx, ty = position(fid, bits)
        ax.annotate("", xy=(tx, ty), xytext=(sx, sy),
                    arrowprops={"arrowstyle": "->", "color": "tab:red", "alpha": 0.6, "lw": 1})
    topics = [(t, info) for info in infos for t in info.get("topics", [])]
    for topic, owner in topics:
        k = key_id(topic, bits)
        tx, ty = position(k, bits, 0.85)
        ox, oy = position(owner["id"], bits)
        ax.plot([tx, ox], [ty, oy], color="tab:green", lw=0.5, alpha=0.5)
        ax.plot(tx, ty, "s", ms=3, color="tab:green")
        if len(topics) <= LABELLED_TOPICS:
            radial_label(ax, k, bits, 0.82, topic, inward=True, fontsize=6, color="darkgreen")
    ax.set_title(f"{len(infos)} nodes ({bits}-bit ids, clockwise from the top)\nfingers of {fingers_of} "
                 f"(red, {len(targets)} distinct); {len(topics)} topics at their ids -> owners (green)", fontsize=9)
    ax.set_xlim(-1.3, 1.3)
    ax.set_ylim(-1.3, 1.3)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.savefig(png, dpi=110, bbox_inches="tight")
    return {"fingers": len(targets), "topics": len(topics)}
