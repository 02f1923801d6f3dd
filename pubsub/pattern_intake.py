"""What a client's io loop knows to take a pattern's frames (pubsub/envelope.py): the patterns it
receives by their own filter, and the publishers it could meet a new topic of.

A best-effort pattern subscription without history (`subscribe("sensors/*/temp")`; not reliable,
durable or a consumer group's) puts one filter on the client's SUB socket, `pattern_filter(pattern)`.
Every publisher the socket is connected to, for any topic, then matches its own topics against it
and sends the pattern a copy of each message of a matching one (pubsub/coalescing.py), a topic
published for the first time included.
So a topic the pattern subscriber has not heard of yet can arrive before its announcement does
(pubsub/patterns.py): its frame names the topic and its publisher, and a publisher we are connected
to is one whose entry we hold from another topic (`entry_for`). The topic is then followed at once,
as its announcement would have had it followed, *provisionally*: its announcement, when it comes,
brings the publisher's real terms, and a topic never announced within PROVISIONAL_BEATS heartbeats
is let go. A reliable pattern, or one with history, subscribes each topic it follows instead, once
announced: its repairs and history need the publisher's terms first, and a publisher counting its
pattern filter as in place would release a new topic's first messages before it follows the topic. So
does every pattern on a CURVE ring: there a topic's publishers are the ones its record names, and a
frame's publisher id is only what its sender wrote.

A publisher under a policy (its entry's `patterns` is false) applies no pattern filter: its gate
judges one topic at a time. A pattern's topic with such a publisher is followed by its exact filter.
Pure: the io loop calls it on its own thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from dht.subjects import matches, parse
from pubsub.directory import PublisherEntry
from pubsub.envelope import pattern_filter
from pubsub.subscription import TopicState

MAX_PUBLISHERS_KNOWN = 100_000  # publishers whose endpoints a client keeps to follow their new topics
PROVISIONAL_BEATS = 6  # heartbeats a topic met by its frame waits for its announcement before it is let go


@dataclass
class PatternTaker:
    """One plain pattern subscription, as the io loop serves it: its handle, and how to make the state of
    a topic it meets (the subscription's terms)."""

    pattern: str
    handle: object  # pubsub/delivery.py Subscription
    make_state: Callable[[str], TopicState]
    levels: tuple[str, ...] = ()

    head: bytes = b""  # its frames begin so (pubsub/envelope.py pattern_filter)

    def __post_init__(self) -> None:
        self.levels = parse(self.pattern)
        self.head = pattern_filter(self.pattern)


class PatternIntake:
    def __init__(self) -> None:
        self.takers: dict[str, PatternTaker] = {}  # pattern -> its subscription
        self._publishers: dict[str, PublisherEntry] = {}  # publisher id -> an entry of one of its topics
        self._provisional: dict[str, PublisherEntry] = {}  # publisher id -> `entry_for` it (made once)

    def add(self, taker: PatternTaker) -> None:
        self.takers[taker.pattern] = taker

    def remove(self, pattern: str) -> PatternTaker | None:
        return self.takers.pop(pattern, None)

    def serves(self, handle: object) -> bool:
        """Whether `handle` takes its topics by its pattern's frames."""
        taker = self.takers.get(getattr(getattr(handle, "pattern", None), "pattern", None) or "")
        return taker is not None and taker.handle is handle

    def met(self, entry: PublisherEntry) -> None:
        """A publisher's entry, from a topic's record or announcement: a frame of its can be followed."""
        if not entry.patterns or not entry.endpoint or not entry.repair:
            return
        if self._publishers.pop(entry.id, None) != entry:
            self._provisional.pop(entry.id, None)
        self._publishers[entry.id] = entry
        if len(self._publishers) > MAX_PUBLISHERS_KNOWN:
            self._provisional.pop(oldest := next(iter(self._publishers)), None)
            del self._publishers[oldest]

    def taker_for(self, pattern: str, topic: str) -> PatternTaker | None:
        """Our subscription of `pattern`, when it matches `topic` (a frame says both: checked, not trusted)."""
        taker = self.takers.get(pattern)
        return taker if taker is not None and matches(taker.levels, topic) else None

    def entry_for(self, publisher: str) -> PublisherEntry | None:
        """A provisional entry for a new topic of `publisher`: where it is, and the defaults a first
        publish gives a topic (its announcement brings the real terms)."""
        made = self._provisional.get(publisher)
        if made is None:
            known = self._publishers.get(publisher)
            if known is None:
                return None
            made = self._provisional[publisher] = replace(known, strength=None, history=0, mode="direct",
                                                          retain=None, archive=False)
        return made
