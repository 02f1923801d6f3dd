"""A subscription's statistics in fixed memory, however long it runs.

A subscriber left at a publisher's full rate receives millions of messages; keeping one latency or
one sequence number per message grew a process by 900 MB in 70 s. Here:
- `LatencyHistogram`: counts in log-spaced buckets (2% wide, 1 µs to ~17 min: 1045 buckets), so a
  quantile is known within 2% of its value, and the memory is 8 KiB whatever the count;
- `SeqWindow`: which sequence numbers of one publisher were seen, as the contiguous prefix plus a
  bounded set above it, so duplicates and gaps are counted exactly while reordering stays within
  the window (beyond twice the window, the oldest missing numbers are given up as lost).
Pure: no sockets, no clocks.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from itertools import accumulate

_BASE = 1.02
_MIN_MS = 1e-3
_LOG_BASE = math.log(_BASE)
_BUCKETS = int(math.log(1e6 / _MIN_MS) / _LOG_BASE) + 2  # up to 10^6 ms


_INV_MIN = 1.0 / _MIN_MS
_INV_LOG_BASE = 1.0 / _LOG_BASE
_log = math.log


class LatencyHistogram:
    """Latencies in milliseconds; bucket i holds [MIN * BASE^(i-1), MIN * BASE^i), bucket 0 all below.
    The counts are a Python list: one increment per message costs less there than in a numpy array or a
    dict. It holds only the buckets from the lowest to the highest a latency fell in (`counts[j]` is
    bucket `low + j`): a client following 10,000 topics no message has come on yet holds 10,000 empty
    lists, not 10,000 of 1,048 slots that the garbage collector walks again and again (it took 4.4 of
    6.4 s of a `subscribe_many` of 10,000 topics), and a topic's first message makes one slot, not the
    few hundred below it (latencies of 0.1-10 ms fall in buckets 230-470): making those cost a pattern
    subscriber 5 us of each new topic's first message."""

    def __init__(self) -> None:
        self.counts: list[int] = []
        self.low = 0  # the bucket counts[0] holds
        self.count = 0
        self.min = math.inf
        self.max = -math.inf

    def _make(self, i: int) -> int:
        """Make bucket i (clamped to the last) one the list holds; its index in the list."""
        if i >= _BUCKETS:
            i = _BUCKETS - 1
        counts = self.counts
        if not counts:
            self.low = i
            counts.append(0)
        elif i < self.low:
            counts[:0] = [0] * (self.low - i)
            self.low = i
        elif i >= self.low + len(counts):
            counts.extend([0] * (i + 1 - self.low - len(counts)))
        return i - self.low

    def add(self, ms: float) -> None:
        self.count += 1
        if ms < self.min:
            self.min = ms
        if ms > self.max:
            self.max = ms
        j = (int(_log(ms * _INV_MIN) * _INV_LOG_BASE) + 1 if ms > _MIN_MS else 0) - self.low
        if not 0 <= j < len(self.counts):
            j = self._make(j + self.low)
        self.counts[j] += 1

    def add_many(self, values: list[float]) -> None:
        """`add` each of `values` (a coalesced run's latencies: one call, the loop kept local)."""
        counts, low = self.counts, self.low
        held = len(counts)
        for ms in values:
            j = (int(_log(ms * _INV_MIN) * _INV_LOG_BASE) + 1 if ms > _MIN_MS else 0) - low
            if not 0 <= j < held:
                j = self._make(j + low)
                low, held = self.low, len(counts)
            counts[j] += 1
        self.count += len(values)
        low, high = min(values), max(values)
        if low < self.min:
            self.min = low
        if high > self.max:
            self.max = high

    def buckets(self) -> list[tuple[int, int]]:
        """(bucket, count) of every bucket held, lowest first."""
        return list(enumerate(self.counts, start=self.low))

    def quantile(self, q: float) -> float | None:
        """The q-quantile (0..1) to within a bucket's width (2%), clamped to the exact min and max."""
        if self.count == 0:
            return None
        rank = max(math.ceil(q * self.count), 1)
        i = self.low + bisect_left(list(accumulate(self.counts)), rank)
        mid = _MIN_MS * _BASE ** (i - 0.5) if i > 0 else _MIN_MS
        return min(max(mid, self.min), self.max)

    def merge(self, other: LatencyHistogram) -> None:
        if other.counts:
            self._make(other.low)
            self._make(other.low + len(other.counts) - 1)
            offset = other.low - self.low
            mine = self.counts
            for j, c in enumerate(other.counts):
                mine[offset + j] += c
        self.count += other.count
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)


class SeqWindow:
    """Sequence numbers seen from one publisher: every one <= `prefix`, and those in `above`."""

    def __init__(self, window: int = 65_536, prefix: int = 0) -> None:
        self.window = window
        self.prefix = prefix
        self.above: set[int] = set()
        self.highest = prefix
        self.given_up = 0  # missing numbers that fell below the window: lost
        self.first_owed = prefix + 1  # the first number counted as expected (docs/contracts.md, Accounting)

    def add(self, seq: int) -> bool:
        """Record `seq`; False if it was seen before (a duplicate)."""
        if seq == self.prefix + 1 and not self.above:  # the in-order fast path
            self.prefix = self.highest = seq
            return True
        if seq <= self.prefix or seq in self.above:
            return False
        self.above.add(seq)
        if seq > self.highest:
            self.highest = seq
        while self.prefix + 1 in self.above:
            self.prefix += 1
            self.above.discard(self.prefix)
        if self.highest - self.prefix > 2 * self.window:  # far behind: what is below the window is given up
            floor = self.highest - self.window  # (compacting at twice the window: O(1) a message, amortized)
            kept = {s for s in self.above if s > floor}
            self.given_up += (floor - self.prefix) - (len(self.above) - len(kept))
            self.above = kept
            self.prefix = floor
            while self.prefix + 1 in self.above:
                self.prefix += 1
                self.above.discard(self.prefix)
        return True

    def take_run(self, first: int, n: int) -> bool:
        """Record `first`..`first + n - 1` at once when they are the next in order and nothing above
        is held (the common case); False, recording nothing, otherwise (the caller adds them one by one)."""
        if first != self.prefix + 1 or self.above:
            return False
        self.prefix = self.highest = first + n - 1
        return True

    def owe_from(self, first: int) -> None:
        """The subscriber is owed this publisher's messages from `first` on (it joined after the
        earlier ones were sent): numbers below it are neither missing nor expected."""
        floor = first - 1
        if floor <= self.prefix:
            return
        self.first_owed = first
        self.above = {s for s in self.above if s > floor}
        self.prefix = floor
        self.highest = max(self.highest, floor)
        while self.prefix + 1 in self.above:
            self.prefix += 1
            self.above.discard(self.prefix)

    def missing(self) -> int:
        """Numbers between the first owed and the highest seen that never came."""
        return self.given_up + (self.highest - self.prefix) - len(self.above)
