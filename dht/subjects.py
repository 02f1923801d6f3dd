"""Topics and patterns: the one grammar of subscriptions and of the policy file, and where on the ring a
pattern meets the topics it matches. Pure: no sockets, no clocks.

A topic is split into levels on "/". In a pattern a level `*` matches exactly one level and a last
level `>` one or more trailing levels (NATS's subjects; MQTT's `+` and `#` are read as `*` and `>`);
any other level matches itself. `*` and `>` stand for whole levels: `a*` or `x>y` is refused rather
than taken literally, while `+` and `#` inside a level are ordinary characters (`c++`, `room#1`),
as they are to MQTT-minded users' topics.

Hashing a topic to its owner destroys the hierarchy, so a pattern cannot be sent to "the owner of
its topics". Its *literal prefix* (the levels before its first wildcard) can: a pattern registers at
the prefix record of that prefix, and a publisher announces each of its topics at the prefix records
of the topic's first levels (at most PREFIX_LEVELS of them), so the two meet on one node without any
node seeing every subscription (as NATS and EMQX replicate them to every server). A pattern with no
literal level (`>`, `*/temp`) would need every topic's announcement in one record: it is refused.

`PatternTrie` matches one topic against many patterns as the NATS server's sublist does: a trie of
levels walked once per topic, with a bounded cache of recent answers.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import msgpack

ONE = "*"  # exactly one level
REST = ">"  # one or more trailing levels
MQTT = {"+": ONE, "#": REST}
WILDCARDS = (ONE, REST, *MQTT)  # levels a published topic may not have
MAX_PATTERN_LEVELS = 32  # a pattern longer than this is refused (a topic of more levels matches nothing long)
MAX_PATTERN_CHARS = 1024
PREFIX_LEVELS = 2  # a topic is announced at the prefix records of its first 1..2 levels
PREFIX_RECORD = "/>"  # a prefix record's key is the prefix and this: never a publishable topic
MATCH_CACHE = 4096  # topics whose matches a PatternTrie remembers
ANNOUNCE = "top/"  # a prefix record's field for a topic a publisher announces there
WATCHER = "pat/"  # a prefix record's field for the patterns a client follows there


class PatternError(ValueError):
    """A pattern or topic that breaks the grammar: one line saying which and why."""


def is_pattern(text: str) -> bool:
    """True when some level of `text` is a wildcard (`*`, `>`, `+`, `#`)."""
    return any(level in WILDCARDS for level in text.split("/"))


def parse(pattern: str) -> tuple[str, ...]:
    """The levels of `pattern`, MQTT's wildcards read as NATS's; PatternError when it breaks the grammar."""
    if not isinstance(pattern, str) or not pattern or "\x00" in pattern:
        raise PatternError(f"a pattern is a non-empty string without NUL, got {pattern!r}")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"pattern {pattern[:40]!r}... is over {MAX_PATTERN_CHARS} characters")
    levels = tuple(MQTT.get(level, level) for level in pattern.split("/"))
    if len(levels) > MAX_PATTERN_LEVELS:
        raise PatternError(f"pattern {pattern!r} has {len(levels)} levels; at most {MAX_PATTERN_LEVELS}")
    for i, level in enumerate(levels):
        if not level:
            raise PatternError(f"pattern {pattern!r} has an empty level")
        if (ONE in level or REST in level) and level not in (ONE, REST):
            raise PatternError(f"pattern {pattern!r}: * and > stand for whole levels, not part of {level!r}")
        if level == REST and i != len(levels) - 1:
            raise PatternError(f"pattern {pattern!r}: > (or #) only as the last level")
    return levels


def check_subscribable(text: str) -> str:
    """`text` as a subscription names it: a pattern must parse; a topic may not use * or > inside a
    level (it would read as a pattern someone mistyped). Returns `text`."""
    levels = text.split("/")
    if is_pattern(text) or any(ONE in level or REST in level for level in levels):
        parse(text)
    return text


def check_publishable(topic: str) -> str:
    """A topic a message can be published on: no level is a wildcard. Returns `topic`."""
    for level in topic.split("/"):
        if level in WILDCARDS:
            raise PatternError(f"topic {topic!r} has the wildcard level {level!r}: publish on a concrete "
                               "topic; patterns are for subscribing")
    return topic


def matches(levels: tuple[str, ...], topic: str) -> bool:
    """Whether the parsed pattern `levels` matches `topic`."""
    return matches_levels(levels, topic.split("/"))


def matches_levels(levels: tuple[str, ...], parts: list[str]) -> bool:
    """`matches` for a topic already split into its levels."""
    for i, p in enumerate(levels):
        if p == REST:
            return len(parts) > i
        if i >= len(parts) or (p != ONE and p != parts[i]):
            return False
    return len(parts) == len(levels)


def literal_prefix(levels: tuple[str, ...]) -> tuple[str, ...]:
    """The levels before the first wildcard."""
    for i, level in enumerate(levels):
        if level in (ONE, REST):
            return levels[:i]
    return levels


def prefix_record(prefix: Iterable[str]) -> str:
    """The key of the prefix record for the levels `prefix`: `a/b/>`."""
    return "/".join(prefix) + PREFIX_RECORD


def pattern_record(levels: tuple[str, ...]) -> str:
    """Where a parsed pattern registers: the prefix record of its literal prefix, cut to PREFIX_LEVELS
    (every topic it can match is announced there)."""
    prefix = literal_prefix(levels)
    if not prefix:
        raise PatternError(f"pattern {'/'.join(levels)!r} has no literal first level: it would have to hear of "
                           "every topic on the ring; name the first level (e.g. 'sensors/>')")
    return prefix_record(prefix[:PREFIX_LEVELS])


def announced_at(topic: str) -> list[str]:
    """The prefix records a publisher of `topic` announces it at: its proper prefixes of 1 to
    PREFIX_LEVELS levels (a pattern's wildcard level is at least one level past its prefix)."""
    parts = topic.split("/")
    return [prefix_record(parts[:n]) for n in range(1, min(len(parts) - 1, PREFIX_LEVELS) + 1)]


def overlaps(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether some topic matches both parsed patterns."""
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x == REST or y == REST:
            return (x is not None) and (y is not None)  # both have a level here, and one takes the rest
        if x is None or y is None:
            return False  # one ends, the other needs more levels
        if x != ONE and y != ONE and x != y:
            return False
    return True


def covers(outer: tuple[str, ...], inner: tuple[str, ...]) -> bool:
    """Whether every topic the parsed pattern `inner` matches, `outer` matches too."""
    for i, x in enumerate(outer):
        if x == REST:
            return len(inner) > i
        if i >= len(inner):
            return False
        y = inner[i]
        if y == REST or (x != ONE and (y == ONE or y != x)):
            return False
    return len(inner) == len(outer)


def announce_value(topic: str, entry: bytes) -> bytes:
    """A `top/` field's value: the topic and its publisher's entry (as the topic's `pub/` field holds it)."""
    return msgpack.packb({"t": topic, "p": entry}, use_bin_type=True)


def announced_topic(raw: object) -> str | None:
    """The topic a `top/` value announces (None: not one)."""
    try:
        topic = msgpack.unpackb(raw, raw=False)["t"]  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - any malformed value announces nothing
        return None
    return topic if isinstance(topic, str) else None


def watched_patterns(raw: object) -> list[str] | None:
    """The patterns a `pat/` value lists (None: malformed)."""
    try:
        specs = msgpack.unpackb(raw, raw=False)  # type: ignore[arg-type]
        patterns = [d["p"] for d in specs]
    except Exception:  # noqa: BLE001 - any malformed value lists nothing
        return None
    return patterns if all(isinstance(p, str) for p in patterns) else None


class PatternTrie:
    """Patterns, each with the values that registered it, matched against topics: a trie of levels
    (one node per level, `*` and `>` as children like any other) walked once per topic, and the
    answers for the last MATCH_CACHE topics kept until a pattern is added or removed (topics with the
    same answer share one set of it)."""

    def __init__(self) -> None:
        self._root: dict = {}
        self._cache: dict[str, frozenset] = {}
        self._answers: dict[frozenset, frozenset] = {}  # each answer in the cache, once
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, pattern: str, value: Hashable) -> None:
        node = self._root
        for level in parse(pattern):
            node = node.setdefault(level, {})
        values = node.setdefault(None, set())
        if value not in values:
            values.add(value)
            self._size += 1
            self._cache.clear()
            self._answers.clear()

    def remove(self, pattern: str, value: Hashable) -> None:
        path, node = [], self._root
        for level in parse(pattern):
            if level not in node:
                return
            path.append((node, level))
            node = node[level]
        values = node.get(None)
        if not values or value not in values:
            return
        values.discard(value)
        self._size -= 1
        self._cache.clear()
        self._answers.clear()
        if not values:
            del node[None]
        for parent, level in reversed(path):  # prune the branches left empty
            if parent[level]:
                break
            del parent[level]

    def match(self, topic: str) -> frozenset:
        """The values of every pattern that matches `topic`."""
        hit = self._cache.get(topic)
        if hit is not None:
            return hit
        parts = topic.split("/")
        found: set = set()
        nodes = [self._root]
        for part in parts:
            following = []
            for node in nodes:
                rest = node.get(REST)
                if rest is not None and None in rest:
                    found |= rest[None]  # `>` here matches this level and everything after it
                for key in (part, ONE):
                    child = node.get(key)
                    if child is not None:
                        following.append(child)
            nodes = following
            if not nodes:
                break
        else:
            for node in nodes:
                found |= node.get(None, set())
        if len(self._cache) >= MATCH_CACHE:
            self._cache.clear()
            self._answers.clear()
        answer = frozenset(found)
        answer = self._cache[topic] = self._answers.setdefault(answer, answer)
        return answer
