"""Removed members that stop campaigning: the removed-server problem of Raft (Ongaro's thesis §4.2.3).

A member removed from a group while it did not hear (the leader committed the change without it) still
holds the old configuration and stands for election in it forever. Pre-vote and leases keep it from
disturbing the group (dht/raft.py), but its ticks between campaigns cost its process, and each campaign
wakes the quiet members it asks: a ring whose groups had ever moved was never all quiet (16 idle nodes:
a third of the processes held such a group, ticking ten times a second).

So a member whose campaigns keep failing (CAMPAIGNS_BEFORE_BACKOFF in a row, no leader heard between them)
and whom the ring does not want in the group (dht/group_placement.py) waits FIRST_WAIT, doubling to
MAX_WAIT, before it ticks the group again; a leader's message wakes it at once, a vote request does not.
Only liveness rests on it: a member the ring wants never waits, one that waits still votes, and one
that waits campaigns again after at most MAX_WAIT. Pure: the caller gives the time.
"""

from __future__ import annotations

from collections.abc import Callable

CAMPAIGNS_BEFORE_BACKOFF = 2  # failed campaigns in a row after which an unwanted member waits between them
FIRST_WAIT = 2.0  # seconds such a member first waits before it ticks the group again ...
MAX_WAIT = 16.0  # ... doubling up to this


class CampaignBackoff:
    """Per group (arc): campaigns begun in a row with no leader heard, and the wait of one that backs off."""

    def __init__(self, uniform: Callable[[float, float], float]) -> None:
        self.uniform = uniform  # jitter, so that a stale configuration's members do not wake in step
        self.campaigns: dict[int, int] = {}
        self.waits: dict[int, tuple[float | None, float]] = {}  # arc -> (resume at, or None once resumed; wait)

    def heard_leader(self, arc: int) -> None:
        """The group has a leader (this member, or one it hears): the count starts over. Standing as a
        candidate is no success: removed members of one old configuration grant each other pre-votes."""
        self.campaigns.pop(arc, None)
        self.waits.pop(arc, None)

    def campaigned(self, arc: int, wanted: list[str] | None, me: str, now: float) -> str | None:
        """A pre-vote campaign began. "ask": learn whom the ring wants in the group (the next failed campaign
        decides); "wait": stop ticking the group until `due()` names it; None: go on."""
        failed = self.campaigns[arc] = self.campaigns.get(arc, 0) + 1
        if failed < CAMPAIGNS_BEFORE_BACKOFF:
            return None
        if wanted is None:
            return "ask"
        if me in wanted:
            return None
        _, last = self.waits.get(arc, (None, FIRST_WAIT / 2))
        wait = min(2 * last, MAX_WAIT)
        self.waits[arc] = (now + wait * self.uniform(0.9, 1.1), wait)
        return "wait"

    def waiting(self, arc: int) -> bool:
        """Whether the group backs off (waits, or resumed without a leader heard since)."""
        return arc in self.waits

    def next_resume(self) -> float | None:
        return min((at for at, _ in self.waits.values() if at is not None), default=None)

    def due(self, now: float) -> list[int]:
        """The groups whose wait is over: they tick again."""
        out = []
        for arc, (at, wait) in self.waits.items():
            if at is not None and at <= now:
                self.waits[arc] = (None, wait)
                out.append(arc)
        return out
