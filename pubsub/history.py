"""A publisher's retained messages on one topic, by sequence number, and the rule that trims them.

Two things keep a message:
- the *offered history*: the last K messages, for late joiners and for reliable subscribers
  repairing a gap (the offered window of the QoS designs chordpub replaces);
- *acknowledged retention*: a durable subscriber (pubsub/durable.py) reports the position it has
  committed, and a message no durable subscriber has yet is kept too, beyond K;
- *the late hold*: when a new topic's owner knew of subscribers that had not connected by the time
  its first messages went (`hold_late`), every message is kept until a deadline, at most
  LATE_HOLD_MESSAGES of them, so that a reliable or durable subscriber slow to connect fetches them
  from seq 1 rather than finding them gone,
within hard bounds, whichever comes first: `messages`, `seconds` since it was sent, `bytes` of
payload. A message past a bound goes even if a durable subscriber still lacks it: that subscriber
finds the exact range missing when it asks, and dead-letters it.

Pure: no sockets, no clocks (callers pass the time), no disk (pubsub/journal.py writes it through).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import islice

from pubsub.envelope import Envelope

LATE_HOLD_MESSAGES = 10_000  # messages a late hold keeps at most: past them it ends (the rest are dead letters)


@dataclass(frozen=True)
class RetentionBounds:
    """The most a publication keeps for its durable subscribers (`topic info` shows them)."""

    messages: int = 100_000
    seconds: float = 3600.0
    bytes: int = 64 * 2**20

    def __post_init__(self) -> None:
        if isinstance(self.messages, bool) or not isinstance(self.messages, int) or self.messages < 1:
            raise ValueError(f"retain-messages must be a positive integer, got {self.messages!r}")
        if not isinstance(self.seconds, int | float) or not self.seconds > 0:
            raise ValueError(f"retain-seconds must be positive, got {self.seconds!r}")
        if isinstance(self.bytes, bool) or not isinstance(self.bytes, int) or self.bytes < 1:
            raise ValueError(f"retain-bytes must be a positive integer, got {self.bytes!r}")

    def to_dict(self) -> dict:
        return {"messages": self.messages, "seconds": self.seconds, "bytes": self.bytes}


DEFAULT_BOUNDS = RetentionBounds()  # shared (frozen): a new topic's first publish makes none of its own


class History:
    """Retained messages of one publication, oldest first."""

    def __init__(self, capacity: int, bounds: RetentionBounds | None = None) -> None:
        if capacity < 0:
            raise ValueError("history capacity cannot be negative")
        self.bounds = bounds or DEFAULT_BOUNDS
        if capacity > self.bounds.messages:
            raise ValueError(f"history {capacity} exceeds retain-messages {self.bounds.messages}")
        self.capacity = capacity
        self._age_ns = int(self.bounds.seconds * 1e9)
        self._items: deque[Envelope] = deque()
        self.bytes = 0
        self.last_seq = 0
        self.acked: dict[str, int] = {}  # durable subscriber -> the position it committed
        self._floor: int | None = None  # the lowest of them (None: no durable subscriber)
        self.late_until_ns = 0  # the late hold's deadline (0: none)

    # -- what goes in -----------------------------------------------------------------------------------
    def keeping(self) -> bool:
        """Whether a message added now would be kept (a size, a durable subscriber's position, a late hold,
        or messages kept already): what `add` decides."""
        return bool(self.capacity or self._floor is not None or self._items or self.late_until_ns)

    def add(self, env: Envelope) -> None:
        if env.seq != self.last_seq + 1:
            raise ValueError(f"sequence numbers must follow each other: {self.last_seq} then {env.seq}")
        self.last_seq = env.seq
        if not self.capacity and self._floor is None and not self._items and not self.late_until_ns:
            return  # nothing keeps it (what `trim` would decide), on the hot path of a plain publisher
        items = self._items
        items.append(env)
        self.bytes += len(env.payload)
        if (len(items) > self.capacity or self.bytes > self.bounds.bytes
                or items[0].sent_ns < env.sent_ns - self._age_ns):
            self.trim(env.sent_ns)  # (within its size, bytes and age, nothing would go: a late hold keeps more)

    def restore(self, last_seq: int, kept: list[Envelope]) -> None:
        """Start from what a journal kept (a restarted publisher): numbering continues after last_seq."""
        if self._items or self.last_seq:
            raise ValueError("restore() is for an empty history")
        self.last_seq = last_seq
        for env in kept:
            if env.seq <= last_seq and (not self._items or env.seq == self._items[-1].seq + 1):
                self._items.append(env)
                self.bytes += len(env.payload)

    def ack(self, subscriber: str, position: int) -> bool:
        """A durable subscriber committed everything up to `position`; True when that is news."""
        position = min(position, self.last_seq)
        if self.acked.get(subscriber, -1) >= position:
            return False
        self.acked[subscriber] = position
        self._floor = min(self.acked.values())
        return True

    def hold_late(self, until_ns: int) -> None:
        """Keep every message from now (and what is held) until `until_ns`: subscribers the topic's owner
        named have not connected yet, and will ask from seq 1."""
        self.late_until_ns = max(self.late_until_ns, until_ns)

    def release(self, subscriber: str) -> None:
        """`subscriber` no longer holds anything back (a consumer group forgotten)."""
        if self.acked.pop(subscriber, None) is not None:
            self._floor = min(self.acked.values()) if self.acked else None

    def trim(self, now_ns: int) -> int:
        """Drop what nothing keeps any more; returns the oldest seq still held (first_seq)."""
        items, b = self._items, self.bounds
        if self.late_until_ns and (now_ns >= self.late_until_ns or len(items) > LATE_HOLD_MESSAGES):
            self.late_until_ns = 0
        floor = 0 if self.late_until_ns else self.last_seq if self._floor is None else self._floor
        oldest_ns = now_ns - int(b.seconds * 1e9)
        while items:
            head = items[0]
            over = len(items) > b.messages or self.bytes > b.bytes or head.sent_ns < oldest_ns
            unneeded = len(items) > self.capacity and head.seq <= floor
            if not (over or unneeded):
                break
            items.popleft()
            self.bytes -= len(head.payload)
        return self.first_seq

    # -- what is asked --------------------------------------------------------------------------------------
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
