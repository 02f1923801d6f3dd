"""What a subscriber receives, and what it is told when something could not be delivered."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)  # not frozen: one is made per message, and frozen costs a microsecond more
class Message:
    """One delivered message.

    `publisher` is the publishing client's id, `seq` its sequence number on this topic (from 1),
    `sent_ns` the publisher's wall clock when it sent, `recv_ns` ours when it came off the network;
    `recovered` says it came from the publisher's history (a late joiner's catch-up or a repaired
    gap) rather than live.
    """

    topic: str
    payload: bytes
    publisher: str
    seq: int
    sent_ns: int
    recv_ns: int
    recovered: bool = False

    @property
    def latency_ms(self) -> float:
        return (self.recv_ns - self.sent_ns) / 1e6

    @property
    def text(self) -> str:
        """The payload as UTF-8 text (undecodable bytes replaced)."""
        return self.payload.decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Messages seq from_seq..to_seq of `publisher` on `topic` that this subscriber will never get."""

    topic: str
    publisher: str
    subscriber: str
    from_seq: int
    to_seq: int
    reason: str
    ts: float

    def to_dict(self) -> dict:
        return {"topic": self.topic, "publisher": self.publisher, "subscriber": self.subscriber,
                "from_seq": self.from_seq, "to_seq": self.to_seq, "reason": self.reason, "ts": self.ts}
