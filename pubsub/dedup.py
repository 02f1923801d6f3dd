"""Idempotent publishing: the message ids a publication sent within its dedup window.

`publish(topic, payload, msg_id=...)` sends a message once per id within the window: an id seen
again is answered with the first message's sequence number and nothing is sent (JetStream's
`Nats-Msg-Id`, whose window is 2 minutes by default). A publisher that does not know whether its
last messages went out (it was killed, or its caller was) sends them again with the same ids.
With a data directory the ids are written with their messages, in the same transaction
(pubsub/journal.py), so the window survives a SIGKILL and a restart.

The window is bounded in time (`seconds`), in ids and in their bytes; an id pushed out by a bound
before its time is up is counted (`evicted`): a message sent again after that is sent again. An id
older than the window is forgotten, as documented: reused later, it is a new message.

Pure: no sockets, no disk; callers pass the time.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

DEDUP_SECONDS = 120.0
DEDUP_IDS = 100_000  # ids one publication remembers at most
DEDUP_BYTES = 8 * 2**20  # ... and their bytes
MAX_MSG_ID_CHARS = 256


class Published(int):
    """What `publish` returns: the message's sequence number (an int), and `duplicate`: True when a
    message with its msg_id was sent within the window (nothing was sent; the number is that one's)."""

    duplicate: bool

    def __new__(cls, seq: int, duplicate: bool = False) -> Published:
        obj = super().__new__(cls, seq)
        obj.duplicate = duplicate
        return obj

    def __repr__(self) -> str:
        return f"Published({int(self)}, duplicate={self.duplicate})"


def check_msg_id(msg_id: object) -> str:
    if not isinstance(msg_id, str) or not 0 < len(msg_id) <= MAX_MSG_ID_CHARS:
        raise ValueError(f"a msg_id is 1..{MAX_MSG_ID_CHARS} characters of text, got {msg_id!r}")
    return msg_id


@dataclass(frozen=True)
class DedupBounds:
    seconds: float = DEDUP_SECONDS
    ids: int = DEDUP_IDS
    bytes: int = DEDUP_BYTES

    def __post_init__(self) -> None:
        if not isinstance(self.seconds, int | float) or isinstance(self.seconds, bool) or not self.seconds > 0:
            raise ValueError(f"the dedup window is a positive number of seconds, got {self.seconds!r}")
        for name in ("ids", "bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"dedup {name} is a positive integer, got {value!r}")


class DedupWindow:
    """The ids one publication sent recently, oldest first, each with its seq and send time."""

    def __init__(self, bounds: DedupBounds | None = None) -> None:
        self.bounds = bounds or DedupBounds()
        self._ids: OrderedDict[str, tuple[int, int]] = OrderedDict()  # id -> (seq, sent_ns)
        self.bytes = 0
        self.evicted = 0  # pushed out by a bound before the window's end
        self.duplicates = 0  # publishes answered from the window (nothing sent)

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, msg_id: object) -> bool:
        return msg_id in self._ids

    def seen(self, msg_id: str, now_ns: int) -> int | None:
        """The seq of the message already sent with `msg_id` within the window (None: not seen)."""
        self.expire(now_ns)
        found = self._ids.get(msg_id)
        if found is None:
            return None
        self.duplicates += 1
        return found[0]

    def add(self, msg_id: str, seq: int, sent_ns: int) -> None:
        if msg_id in self._ids:
            return
        self._ids[msg_id] = (seq, sent_ns)
        self.bytes += len(msg_id)
        b = self.bounds
        while len(self._ids) > b.ids or self.bytes > b.bytes:
            self._drop_oldest()
            self.evicted += 1

    def expire(self, now_ns: int) -> None:
        """Forget the ids sent before the window."""
        oldest = now_ns - int(self.bounds.seconds * 1e9)
        while self._ids and next(iter(self._ids.values()))[1] < oldest:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        msg_id, _ = self._ids.popitem(last=False)
        self.bytes -= len(msg_id)

    def restore(self, rows: list[tuple[str, int, int]], now_ns: int) -> None:
        """Ids a restarted publisher's data directory held: (msg_id, seq, sent_ns), oldest first."""
        for msg_id, seq, sent_ns in rows:
            self.add(msg_id, seq, sent_ns)
        self.expire(now_ns)

    def stats(self) -> dict:
        """What `topic info` shows of it: the window and its bounds, what it holds, what it answered
        from itself (duplicates) and what its bounds pushed out before the window's end (evicted)."""
        return {"window_s": self.bounds.seconds, "max_ids": self.bounds.ids, "max_bytes": self.bounds.bytes,
                "ids": len(self._ids), "bytes": self.bytes, "evicted": self.evicted, "duplicates": self.duplicates}
