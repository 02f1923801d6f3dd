"""How many messages a subscriber was owed, got and lost: the one definition (docs/contracts.md,
"Accounting") behind `sub --json`, the demo's table and `chordpub analyze`.

Per (publisher, subscriber) pair of a topic, the subscriber is owed the publisher's sequence numbers
from `first_owed` (1, or where a running publisher stood when a best-effort subscriber joined it,
as the subscriber writes in every delivery row) to the last one known sent (the highest delivered,
or the publisher's own sent trace when the counting side has it). Then
    expected  = last - first_owed + 1
    delivered = distinct owed numbers that arrived (recovered: of them, those that came from history)
    lost      = expected - delivered
and duplicates are arrivals beyond the first of a number. A message sent after the subscriber
subscribed but before its connection to the publisher was made (the slow-joiner effect) is owed,
so it is lost unless recovered. Pure: rows in, figures out; Spark computes the same in
traces/spark.py.
"""

from __future__ import annotations

from collections.abc import Iterable


def pair_figures(rows: Iterable[dict], last_sent: int | None = None) -> dict[str, int]:
    """Figures of one pair from its delivery rows (seq, recovered, first_owed)."""
    seqs: set[int] = set()
    recovered: set[int] = set()
    arrivals = 0
    owed_from: int | None = None
    for r in rows:
        arrivals += 1
        seqs.add(r["seq"])
        if r.get("recovered"):
            recovered.add(r["seq"])
        if r.get("first_owed") is not None:
            owed_from = max(owed_from or 0, r["first_owed"])
    lo = owed_from if owed_from is not None else (min(seqs) if seqs else 1)
    hi = max(max(seqs, default=0), last_sent or 0)
    owed = {s for s in seqs if lo <= s <= hi}
    expected = max(hi - lo + 1, 0)
    return {"expected": expected, "delivered": len(owed), "lost": expected - len(owed),
            "recovered": len(recovered & owed), "duplicates": arrivals - len(seqs)}


def add(total: dict[str, int], figures: dict[str, int]) -> dict[str, int]:
    for k, v in figures.items():
        total[k] = total.get(k, 0) + v
    return total
