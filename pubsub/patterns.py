"""Pattern subscriptions (`subscribe("sensors/*/temp")`): where a pattern learns its topics, and how a
publisher learns that a pattern is waiting for a topic of its.

The meeting point is a *prefix record* on the ring (dht/subjects.py): a publisher announces each topic
it publishes at the prefix records of the topic's first levels, as a leased field
`top/<publisher id>/<topic id>` whose value names the topic and carries the same publisher entry as
the topic's own record (endpoints, terms). A pattern subscriber keeps one leased field `pat/<client
id>` at the prefix record of each literal prefix it follows, listing its patterns there, and watches
the record's `top/` namespace: the topics announced there (read when placed, then every change on the
owner's events socket) are the publishers it connects to, each matching topic followed as an exact
topic is (its own per-topic state, repairs and histories), all delivered to the one subscription.
No node sees every subscription, and a record's fields are placed, renewed, replicated, handed over
and expired like every other registration.

A publisher announcing a topic reads the record's `pat/` fields in the same request, and counts the
clients whose patterns match: `advertise()` then waits for their filters as for exact subscribers, so
the first message on a brand-new topic reaches a pattern subscriber that is already listening.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext

import msgpack

from dht.ids import key_id
from dht.subjects import ANNOUNCE, WATCHER, matches, parse
from dht.subjects import announce_value as topic_value
from pubsub.directory import PublisherEntry
from pubsub.registration import Registration

log = logging.getLogger(__name__)

# ANNOUNCE "top/<publisher id>/<topic id, hex>": a topic announced at a prefix record;
# WATCHER "pat/<client id>": a client's patterns at a prefix record (dht/subjects.py: the node reads both)
MAX_PATTERNS = 256  # pattern subscriptions per client
MAX_TOPICS_PER_PATTERN = 100_000  # topics one pattern subscription follows at most (then it warns)
RETURNED_NAMES = 1000  # the latest topics a pattern left and followed again, kept by name


def announce_field(client_id: str, topic: str) -> str:
    return f"{ANNOUNCE}{client_id}/{key_id(topic):x}"


def announce_value(topic: str, entry: PublisherEntry | bytes) -> bytes:
    """A `top/` field's value: the topic and its publisher's entry (or the entry's bytes, made once)."""
    return topic_value(topic, entry if isinstance(entry, bytes) else entry.to_bytes())


def parse_announcement(name: object, raw: object) -> tuple[str, PublisherEntry] | None:
    """(topic, publisher) of one `top/` field, or None for anything else (a malformed one is logged)."""
    if not (isinstance(name, str) and name.startswith(ANNOUNCE) and isinstance(raw, bytes)):
        return None
    try:
        d = msgpack.unpackb(raw, raw=False)
        topic, entry = d["t"], PublisherEntry.from_bytes(d["p"])
        if not isinstance(topic, str) or name != announce_field(entry.id, topic):
            raise ValueError("the name does not match the topic and publisher")
    except Exception as exc:  # noqa: BLE001 - any malformed field is skipped, said once in the log
        log.warning("ignoring %s: %s", name, exc)
        return None
    return topic, entry


class Announcements:
    """A prefix record's topics and their publishers, as the watch last read them and changes since:
    each field parsed once, whatever the record's size."""

    def __init__(self) -> None:
        self.by_name: dict[str, tuple[str, PublisherEntry]] = {}
        self.by_topic: dict[str, dict[str, PublisherEntry]] = {}

    def replace(self, fields: dict) -> set[str]:
        """The record read whole; returns the topics whose publishers may have changed."""
        touched = set(self.by_topic)
        self.by_name.clear()
        self.by_topic.clear()
        return touched | self.apply(fields, [])

    def apply(self, sets: dict, dels: list) -> set[str]:
        """Fields set and deleted since; returns the topics they touch."""
        touched = set()
        for name in [*dels, *sets]:
            old = self.by_name.pop(name, None)
            if old is not None:
                touched.add(old[0])
                at = self.by_topic[old[0]]
                at.pop(name, None)
                if not at:
                    del self.by_topic[old[0]]
        for name, raw in sets.items():
            found = parse_announcement(name, raw)
            if found is not None:
                self.by_name[name] = found
                self.by_topic.setdefault(found[0], {})[name] = found[1]
                touched.add(found[0])
        return touched

    def entries(self, topic: str) -> list[PublisherEntry]:
        return sorted(self.by_topic.get(topic, {}).values(), key=lambda e: e.id)


def watcher_value(specs: list[dict]) -> bytes:
    """A client's `pat/` value: its patterns at the record, each {"p": pattern} or, for a consumer group,
    {"p": pattern, "g": group, "m": the member's terms (pubsub/directory.py member_value)}."""
    return msgpack.packb(sorted(specs, key=lambda d: (d["p"], d.get("g") or "")), use_bin_type=True)


def _specs(fields: dict) -> list[tuple[str, dict]]:
    out = []
    for name, raw in fields.items():
        if not (isinstance(name, str) and name.startswith(WATCHER) and isinstance(raw, bytes)):
            continue
        try:
            specs = msgpack.unpackb(raw, raw=False)
            out.extend((name[len(WATCHER):], d) for d in specs[:MAX_PATTERNS] if isinstance(d, dict))
        except Exception:  # noqa: BLE001 - a malformed field counts for nobody
            continue
    return out


def _matching(spec: dict, topic: str) -> bool:
    try:
        return matches(parse(spec["p"]), topic)
    except (KeyError, TypeError, ValueError):
        return False


def watchers_of(fields: dict, topic: str, by_pattern: bool = False) -> int:
    """The filters a publisher of `topic` can expect from the clients whose `pat/` fields hold a plain
    pattern matching it: one per client (each subscribes the topic itself), or, `by_pattern` (a publisher
    that sends pattern frames), one per pattern taken by its own filter, and one per client for those
    that subscribe each topic ("x": reliable, durable or with history)."""
    plain = [(client, spec) for client, spec in _specs(fields) if "g" not in spec and _matching(spec, topic)]
    if not by_pattern:
        return len({client for client, _spec in plain})
    return (len({(client, spec["p"]) for client, spec in plain if not spec.get("x")})
            + len({client for client, spec in plain if spec.get("x")}))


def pattern_groups(fields: dict, topic: str) -> dict[str, bytes]:
    """The consumer groups whose pattern matches `topic`, as the topic's own record would list their
    members (`grp/<group>/<client id>` -> terms): a publisher owes them its messages from the first."""
    out = {}
    for client, spec in _specs(fields):
        group, terms = spec.get("g"), spec.get("m")
        if isinstance(group, str) and isinstance(terms, bytes) and _matching(spec, topic):
            out[f"grp/{group}/{client}"] = terms
    return out


class PatternFollower:
    """One pattern subscription: the topics it follows now, kept equal to what its prefix record
    announces (registrar thread in, io loop out)."""

    def __init__(self, pattern: str, attach: Callable[[str, list[PublisherEntry]], None],
                 update: Callable[[str, list[PublisherEntry]], None], detach: Callable[[str], None],
                 spec: dict | None = None) -> None:
        self.pattern = pattern
        self.levels = parse(pattern)
        self.spec = spec or {"p": pattern}  # what the prefix record is told of it
        self._attach, self._update, self._detach = attach, update, detach
        self.topics: dict[str, list[PublisherEntry]] = {}
        self.first_read: Future = Future()
        self.not_followed = 0  # topics it matched past MAX_TOPICS_PER_PATTERN (each time one was announced)
        # topics it left once their announcements had lapsed for a lease and followed again when they came
        # back: what their publishers sent meanwhile is owed only from their retention (else dead letters)
        self.returned = 0
        self.returned_names: deque[str] = deque(maxlen=RETURNED_NAMES)

    def refresh(self, topics: set[str], index: Announcements) -> None:
        """Follow what `index` now says of `topics` (those a change touched)."""
        for topic in topics:
            if not matches(self.levels, topic):
                continue
            entries = index.entries(topic)
            held = self.topics.get(topic)
            if not entries:
                if held is not None:
                    del self.topics[topic]  # its publishers are gone past their leases
                    self._detach(topic)
            elif held is None:
                if len(self.topics) >= MAX_TOPICS_PER_PATTERN:
                    self.not_followed += 1
                    log.warning("%s follows %d topics already (its bound); %r is not followed",
                                self.pattern, MAX_TOPICS_PER_PATTERN, topic)
                    continue
                self.topics[topic] = entries
                self._attach(topic, entries)
            elif held != entries:
                self.topics[topic] = entries
                self._update(topic, entries)
        if not self.first_read.done():
            self.first_read.set_result(sorted(self.topics))

    def followed_again(self, topic: str) -> None:
        """`topic` was left (announcements lapsed past the grace) and is followed again (io loop)."""
        self.returned += 1
        self.returned_names.append(topic)

    @property
    def warnings(self) -> list[str]:
        """What this pattern does not receive because of its bound (`Subscription.warnings`)."""
        if not self.not_followed:
            return []
        return [f"{self.pattern} matched topics past its bound of {MAX_TOPICS_PER_PATTERN} followed topics "
                f"{self.not_followed} times; those are not followed"]


class PatternWatches:
    """A client's `pat/` fields, one per prefix record, each listing the client's patterns there, and the
    followers each record's announcements go to. Registrar thread only, but for `add` and `remove`,
    which hand their work to it."""

    def __init__(self, client_id: str, register: Callable[[Registration], None],
                 unregister: Callable[[str, str], None],
                 together: Callable[[], AbstractContextManager] = nullcontext) -> None:
        """`together`: a block whose io-loop calls run in one go (IoLoop.together): the followers of one
        record take a topic its announcement brings at once, none before the others."""
        self.client_id = client_id
        self._together = together
        self._register, self._unregister = register, unregister
        self.followers: dict[str, dict[str, PatternFollower]] = {}  # record -> pattern -> follower
        self.indexes: dict[str, Announcements] = {}  # record -> what it announces
        self.lock = threading.Lock()

    def add(self, record: str, follower: PatternFollower) -> None:
        with self.lock:
            at = self.followers.setdefault(record, {})
            at[follower.pattern] = follower
            specs = [f.spec for f in at.values()]
        self._register(self._watch(record, specs))

    def remove(self, record: str, pattern: str) -> None:
        with self.lock:
            at = self.followers.get(record, {})
            at.pop(pattern, None)
            specs = [f.spec for f in at.values()]
            if not at:
                self.followers.pop(record, None)
                self.indexes.pop(record, None)
        if specs:
            self._register(self._watch(record, specs))
        else:
            self._unregister(record, WATCHER + self.client_id)

    def _watch(self, record: str, specs: list[dict]) -> Registration:
        def changed(reg: Registration) -> None:
            with self.lock:
                followers = list(self.followers.get(record, {}).values())
            index = self.indexes.setdefault(record, Announcements())
            if reg.delta is None:
                touched = index.replace(reg.fields or {})
            else:
                touched = index.apply(*reg.delta)
            with self._together():
                for f in followers:
                    f.refresh(touched if reg.delta is not None or f.first_read.done() else set(index.by_topic),
                              index)

        def refused(_reg: Registration, err: str) -> None:
            """A policy refused the field: the patterns still waiting to be placed are refused (the
            caller's subscribe raises), and the others are placed again without them."""
            with self.lock:
                at = self.followers.get(record, {})
                waiting = [f for f in at.values() if not f.first_read.done()]
                for f in waiting:
                    del at[f.pattern]
                rest = [f.spec for f in at.values()]
                if not at:
                    self.followers.pop(record, None)
            for f in waiting:
                f.first_read.set_exception(PermissionError(err))
            if rest:
                self._register(self._watch(record, rest))

        return Registration(record, WATCHER + self.client_id, watcher_value(specs), watch=True,
                            namespace=ANNOUNCE, on_placed=changed, on_publishers=changed, on_refused=refused)
