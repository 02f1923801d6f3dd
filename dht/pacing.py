"""How often a quiet ring position runs its rounds.

Chord's stabilize runs every period whether or not anything changed (ToN'03 §IV-C): on an idle ring
almost every round asks the successor what it said last time. A position whose round changes nothing
for QUIET_ROUNDS rounds in a row doubles the gap between its rounds, up to `--quiet-stretch` periods
(1 by default: every period; at most MAX_STRETCH). Any sign
that the ring moved brings it back to a round every period at once (dht/host.py's maintenance thread
sleeps on these, so a quiet position does nothing at all between its rounds) —
- a connection of the process closed (the kernel closes a killed process's sockets, so a neighbour's
  death is seen within a period of the last round, as soon as an unstretched round would have seen it);
- a new node notified it (a predecessor changed), or named itself as its successor (a joining node
  tells its successor's old predecessor, which would otherwise learn of it only at its next round);
- its own round changed its successor list, its predecessor or a finger.

What the stretch delays is the discovery of a peer that fell silent without closing anything (a
partition): up to the stretch in periods instead of one; the expiry of leased record fields, judged at
each round; and, after a burst of joins, a finger that a join far away made stale (measured when the
stretch was new: 16 successive joins at a stretch of 2 or 4 missed the 20-period bound for exact
fingers in 1 run of 4 to 8; measured again on 2026-11-28: every finger exact 3.5-5.1 periods after
the last join in 8 runs at a stretch of 4, idle and loaded). That is why the stretch is for an operator
to choose. Adaptive stabilization in the literature
(Ghinita and Teo, IPDPS'06) tunes the period to the churn it observes; this is the simplest such rule,
with the process's own connection events standing in for the churn estimate.
"""

from __future__ import annotations

import os
import queue

QUIET_ROUNDS = 8  # rounds without a change after which the gap between rounds doubles
MAX_STRETCH = 8  # the longest gap between rounds any node may be given (--quiet-stretch), in periods
LINK_JOBS = ("handover", "stabilize")  # jobs that say a position's links moved: its rounds come every period


class Pacing:
    """One position's stretch: how many periods apart its rounds are now. Pure: no clock, no socket."""

    def __init__(self, quiet_rounds: int = QUIET_ROUNDS, max_stretch: int = MAX_STRETCH) -> None:
        self.quiet_rounds = quiet_rounds
        self.max_stretch = max_stretch
        self.stretch = 1  # periods between rounds
        self.quiet = 0  # rounds without a change since the stretch last changed

    def ran(self, changed: bool) -> int:
        """A round ran; `changed`: it changed the position's links. Returns the periods to the next."""
        if changed:
            self.stretch, self.quiet = 1, 0
        else:
            self.quiet += 1
            if self.quiet >= self.quiet_rounds and self.stretch < self.max_stretch:
                self.stretch, self.quiet = min(self.stretch * 2, self.max_stretch), 0
        return self.stretch

    def wake(self) -> None:
        """Something moved: rounds every period again, starting with one a period after the last."""
        self.stretch, self.quiet = 1, 0


class WakingQueue(queue.Queue):
    """A queue a zmq.Poller can wait on beside sockets: every put makes `fd` readable until `clear()`
    (an eventfd), so that the maintenance thread sleeps until a job, a connection event, or its next
    round, and never wakes just to look."""

    def __init__(self) -> None:
        super().__init__()
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def _put(self, item: object) -> None:
        super()._put(item)
        if self.fd >= 0:  # (closed once the threads that put are gone; a late put only queues)
            os.eventfd_write(self.fd, 1)

    def clear(self) -> None:
        """Make `fd` unreadable again (before taking what the queue holds, so that no put is missed)."""
        try:
            os.eventfd_read(self.fd)
        except (BlockingIOError, OSError):
            pass  # nothing was put since the last clear

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)
