"""What a client keeps for a consumer group it is a member of: one per (topic, group) subscription.

The member's side of pubsub/dispatch.py. Publishers send a member only its own dispatch frames
(pubsub/envelope.py); each becomes a `Message` with its delivery count, and the member settles it:
ack (done), nak (send it again), or, on its last delivery (`max_deliver`), dead (dead-lettered here,
with its payload, and done). Settlements wait in an outbox, one list per publisher, until the io loop
sends them in one `gack` request per publisher (acks are batched: one request carries whatever
accumulated since the last); every heartbeat it sends one anyway, which renews the member's lease
at that publisher.

Pure apart from a lock: the application settles from its own threads (`msg.ack()`, `get()`, the
callback thread), the io loop takes the outbox. Bounded: a member holds at most `prefetch` unsettled
messages per publisher (the publisher's credit), so `held` and the outbox are too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pubsub.directory import PublisherEntry
from pubsub.dispatch import GroupTerms
from pubsub.envelope import Dispatched
from pubsub.message import DeadLetter, Message
from pubsub.subscription import Stats

log = logging.getLogger(__name__)


@dataclass
class Outbox:
    acked: list[int] = field(default_factory=list)
    naked: list[int] = field(default_factory=list)
    dead: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.acked or self.naked or self.dead)


class GroupMembership:
    reliable = True  # never dropped at the application's pending limit: the publisher's credit bounds it
    mode = "direct"

    def __init__(self, topic: str, group: str, member: str, prefetch: int, terms: GroupTerms, auto_ack: bool,
                 on_dead_letter: Callable[[DeadLetter], None] | None = None) -> None:
        self.topic, self.group, self.subscriber = topic, group, member
        self.prefetch, self.terms, self.auto_ack = prefetch, terms, auto_ack
        self.on_dead_letter = on_dead_letter
        self.publishers: dict[str, PublisherEntry] = {}
        self.joined: set[str] = set()  # publishers that accepted our join
        self.unmatched: dict[str, str] = {}  # publisher -> why it refused us
        self.stats = Stats()
        self.acked = 0
        self.naked = 0
        self._held: dict[tuple[str, int], tuple[int, int]] = {}  # (publisher, seq) -> (deliveries, max_deliver)
        self._outbox: dict[str, Outbox] = {}
        self.deliveries: list[Message] = []  # the io loop's batch, handed to the subscription after a read
        self._lock = threading.Lock()
        self.wake: Callable[[], None] = lambda: None  # the io loop, when the outbox was empty

    # -- what arrives (io loop) -----------------------------------------------------------------------
    def on_dispatch(self, d: Dispatched, recv_ns: int) -> Message | None:
        env = d.env
        if d.group != self.group or d.member != self.subscriber:
            return None  # (a filter we no longer hold: its last frames)
        with self._lock:
            self._held[(env.publisher, env.seq)] = (d.deliveries, d.max_deliver)
        msg = Message(env.topic, env.payload, env.publisher, env.seq, env.sent_ns, recv_ns,
                      redelivered=d.deliveries > 1, deliveries=d.deliveries, group=self.group, key=env.key,
                      priority=env.priority, _settle=self.settle)
        self.stats.received += 1
        self.stats.redelivered += d.deliveries > 1
        self.stats.publishers.add(env.publisher)
        self.stats.latency.add(msg.latency_ms)
        return msg

    # -- settling (any thread) ---------------------------------------------------------------------------
    def settle(self, msg: Message, how: str) -> None:
        """"ack" or "nak" one message (a second settlement of the same delivery does nothing, nor does one
        of an earlier delivery: a nak can bring the message back before its callback has returned)."""
        letter = None
        with self._lock:
            held = self._held.get((msg.publisher, msg.seq))
            if held is None or held[0] != msg.deliveries:
                return  # settled already, or an earlier delivery of a message that has come again since
            del self._held[(msg.publisher, msg.seq)]
            deliveries, max_deliver = held
            was_empty = not any(self._outbox.values())
            box = self._outbox.setdefault(msg.publisher, Outbox())
            if how == "ack":
                box.acked.append(msg.seq)
                self.acked += 1
            elif deliveries >= max_deliver:
                box.dead.append(msg.seq)
                self.stats.dead_lettered += 1
                letter = DeadLetter(msg.topic, msg.publisher, f"{self.subscriber}/{self.group}", msg.seq, msg.seq,
                                    f"not acknowledged after {deliveries} deliveries (max_deliver)", time.time(),
                                    msg.payload, msg.sent_ns)
            else:
                box.naked.append(msg.seq)
                self.naked += 1
        if letter is not None:
            log.warning("dead letter: %s", letter)
            if self.on_dead_letter is not None:
                self.on_dead_letter(letter)
        if was_empty:
            self.wake()

    def take(self) -> dict[str, Outbox]:
        """The outbox, emptied (io loop): publisher id -> its settlements."""
        with self._lock:
            out, self._outbox = {p: b for p, b in self._outbox.items() if b}, {}
        return out

    def forget_publisher(self, pid: str) -> None:
        """A publisher gone: what it sent us and we have not settled can no longer be settled there."""
        with self._lock:
            for key in [k for k in self._held if k[0] == pid]:
                del self._held[key]
            self._outbox.pop(pid, None)
        self.joined.discard(pid)

    @property
    def held(self) -> int:
        """Messages handed to the application and not settled yet."""
        with self._lock:
            return len(self._held)

    # -- what a Subscription asks of its state ---------------------------------------------------------------
    @property
    def lost(self) -> int:
        return 0  # nothing is lost quietly: what a group cannot deliver is dead-lettered (stats.dead_lettered)

    def summary(self) -> dict:
        out = self.stats.summary(self.topic, 0)
        out.update(group=self.group, acked=self.acked, naked=self.naked, dead_lettered=self.stats.dead_lettered,
                   held=self.held)
        return out
