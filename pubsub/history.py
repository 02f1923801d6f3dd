"""A publisher's bounded history: the last K messages it sent, by sequence number.

This is the offered window of the QoS designs chordpub replaces: a late joiner may ask for the
last k <= K messages, and a reliable subscriber may ask for any range still inside the window to
repair a gap. Pure: no sockets, no clocks.
"""

from __future__ import annotations

from collections import deque
from itertools import islice

from pubsub.envelope import Envelope


class History:
    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError("history capacity cannot be negative")
        self.capacity = capacity
        self._items: deque[Envelope] = deque(maxlen=capacity or None)
        self.last_seq = 0

    def add(self, env: Envelope) -> None:
        if env.seq != self.last_seq + 1:
            raise ValueError(f"sequence numbers must follow each other: {self.last_seq} then {env.seq}")
        self.last_seq = env.seq
        if self.capacity:
            self._items.append(env)

    @property
    def first_seq(self) -> int:
        """The oldest sequence number still held (last_seq + 1 when nothing is held)."""
        return self._items[0].seq if self._items else self.last_seq + 1

    def last(self, k: int) -> list[Envelope]:
        if k <= 0:
            return []
        return list(islice(self._items, max(len(self._items) - k, 0), None))

    def range(self, lo: int, hi: int | None = None, limit: int = 1000) -> list[Envelope]:
        """Held messages with lo <= seq <= hi (hi None: to the newest), oldest first, at most `limit`."""
        hi = self.last_seq if hi is None else min(hi, self.last_seq)
        start = max(lo, self.first_seq)
        if start > hi or not self._items:
            return []
        offset = start - self.first_seq
        return list(islice(self._items, offset, offset + min(hi - start + 1, limit)))

    def __len__(self) -> int:
        return len(self._items)
