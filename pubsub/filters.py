"""The subscribers' filters a client's PUB sockets hold, counted from what XPUB_VERBOSER brings up.

An XPUB socket tells its owner of every filter a subscriber sends (b"\\x01" + prefix) and of each
cancellation, its connection's end included (b"\\x00" + prefix). Counting them per (socket, prefix)
says how many subscribers of a topic a socket would reach now (`held`): what `advertise` and a first
publish wait for, so that a subscriber listening first misses no message. A consumer group member's
own dispatch filter is its group's business (pubsub/groups.py), handed to `groups_filter`, which says
whether it took it. A pattern subscriber's filter (`pubsub.envelope.pattern_filter`) is kept as its
pattern, in a trie (dht/subjects.py), so that each topic published finds the patterns it must be sent
to (`pattern_heads`) and `held` counts those subscribers too. When an exact filter last came
(`arrival`) tells a topic still registering whether the messages it sent early reached every
subscriber it holds now (pubsub/coalescing.py). Pure: the caller reads the sockets,
under its lock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from dht.subjects import MATCH_CACHE, PatternTrie
from pubsub.envelope import PATTERN_PREFIX, parse_pattern_filter, pattern_filter

NO_HEADS: frozenset[bytes] = frozenset()
MAX_FRESH = 10_000  # exact filters that came, kept until the publishing side looks (beyond: at registration)


class Filters:
    def __init__(self, groups_filter: Callable[[bytes, bool], bool]) -> None:
        self._counts: Counter[tuple[str, bytes]] = Counter()  # (socket name, prefix) -> subscribers' filters
        self._groups_filter = groups_filter
        self.patterns: Counter[str] = Counter()  # pattern -> subscribers' filters for it (direct socket)
        self._trie = PatternTrie()
        self._heads: dict[str, bytes] = {}  # pattern -> its filter, the head of its frames
        self._heads_of: dict[frozenset, frozenset[bytes]] = {}  # the trie's answer -> its heads, one set for all
        self.version = 0  # moves whenever a pattern comes or goes: publications match their topic again
        self.changes = 0  # moves whenever any filter comes or goes: counts looked at before may differ now
        self._arrived: dict[tuple[str, bytes], int] = {}  # (socket, prefix) held -> `changes` when one last came
        self.fresh: list[bytes] = []  # direct exact prefixes that came since the publishing side last looked

    def message(self, socket: str, msg: bytes) -> None:
        """One message the XPUB socket named `socket` brought up (anything but a filter is ignored)."""
        if msg[:1] in (b"\x01", b"\x00"):
            self.seen(socket, msg[1:], msg[:1] == b"\x01")

    def seen(self, socket: str, prefix: bytes, on: bool) -> None:
        """A subscriber's filter `prefix` arrived (`on`) or went."""
        self.changes += 1
        if socket == "direct" and self._groups_filter(prefix, on):
            return
        if socket == "direct" and prefix.startswith(PATTERN_PREFIX):
            self._pattern(prefix, on)
            return
        key = (socket, prefix)
        if on:
            self._counts[key] += 1
            self._arrived[key] = self.changes
            if socket == "direct" and len(self.fresh) < MAX_FRESH:
                self.fresh.append(prefix)
        elif self._counts[key] <= 1:
            self._counts.pop(key, None)
            self._arrived.pop(key, None)
        else:
            self._counts[key] -= 1

    def _pattern(self, prefix: bytes, on: bool) -> None:
        pattern = parse_pattern_filter(prefix)
        if pattern is None:
            return
        try:
            if on and not self.patterns[pattern]:
                self._trie.add(pattern, pattern)
                self._heads[pattern] = pattern_filter(pattern)
                self._heads_of.clear()
                self.version += 1
        except ValueError:  # not a pattern of the grammar: nothing of ours can match it
            return
        if on:
            self.patterns[pattern] += 1
        elif self.patterns[pattern] <= 1:
            self.patterns.pop(pattern, None)
            if pattern in self._heads:
                self._trie.remove(pattern, pattern)
                del self._heads[pattern]
                self._heads_of.clear()
                self.version += 1
        else:
            self.patterns[pattern] -= 1

    def pattern_heads(self, topic: str) -> frozenset[bytes]:
        """The heads of the pattern frames `topic`'s messages go out in: one per pattern held that matches it.
        The topics that match the same patterns share one set (a thousand new topics leave no set each)."""
        if not self._heads:
            return NO_HEADS
        patterns = self._trie.match(topic)
        heads = self._heads_of.get(patterns)
        if heads is None:
            if len(self._heads_of) >= MATCH_CACHE:
                self._heads_of.clear()
            heads = self._heads_of[patterns] = frozenset(self._heads[p] for p in patterns) if patterns else NO_HEADS
        return heads

    def held(self, socket: str, prefix: bytes, topic: str | None = None) -> int:
        """Subscribers' filters for exactly `prefix`, and (`topic`, direct socket) for the patterns matching it."""
        n = self._counts.get((socket, prefix), 0)
        if topic is not None and socket == "direct" and self._heads:
            n += sum(self.patterns[p] for p in self._trie.match(topic))
        return n

    def arrival(self, socket: str, prefix: bytes) -> int:
        """When the last of the filters held for exactly `prefix` came (0: none is held): a message sent
        to them is owed again to nobody while this stays the same."""
        return self._arrived.get((socket, prefix), 0)

    def forget(self, socket: str) -> None:
        """The socket was closed and bound again: every peer subscribes again from scratch."""
        self._counts = Counter({k: v for k, v in self._counts.items() if k[0] != socket})
        self._arrived = {k: v for k, v in self._arrived.items() if k[0] != socket}
        if socket == "direct" and self._heads:
            self.patterns.clear()
            self._trie, self._heads, self._heads_of = PatternTrie(), {}, {}
            self.version += 1
