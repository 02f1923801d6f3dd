"""What a subscriber receives, and what it is told when something could not be delivered."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(slots=True)  # not frozen: one is made per message, and frozen costs a microsecond more
class Message:
    """One delivered message.

    `publisher` is the publishing client's id, `seq` its sequence number on this topic (from 1),
    `sent_ns` the publisher's wall clock when it sent, `recv_ns` ours when it came off the network;
    `recovered` says it came from the publisher's history (a late joiner's catch-up or a repaired
    gap) rather than live; `redelivered`, on a durable subscription, that it was handed to the
    application before the process stopped without committing it: it may have been seen already;
    `first_owed` the first of this publisher's sequence numbers the subscription counts as expected
    (1, or where the publisher stood when a best-effort subscription joined it; docs/contracts.md).

    In a consumer group (`subscribe(topic, group=...)`): `deliveries` counts the times the publisher
    has sent it to the group (1 the first time), and `redelivered` says it is more than 1 (another
    member, or this one, had it and failed, timed out or went); `key` and `priority` are the
    publisher's; `ack()` and `nak()` say the application is done with it, or wants it sent again
    (with `auto_ack=False`; otherwise a callback returning acks it, raising naks it).

    On an exclusive topic, `epoch` is the election epoch its publisher led under when it sent it (a
    subscriber never delivers an older epoch's message after a newer one's); 0 elsewhere.
    """

    topic: str
    payload: bytes
    publisher: str
    seq: int
    sent_ns: int
    recv_ns: int
    recovered: bool = False
    redelivered: bool = False
    first_owed: int = 1
    deliveries: int = 1
    group: str | None = None
    key: str | None = None
    priority: int = 4
    epoch: int = 0  # exclusive topics: the election epoch its publisher sent it under (pubsub/exclusive.py)
    _commit: Callable[[Message], None] | None = field(default=None, repr=False, compare=False)
    _settle: Callable[[Message, str], None] | None = field(default=None, repr=False, compare=False)

    def commit(self) -> None:
        """Durable subscriptions: record that the application is done with this message and every
        earlier one of its publisher, now (for a subscription made with `auto_commit=False`, or to
        commit before a callback returns). A restarted subscriber resumes after it. Elsewhere a
        no-op: there is nothing to resume."""
        if self._commit is not None:
            self._commit(self)

    def ack(self, commit_with: object = None) -> bool:
        """A consumer group's message is done with: the publisher gives it to no one else. Elsewhere
        (and a second time) a no-op.

        `commit_with`: the application's sqlite3 connection on which it made this message's writes.
        They commit first, with a row saying the group applied this message (pubsub/group_tx.py); when
        the group had applied it already (it came again after a member died before its ack), they are
        rolled back instead and this returns False. Exactly once across the group's members."""
        applied = True
        if commit_with is not None:
            if self.group is None:
                raise ValueError("ack(commit_with=...) is for a consumer group's message; a durable subscription "
                                 "takes subscribe(..., commit_with=conn)")
            from pubsub.group_tx import apply_once

            applied = apply_once(commit_with, self.group, self.topic, self.publisher, self.seq)
        if self._settle is not None:
            self._settle(self, "ack")
        return applied

    def nak(self) -> None:
        """Send this consumer group's message again, now (to any member, this one included), unless it
        has been delivered `max_deliver` times: then it is dead-lettered here, with its payload."""
        if self._settle is not None:
            self._settle(self, "nak")

    @property
    def latency_ms(self) -> float:
        return (self.recv_ns - self.sent_ns) / 1e6

    @property
    def text(self) -> str:
        """The payload as UTF-8 text (undecodable bytes replaced)."""
        return self.payload.decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Messages seq from_seq..to_seq of `publisher` on `topic` that this subscriber will not deliver:
    gone from everywhere that could repair them (only the range is known), or one message whose
    callback raised (`payload` and `sent_ns` hold it, for `chordpub dlq replay`)."""

    topic: str
    publisher: str
    subscriber: str
    from_seq: int
    to_seq: int
    reason: str
    ts: float
    payload: bytes | None = None
    sent_ns: int | None = None

    def to_dict(self) -> dict:
        """The JSON form (`sub --dead-letter`): the payload, when held, as `payload_b64`."""
        out = {"topic": self.topic, "publisher": self.publisher, "subscriber": self.subscriber,
               "from_seq": self.from_seq, "to_seq": self.to_seq, "reason": self.reason, "ts": self.ts}
        if self.payload is not None:
            out["payload_b64"] = base64.b64encode(self.payload).decode("ascii")
            out["sent_ns"] = self.sent_ns
        return out
