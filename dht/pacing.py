"""How often a quiet ring position runs its rounds.

Chord's stabilize runs every period whether or not anything changed (ToN'03 §IV-C): on an idle ring
almost every round asks the successor what it said last time. A position whose round changes nothing
for QUIET_ROUNDS rounds in a row doubles the gap between its rounds, up to `--quiet-stretch` periods
(QUIET_STRETCH by default; 1: every period). Any sign that the ring moved brings it back to a round
every period at once (dht/host.py's maintenance thread sleeps on these, so a quiet position does
nothing at all between its rounds) —
- a connection of its maintenance to a neighbour closed: a successor or finger it calls, or the
  predecessor it watches (the kernel closes a killed process's sockets, so a neighbour's death is seen
  within a period of the last round). Connections *to* the node say nothing: clients come and go;
- a call of its round went unanswered (a peer cut off by a partition closes nothing);
- a new node notified it (a predecessor changed), named itself as its successor (a joining node tells
  its successor's old predecessor), or announced that it begins one of its finger intervals
  (dht/fingers.py `announce_join`);
- its own round changed its successor list, its predecessor or a finger.

A stabilize tells the successor how many periods its next round may be away (`every`), so the
successor pings a silent predecessor after 1.5 of those, not after a fixed time. What the stretch
delays is the first sight of a peer that fell silent without closing anything (a partition): up to
the stretch in periods instead of one; and the expiry of leased record fields, judged at each round.
At the default, an idle node costs a quarter to two fifths of what it costs unstretched (`benchmarks/idle.py`,
BENCHMARKS.md). Adaptive stabilization in the literature (Ghinita and Teo, IPDPS'06) tunes the period
to the churn it observes; this is the simplest such rule, with the process's own connection events
standing in for the churn estimate.
"""

from __future__ import annotations

import os
import queue

QUIET_ROUNDS = 8  # rounds without a change after which the gap between rounds doubles
MAX_STRETCH = 8  # the longest gap between rounds any node may be given (--quiet-stretch), in periods
QUIET_STRETCH = MAX_STRETCH  # the default --quiet-stretch
LINK_JOBS = ("handover", "stabilize", "fingers")  # jobs that say a position's links moved: its rounds come every period


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

    def next_if_quiet(self) -> int:
        """The periods to the round after the next if the next changes nothing (a neighbour's bound)."""
        if self.quiet + 1 >= self.quiet_rounds:
            return min(self.stretch * 2, self.max_stretch)
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
