"""Proximity neighbour selection for the live node: round-trip estimates and the finger choice.

Chord's finger i of node n may be any node of [n + 2^i, n + 2^(i+1)) without costing a hop, so a
node can take the nearest of a few (Gummadi et al., SIGCOMM'03, §4, "proximity neighbour
selection"; Dabek et al., NSDI'04, §4.2, with 16 samples and measured round trips). The samples are
the interval's first node and its successors, up to K, as the simulator takes them
(sim/kernels.py's pns_pick), so both pick the same finger on the same network. Distances are this
node's own round trips: every RPC it makes feeds a per-peer window of recent samples whose minimum is
the distance (delay on a path only ever adds to its propagation time: a busy machine or a queue makes
a sample late, never early, so the minimum finds the path and an average finds the load); a candidate
never heard from is pinged once, and nothing else is sent.

Pure: no sockets and no clocks (the caller passes measured seconds).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Sequence

from dht.ids import distance, process_of
from dht.routing import Peer

WINDOW = 8  # recent round trips kept per peer: the distance is their minimum
MAX_PEERS = 1024  # averages kept, least recently measured dropped first
DOWN_ROUNDS = 20  # a peer that did not answer is no PNS candidate for this many rounds
SWITCH_MARGIN = 0.9  # a finger is replaced only by a candidate at least 10% nearer (no flapping) ...
SWITCH_MIN_MS = 0.5  # ... and at least this much: on a LAN or loopback every peer is as near as any
DEFAULT_SAMPLES = 8  # the measured knee: the interval's first node and a successor list's worth (r = 8)


class RoundTrips:
    """The round trip to each peer process, in milliseconds: the least of its last `window` samples;
    and the peers that did not answer lately (a PNS choice skips them); both bounded. `now` is the
    caller's round counter. The ring positions of one process ("host:port/i", dht/ids.py) share its
    figures: one path, one fate."""

    def __init__(self, window: int = WINDOW, max_peers: int = MAX_PEERS, down_rounds: int = DOWN_ROUNDS) -> None:
        self.window = window
        self.max_peers = max_peers
        self.down_rounds = down_rounds
        self._ms: OrderedDict[str, deque[float]] = OrderedDict()
        self._down: OrderedDict[str, int] = OrderedDict()  # endpoint -> round it last failed to answer
        self._misses: OrderedDict[str, int] = OrderedDict()  # endpoint -> calls unanswered in a row
        self.now = 0

    def observe(self, endpoint: str, seconds: float | None) -> None:
        """A call's round trip; None: the peer did not answer (its average is dropped)."""
        endpoint = process_of(endpoint)
        if seconds is None:
            self._ms.pop(endpoint, None)
            self._down.pop(endpoint, None)
            self._down[endpoint] = self.now
            self._misses[endpoint] = self._misses.pop(endpoint, 0) + 1
            while len(self._down) > self.max_peers:
                self._down.popitem(last=False)
            while len(self._misses) > self.max_peers:
                self._misses.popitem(last=False)
            return
        self._down.pop(endpoint, None)
        self._misses.pop(endpoint, None)
        samples = self._ms.pop(endpoint, None) or deque(maxlen=self.window)
        samples.append(seconds * 1000.0)
        self._ms[endpoint] = samples
        while len(self._ms) > self.max_peers:
            self._ms.popitem(last=False)

    def get(self, endpoint: str) -> float | None:
        samples = self._ms.get(process_of(endpoint))
        return min(samples) if samples else None

    def misses(self, endpoint: str) -> int:
        """Calls to the peer that went unanswered in a row, up to now."""
        return self._misses.get(process_of(endpoint), 0)

    def down(self, endpoint: str) -> bool:
        """Whether the peer failed to answer within the last `down_rounds` rounds."""
        failed = self._down.get(process_of(endpoint))
        return failed is not None and self.now - failed < self.down_rounds

    def __len__(self) -> int:
        return len(self._ms)


def interval_candidates(me: int, level: int, bits: int, first: Peer, following: Sequence[Peer],
                        k: int) -> list[Peer]:
    """The PNS samples for finger `level`: `first` (the interval's first node) and the nodes that
    follow it, while they stay in [me + 2^level, me + 2^(level+1)), at most k. An empty interval (first
    lies beyond it) gives [first]: plain Chord's finger."""
    start, end = 1 << level, 1 << (level + 1)  # the interval, as distances from me
    out: list[Peer] = []
    for p in [first, *following]:
        d = distance(me, p.id, bits)
        if p.id == me or (out and not start <= d < end) or p in out:
            break
        out.append(p)
        if len(out) >= k or d >= end:
            break
    return out


def choose(candidates: Sequence[Peer], rtt: Callable[[Peer], float | None], current: Peer | None = None) -> Peer:
    """The candidate with the lowest round trip (the first of equals; unmeasured ones last). The
    current finger stays unless a candidate is clearly nearer (SWITCH_MARGIN and SWITCH_MIN_MS), so
    that noise in the averages does not make the table flap."""
    measured = [(ms, i, p) for i, p in enumerate(candidates) if (ms := rtt(p)) is not None]
    if not measured:
        return candidates[0]
    best_ms, _, best = min(measured)
    if current is not None and current in candidates and current != best:
        now = rtt(current)
        if now is not None and (best_ms > SWITCH_MARGIN * now or now - best_ms < SWITCH_MIN_MS):
            return current
    return best
