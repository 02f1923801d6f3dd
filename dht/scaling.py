"""When to add a node to the ring and when to take one away: `chordpub ring autoscale`. Pure: load
reports (dht/load.py) and the clock in, one decision out; starting and stopping processes is
chordpub/autoscale.py's.

Growing splits the hot node's arc where its load divides in two: the new node takes the id of the
median key the hot node owns, so that it takes half of the hot node's records, not a random share of
the ring (a random id lands in the hot arc with probability arc/ring). This is the placement half of
Karger and Ruhl's item balancing (SPAA'04: a light node moves to split a heavy node's items); the
Chord paper's own answer to uneven load, virtual nodes (SIGCOMM'01 §6.2, Fig. 9), spreads every node
and needs no watcher. Shrinking asks the least-loaded node to leave gracefully (ToN'03 §V-D), so its
keys go to its successor and nothing is lost.

One change at a time: a decision is taken only after `patience` looks in a row agree, and never
within `cooldown` seconds of the last change (the ring must settle, keys move, rates re-measure).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dht.load import FIGURES


@dataclass(frozen=True)
class Policy:
    """`high`: a node above it (in `metric`) for `patience` looks makes the ring grow; `low`: the ring's
    mean below it for `patience` looks makes it shrink; never fewer than `min_nodes` nor more than
    `max_nodes`; `cooldown` seconds after a change before the next."""

    high: float
    low: float
    metric: str = "records"
    min_nodes: int = 1
    max_nodes: int = 16
    patience: int = 3
    cooldown: float = 10.0

    def validate(self) -> None:
        """One message for the first thing wrong (ValueError)."""
        if self.metric not in FIGURES:
            raise ValueError(f"--metric must be one of {', '.join(FIGURES)}, got {self.metric!r}")
        if not 0 <= self.low < self.high:
            raise ValueError(f"thresholds out of order: need 0 <= --low < --high, got --low {self.low:g} "
                             f"--high {self.high:g}")
        if not 1 <= self.min_nodes <= self.max_nodes:
            raise ValueError(f"need 1 <= --min <= --max, got --min {self.min_nodes} --max {self.max_nodes}")
        if self.patience < 1:
            raise ValueError(f"--patience must be at least 1 look, got {self.patience}")
        if self.cooldown < 0:
            raise ValueError(f"--cooldown must be 0 or more seconds, got {self.cooldown:g}")


@dataclass(frozen=True)
class Decision:
    """`action`: grow (start a node with id `new_id`, splitting `node`'s arc), shrink (`node` leaves)
    or hold; `reason` in words; `figures`: what made it (the metric's max, min, mean, max/mean, the hottest node; for a
    shrink, the leaving node's `load`)."""

    action: str
    reason: str
    figures: dict
    node: str | None = None
    new_id: int | None = None

    def to_dict(self) -> dict:
        return {"action": self.action, "reason": self.reason, "node": self.node, "new_id": self.new_id,
                **self.figures}


def split_point(predecessor: int | None, node: int, owned: list[int], bits: int) -> int | None:
    """The id that splits `node`'s arc (predecessor, node] in two by load: the median of the key ids
    it owns (a node there owns that key and the ones before it: half, rounded up), or, owning none,
    the arc's midpoint. None when the arc cannot be split (no predecessor known, or nothing between)."""
    if predecessor is None:
        return None
    size = 1 << bits

    def offset(x: int) -> int:
        return (x - predecessor) % size  # 1..arc for ids in the arc

    arc = offset(node) or size
    inside = sorted((k for k in owned if 0 < offset(k) <= arc), key=offset)
    if inside:
        cut = inside[(len(inside) - 1) // 2]
        return None if cut == node else cut
    return None if arc < 2 else (predecessor + arc // 2) % size


@dataclass
class Scaler:
    """Turns looks at the ring's load into decisions under a Policy. `started` lists the nodes this
    scaler added; given the choice between equally light nodes it takes those away first."""

    policy: Policy
    last_change: float | None = None
    hot: dict[str, int] = field(default_factory=dict)  # endpoint -> looks in a row above `high`
    cold: int = 0  # looks in a row with the ring's mean below `low`
    started: list[str] = field(default_factory=list)

    def decide(self, nodes: list[dict], now: float) -> Decision:
        """`nodes`: rows of dht.load.report (endpoint, the metric, split_id). Only the returned grow or
        shrink counts as a change; call `changed` once it is carried out."""
        p = self.policy
        rows = [n for n in nodes if n.get(p.metric) is not None]
        values = [n[p.metric] for n in rows]
        mean = sum(values) / len(values) if values else None
        hottest = max(rows, key=lambda n: n[p.metric], default=None)
        figures = {"nodes": len(nodes), "metric": p.metric, "max": hottest[p.metric] if hottest else None,
                   "min": min(values) if values else None, "mean": mean,
                   "max_over_mean": hottest[p.metric] / mean if hottest and mean else None,
                   "hottest": hottest["endpoint"] if hottest else None}
        above = {n["endpoint"] for n in rows if n[p.metric] > p.high}
        self.hot = {e: self.hot.get(e, 0) + 1 for e in above}
        self.cold = self.cold + 1 if mean is not None and mean < p.low else 0
        if not rows:
            return Decision("hold", f"no node reports {p.metric} yet", figures)
        if self.last_change is not None and now - self.last_change < p.cooldown:
            return Decision("hold", f"cooling down ({p.cooldown - (now - self.last_change):.1f} s left)", figures)
        if hottest["endpoint"] in above:
            looks = self.hot[hottest["endpoint"]]
            if looks < p.patience:
                return Decision("hold", f"{hottest['endpoint']} above {p.high:g} for {looks} of {p.patience} looks",
                                figures)
            if len(nodes) >= p.max_nodes:
                return Decision("hold", f"{hottest['endpoint']} above {p.high:g} but the ring is at --max "
                                        f"{p.max_nodes}", figures)
            if hottest.get("split_id") is None:
                return Decision("hold", f"{hottest['endpoint']}'s arc cannot be split (no predecessor yet, "
                                        "or no id left inside it)", figures)
            return Decision("grow", f"{hottest['endpoint']} above {p.high:g} for {looks} looks: a node at the "
                                    "median of its keys takes half of them", figures,
                            node=hottest["endpoint"], new_id=hottest["split_id"])
        if self.cold:
            if self.cold < p.patience:
                return Decision("hold", f"mean below {p.low:g} for {self.cold} of {p.patience} looks", figures)
            if len(nodes) <= p.min_nodes:
                return Decision("hold", f"mean below {p.low:g} but the ring is at --min {p.min_nodes}", figures)
            order = {e: i for i, e in enumerate(self.started)}
            lightest = min(rows, key=lambda n: (n[p.metric], -order.get(n["endpoint"], -1)))
            return Decision("shrink", f"mean below {p.low:g} for {self.cold} looks: the least-loaded node "
                                      "leaves gracefully", {**figures, "load": lightest[p.metric]},
                            node=lightest["endpoint"])
        return Decision("hold", "within bounds", figures)

    def changed(self, now: float) -> None:
        """A grow or shrink was carried out: start the cool-down, and count anew."""
        self.last_change = now
        self.hot.clear()
        self.cold = 0
