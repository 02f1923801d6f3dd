"""What a client keeps for one topic it publishes: sequence numbers, the bounded history, its terms.

Pure (no sockets, no clocks): the Client stamps messages through it under its publishing lock and
serves history and repair requests from it (pubsub/io_loop.py). Every message gets the next
sequence number from 1 and goes into the history, which offers the last `history` messages to late
joiners and reliable subscribers repairing a gap (the offered window of the QoS designs chordpub
replaces: a subscriber asking for more than is offered is not matched).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pubsub.dedup import DedupBounds, DedupWindow
from pubsub.directory import PublisherEntry
from pubsub.envelope import DEFAULT_PRIORITY, Envelope, topic_filter
from pubsub.history import History, RetentionBounds

if TYPE_CHECKING:
    from pubsub.exclusive import Fence

MODES = ("direct", "relay")
RELIABLE_HISTORY = 1000  # what a reliable publication keeps when it is not told
REPLY_BUDGET_BYTES = 400_000  # history/repair replies stay well under the wire's 1 MiB limit


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"mode must be direct or relay, got {mode!r}")
    return mode


@dataclass
class Publication:
    topic: str
    publisher: str  # the client's id
    history_size: int = 0
    reliable: bool = False
    strength: int | None = None
    mode: str = "direct"
    bounds: RetentionBounds | None = None  # None: the defaults
    archive: bool = False  # the topic's owner keeps a copy (dht/logs.py) that outlives us
    dedup: DedupWindow | None = None  # the msg ids sent within the window (made at the first one)
    history: History = field(init=False)
    filter: bytes = field(init=False)  # the prefix subscribers' SUB sockets select this topic by
    sent: int = 0
    seq: int = 0  # the last sequence number given (journaled messages reach the history a moment later)
    journaled: bool = False  # messages go to the client's data directory before they are sent
    pending: list[Envelope] = field(default_factory=list, repr=False)  # stamped, to go out in one frame
    pending_bytes: int = 0  # their payloads' size
    last_published_ns: int = 0  # when the last message was stamped (coalescing starts at a fast pace)
    pattern_heads: frozenset[bytes] = field(default=frozenset(), repr=False)  # the patterns matching it, as
    pattern_version: int = -1  # pubsub/filters.py last matched them (their `version`)
    early_seq: int = 0  # held while the topic registers, messages up to this went to its patterns already
    early_heads: frozenset = frozenset()  # ... to these
    early_exact_seq: int = 0  # ... and up to this to the exact subscribers whose filters the socket held
    early_exact_mark: int = 0  # ... when the last of those filters had come (`Filters.arrival`)
    fence: Fence | None = None  # exclusive topics: the election this publisher sends under (pubsub/exclusive.py)
    standby: int = 0  # messages not sent: this publisher did not lead its exclusive topic

    def __post_init__(self) -> None:
        check_mode(self.mode)
        if self.history_size < 0:
            raise ValueError("history cannot be negative")
        if self.strength is not None and (isinstance(self.strength, bool) or not isinstance(self.strength, int)):
            raise ValueError("strength must be an integer")
        if self.reliable and self.history_size == 0:
            self.history_size = RELIABLE_HISTORY
        if self.bounds is None:
            self.bounds = RetentionBounds(messages=max(RetentionBounds.messages, self.history_size))
        self.history = History(self.history_size, self.bounds)
        self.filter = topic_filter(self.topic)

    def restore(self, last_seq: int, kept: list[Envelope], acks: dict[str, int],
                ids: list[tuple[str, int, int]] | None = None, dedup: DedupBounds | None = None) -> None:
        """Continue from what the data directory kept of an earlier run of this publisher (`ids`: the
        msg ids it sent, oldest first, for its dedup window)."""
        self.history.restore(last_seq, kept)
        if ids:
            self.dedup = DedupWindow(dedup)
            self.dedup.restore(ids, time.time_ns())
        for subscriber, position in acks.items():
            self.history.ack(subscriber, position)
        self.seq = last_seq
        self.journaled = True

    def leads(self) -> bool:
        """Whether messages may go out: always, unless the topic is exclusive and another publisher
        leads it (then a message is counted in `standby` and not sent)."""
        if self.fence is None or self.fence.is_leader:
            return True
        self.standby += 1
        return False

    def stamp(self, payload: bytes, now_ns: int, key: str | None = None, priority: int = DEFAULT_PRIORITY,
              keep: bool = True) -> Envelope:
        """The next message: numbered, timestamped, kept in the history (a journaled one: once the
        journal has it, by `retain`; one held back while the topic registers, `keep=False`: when it is
        sent, by `retain`). `key` and `priority` matter to consumer groups only."""
        self.seq += 1
        env = Envelope(self.topic, self.publisher, self.seq, now_ns, payload, key, priority)
        if self.fence is not None:
            env.epoch = self.fence.epoch
        if keep and not self.journaled:
            self.history.add(env)
        self.sent += 1
        return env

    def retain(self, env: Envelope) -> None:
        self.history.add(env)

    @property
    def last_seq(self) -> int:
        return self.history.last_seq

    def entry(self, endpoint: str, service: str, patterns: bool = False) -> PublisherEntry:
        """This publication as the topic's record shows it to subscribers (`patterns`: its publisher
        sends pattern frames, which a direct topic then gets)."""
        return PublisherEntry(self.publisher, endpoint, service, self.strength, self.history_size, self.mode,
                              self.bounds.to_dict() if self.bounds else None, self.archive,
                              patterns and self.mode == "direct")

    def serve(self, op: str, count: int = 0, lo: int = 1, hi: int | None = None) -> dict:
        """A history request: "last" k messages, or the "range" lo..hi (hi None: to the newest).
        The reply names the oldest and newest sequence numbers held, so a subscriber knows what fell
        out; its messages stop at a byte budget, and the caller asks again from where they stop."""
        found = self.history.last(count) if op == "last" else self.history.range(max(lo, 1), hi, limit=100_000)
        messages, size = [], 0
        for env in found:
            raw = env.encode()
            if messages and size + len(raw) > REPLY_BUDGET_BYTES:
                break
            messages.append(raw)
            size += len(raw)
        return {"first": self.history.first_seq, "last": self.history.last_seq, "messages": messages}
