"""A client's publications, from advertising to each message sent: one room for a publication's life.

`advertise` registers the publication with its topic's owner (pubsub/registrar.py) and waits, within a
lease, until the subscribers the owner knows of have their filters on our PUB socket (the slow-joiner
effect: a message sent before a subscriber's filter arrives is lost to it); `publish` advertises a
topic on first use, waits for another thread's advertising of it, and sends (pubsub/publishing.py, the
sockets). The Client (pubsub/client.py) holds one `Publisher` and hands its calls here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from dht.client import DhtError
from dht.subjects import announced_at, check_publishable
from pubsub.advertising import MAX_FILTER_WAIT, MAX_HELD, Advertiser, Answer, Registering
from pubsub.archive import ArchiveFeed
from pubsub.dedup import Published, check_msg_id
from pubsub.directory import GRP, LEASE_HEARTBEATS, PUB, SUB, PublisherEntry
from pubsub.envelope import DEFAULT_PRIORITY, MAX_KEY_CHARS
from pubsub.exclusive import Fence
from pubsub.group_client import expect_groups
from pubsub.history import DEFAULT_BOUNDS, RetentionBounds
from pubsub.message import DeadLetter
from pubsub.patterns import WATCHER, announce_field, announce_value, pattern_groups, watchers_of
from pubsub.publication import Publication, check_mode
from pubsub.publishing import PublishingSide, check_topic
from pubsub.registrar import Registrar
from pubsub.registration import Registration

log = logging.getLogger(__name__)

MAX_PAYLOAD_BYTES = 1_000_000  # an envelope stays under the 1 MiB every socket accepts


def refuse(waiting: Future, err: str) -> None:
    """A policy refused a registration: whoever waits for it gets PermissionError (later, as after a
    policy change, the registrar has logged it)."""
    if not waiting.done():
        waiting.set_exception(PermissionError(err))


def retention(history: int, messages: int | None, seconds: float | None, size: int | None) -> RetentionBounds:
    """A publication's retention: the defaults (at least `history` messages) where a bound is not given."""
    defaults = RetentionBounds(messages=max(RetentionBounds.messages, history))
    return RetentionBounds(defaults.messages if messages is None else messages,
                           defaults.seconds if seconds is None else seconds,
                           defaults.bytes if size is None else size)


def check_same_terms(held: Publication, pub: Publication) -> None:
    """A topic advertised again must come with the terms it has (ValueError otherwise)."""
    if ((held.history_size, held.strength, held.mode, held.bounds, held.archive)
            != (pub.history_size, pub.strength, pub.mode, pub.bounds, pub.archive)):
        raise ValueError(f"{pub.topic!r} is already advertised with other terms "
                         f"(history {held.history_size}, strength {held.strength}, mode {held.mode})")


class Publisher:
    """The publications of one client (`id`), through its publishing side and its registrar."""

    def __init__(self, publishing: PublishingSide, registrar: Registrar, client_id: str, service_endpoint: str,
                 via: str, heartbeat: float, timeout: float, check_open: Callable[[], None]) -> None:
        """`check_open` raises when the client is closed (then nothing more is advertised)."""
        self.publishing, self.registrar = publishing, registrar
        self._check_open = check_open
        self.id, self.service_endpoint, self.via = client_id, service_endpoint, via
        self.heartbeat, self.timeout = heartbeat, timeout
        self._lock = threading.Lock()
        self._advertising: set[str] = set()  # topics being registered now
        self._settled = threading.Condition(self._lock)  # one of them is done (a condition for all: an
        # Event per topic cost a first publish a tenth of its time)
        self.on_dead_letter: Callable[[DeadLetter], None] | None = None  # where dropped first messages go
        self._begin_bound = self._begin  # (one bound method: a burst of new topics makes no object each for it)
        self.advertiser = Advertiser(self._settle, self.publishing.in_place_since, self._advertised,
                                     max(LEASE_HEARTBEATS * heartbeat, 3.0), self.publishing.look_at_filters)

    def advertise(self, topic: str, *, history: int = 0, reliable: bool = False, strength: int | None = None,
                  mode: str = "direct", retain_messages: int | None = None, retain_seconds: float | None = None,
                  retain_bytes: int | None = None, archive: bool = False, timeout: float | None = None,
                  fence: Fence | None = None) -> None:
        """Register as a publisher of `topic` (pubsub/client.py's Client.advertise says what the terms mean);
        returns once the owner holds the registration. `fence`: an exclusive topic's election, which
        this publisher must lead to send (pubsub/exclusive.py)."""
        self._check_open()
        check_publishable(check_topic(topic))
        bounds = retention(history, retain_messages, retain_seconds, retain_bytes)
        pub = Publication(topic, self.id, history, reliable, strength, check_mode(mode), bounds, archive)
        pub.fence = fence
        wait = self.timeout if timeout is None else timeout
        with self._lock:
            held = self.publishing.publications.get(topic)
            if held is not None:
                check_same_terms(held, pub)
                ready = topic in self._advertising
            else:
                self.publishing.add(pub)
                self._advertising.add(topic)
                ready = True
                held = None
        if held is not None:  # another thread's advertise of it (or its first publish) may still be under way
            if ready:
                self._await_advertised(topic, wait)
            return
        try:
            self._register(topic, pub, mode, archive, wait)
        finally:
            self._done_advertising(topic)

    def advertise_many(self, topics: Iterable[str], *, history: int = 0, reliable: bool = False,
                       retain_messages: int | None = None, retain_seconds: float | None = None,
                       retain_bytes: int | None = None, timeout: float | None = None) -> None:
        """`advertise` each of `topics` with the same terms (direct mode): their registrations go out
        together, batched per owner on the advertiser's thread as a burst of first publishes' do, and
        this returns once each is in place as `advertise` would have returned for it. One after another,
        each waited a round trip and its subscribers' filters before the next began (a publisher of 200
        topics spent seconds of its start-up there). Raises as `advertise` does for the first topic that
        failed (DhtError, a policy's refusal included: the log says why); the others stay advertised."""
        self._check_open()
        wanted = list(dict.fromkeys(check_publishable(check_topic(t)) for t in topics))
        if self.publishing.data is not None:  # a journaling client registers before it holds anything, as
            for topic in wanted:              # its first publishes do: one topic after another
                self.advertise(topic, history=history, reliable=reliable, retain_messages=retain_messages,
                               retain_seconds=retain_seconds, retain_bytes=retain_bytes, timeout=timeout)
            return
        bounds = retention(history, retain_messages, retain_seconds, retain_bytes)
        wait = self.timeout if timeout is None else timeout
        pubs = {t: Publication(t, self.id, history, reliable, None, "direct", bounds, False) for t in wanted}
        begun = []
        with self._lock:  # every topic's terms checked before any is added
            for topic, pub in pubs.items():
                if (held := self.publishing.publications.get(topic)) is not None:
                    check_same_terms(held, pub)
            for topic, pub in pubs.items():
                if topic not in self.publishing.publications:
                    self.publishing.add(pub)
                    self.publishing.hold(topic)
                    self._advertising.add(topic)
                    begun.append((topic, pub))
        for topic, pub in begun:
            self.advertiser.begin(topic, self._begin_bound, pub)
        with self._lock:  # the answers within `wait`, then the filters within the advertiser's own bound
            self._settled.wait_for(lambda: self._advertising.isdisjoint(wanted),
                                   wait + self.advertiser.filter_wait + MAX_FILTER_WAIT)
            failed = [t for t in wanted if t in self._advertising or t not in self.publishing.publications]
        if failed:
            raise DhtError(f"could not register topic {failed[0]!r} via {self.via} within {wait:g}s"
                           + (f" ({len(failed) - 1} more topics failed too)" if len(failed) > 1 else ""))

    def _done_advertising(self, topic: str) -> None:
        with self._lock:
            self._advertising.discard(topic)
            self._settled.notify_all()

    def _await_advertised(self, topic: str, wait: float) -> None:
        """Another thread is registering `topic`: sending before its subscribers are connected would
        lose the messages, so wait for it (and fail as it failed)."""
        with self._lock:
            done = self._settled.wait_for(lambda: topic not in self._advertising, wait)
        if not done or topic not in self.publishing.publications:
            raise DhtError(f"could not register topic {topic!r} via {self.via} within {wait:g}s")

    def _start(self, topic: str, pub: Publication, mode: str, archive: bool, wait: float,
               answer: Callable[[], Any] = Future) -> Registering:
        """Send the publication's fields to the ring (its record, its prefix records): nothing waits here.
        `answer`: what holds each answer (an `Answer` when no caller blocks on them)."""
        placed = answer()
        entry = pub.entry(self.publishing.endpoint, self.service_endpoint, patterns=self.publishing.policy is None)
        reg = Registration(topic, PUB + self.id, entry.to_bytes(), watch=False,
                           relay_service="relay_in" if mode == "relay" else None,
                           on_placed=lambda r: placed.set_result((r.counted, r.fields or {})),
                           read=GRP if mode == "direct" else None,
                           on_relay=lambda r: self.publishing.follow_relay(topic, r.relay),
                           on_refused=lambda _r, err: refuse(placed, err),
                           count=f"{SUB}{mode}/")
        regs = [reg]
        watchers = self._announce(topic, entry, regs, answer) if mode == "direct" else []
        register = self.registrar.register
        self.registrar.call(lambda: [register(r) for r in regs])
        if archive:
            feed = ArchiveFeed(pub, self.publishing.lock)
            self.registrar.call(lambda: self.registrar.archives.feeds.__setitem__(reg.key, feed))
        return Registering(topic, mode, placed, watchers, time.monotonic() + wait)

    def _settle(self, r: Registering) -> None:
        """What the owner and the prefix records answered: the subscribers to wait for, and the groups
        owed our messages from the first. DhtError when the owner did not answer in time (our field
        is then taken back), PermissionError when it refused."""
        if not r.placed.done():
            self.registrar.call(lambda: self.registrar.unregister(r.topic, PUB + self.id))
            raise DhtError(f"could not register topic {r.topic!r} via {self.via} within "
                           f"{self.timeout:g}s")
        subscribers, fields = r.placed.result()
        if r.mode == "direct":
            expect_groups(self.publishing, r.topic, fields)
        for found in r.watchers:  # pattern subscribers the prefix records know of wait for this topic too
            if not found.done() or found.exception() is not None:
                continue  # no word from a prefix record: its pattern subscribers learn of the topic later
            plain, groups = found.result()
            subscribers += plain
            if r.mode == "direct" and groups:
                expect_groups(self.publishing, r.topic, groups)
        r.subscribers = min(subscribers, 1) if r.mode == "relay" else subscribers

    def _register(self, topic: str, pub: Publication, mode: str, archive: bool, wait: float) -> None:
        r = self._start(topic, pub, mode, archive, wait)
        for answer in (r.placed, *r.watchers):
            try:
                answer.result(max(0.0, r.deadline - time.monotonic()))
            except (FutureTimeout, PermissionError):
                pass  # _settle says what it means
        try:
            self._settle(r)
        except (DhtError, PermissionError):
            self.publishing.remove(topic)
            raise
        self._await_filters(topic, r.subscribers,
                            min(r.deadline, time.monotonic() + max(LEASE_HEARTBEATS * self.heartbeat, 3.0)))

    def _advertise_later(self, topic: str) -> None:
        """A first `publish` on `topic`: advertise it with the defaults, finished by the advertiser thread
        while its messages wait at the publishing side."""
        self._check_open()
        check_publishable(check_topic(topic))
        pub = Publication(topic, self.id, 0, False, None, "direct", DEFAULT_BOUNDS, False)
        with self._lock:
            if topic in self.publishing.publications:
                return  # another thread's advertise of it got there first
            self.publishing.add(pub)
            self.publishing.hold(topic)
            self._advertising.add(topic)
        self.advertiser.begin(topic, self._begin_bound, pub)

    def _begin(self, topic: str, pub: Publication) -> Registering | None:
        """Send a first publish's registration (on the advertiser's thread when it waited for its burst to
        end): None when the topic is no longer published by then."""
        if self.publishing.publications.get(topic) is not pub:
            self._done_advertising(topic)
            return None
        return self._start(topic, pub, "direct", False, self.timeout, self._answer)

    def _answer(self) -> Answer:
        return Answer(self.advertiser.nudge)

    def _advertised(self, r: Registering, error: BaseException | None) -> None:
        """The advertiser finished `r`: its messages go, or (a failure) become dead letters."""
        if error is None:
            if r.held < r.subscribers:  # (the advertiser waited its while: the others are slow, or dead)
                self.publishing.hold_late(r.topic, self.advertiser.filter_wait)
            self.publishing.release(r.topic)
        else:
            pub = self.publishing.publications.get(r.topic)
            early = max(pub.early_exact_seq, pub.early_seq) if pub is not None else 0
            dropped = self.publishing.drop_held(r.topic)
            self.publishing.remove(r.topic)
            reason = f"the topic could not be registered: {error}"
            if early:  # (sent at once to subscribers already connected: pubsub/coalescing.py `early`)
                reason += f"; up to seq {early} they went to the subscribers already connected to us"
            log.error("%s: %s; %d message(s) published on it are dead-lettered", r.topic, reason, len(dropped))
            if dropped and self.on_dead_letter is not None:
                self.on_dead_letter(DeadLetter(r.topic, self.id, "publisher", dropped[0].seq, dropped[-1].seq,
                                               reason, time.time()))
        self._done_advertising(r.topic)

    def _announce(self, topic: str, entry: PublisherEntry, regs: list[Registration],
                  answer: Callable[[], Any]) -> list:
        """Announce `topic` at its prefix records (pubsub/patterns.py); each future gets the number of
        clients whose plain patterns there match it, and the consumer groups whose patterns do."""
        found = []
        value = announce_value(topic, entry)
        by_pattern = entry.patterns  # our socket counts each pattern's filter
        for record in announced_at(topic):
            counted = answer()
            reg = Registration(record, announce_field(self.id, topic), value, watch=False,
                               read=WATCHER,
                               on_placed=lambda r, c=counted: c.set_result(
                                   (watchers_of(r.fields or {}, topic, by_pattern),
                                    pattern_groups(r.fields or {}, topic))),
                               on_refused=lambda _r, err, c=counted: refuse(c, err))
            regs.append(reg)
            found.append(counted)
        return found

    def _await_filters(self, topic: str, subscribers: int, deadline: float) -> None:
        """Give the subscribers the owner knows of the moment it takes them to hear of us and connect,
        up to a lease (a subscriber that died keeps its registration that long); for one that has not
        connected by then the messages are kept a lease more (pubsub/history.py's late hold), and the
        log says so."""
        t0 = time.monotonic()
        while subscribers and self.publishing.in_place(topic) < subscribers:
            if time.monotonic() >= deadline:
                log.warning("%s: %d of the %d subscribers the owner knows connected within %.1f s; the others "
                            "(dead, or slow to hear of us) get the first messages only if they are reliable "
                            "and connect within %.1f s more", topic, self.publishing.in_place(topic), subscribers,
                            time.monotonic() - t0, self.advertiser.filter_wait)
                self.publishing.hold_late(topic, self.advertiser.filter_wait)
                return
            time.sleep(0.002)  # polling a condition with a deadline: the filters arrive on our socket

    def publish(self, topic: str, payload: bytes | str, key: str | None = None,
                priority: int = DEFAULT_PRIORITY, msg_id: str | None = None) -> int:
        """Send one message on `topic` to its subscribers (and to one member of each consumer group);
        returns its sequence number (from 1). `key`: a key-ordered group hands every message of one key
        to one member at a time, in publish order; `priority` (0..9, default 4): where a group's
        messages wait, higher goes first (lower ones keep a share). Both matter to groups only.
        `msg_id`: a message sent again with an id already sent within the dedup window is not sent
        again (pubsub/dedup.py); the number returned is then a `Published` whose `duplicate` is True."""
        if msg_id is not None:
            return self._publish_once(topic, payload, key, priority, check_msg_id(msg_id))
        if key is not None or type(priority) is not int or priority != DEFAULT_PRIORITY:
            self._check_terms(key, priority)
        if type(payload) is not bytes or len(payload) > MAX_PAYLOAD_BYTES:
            payload = self._checked_payload(payload)
        if topic in self._advertising or topic not in self.publishing.publications:
            self._ready_to_publish(topic)
        env = self.publishing.publish(topic, payload, key, priority)
        return 0 if env is None else env.seq

    def _publish_once(self, topic: str, payload: bytes | str, key: str | None, priority: int, msg_id: str) -> int:
        self._check_terms(key, priority)
        payload = self._checked_payload(payload)
        self._ready_to_publish(topic)
        return Published(*self.publishing.publish_once(topic, payload, msg_id, key, priority))

    def _ready_to_publish(self, topic: str) -> None:
        """`topic` advertised (a first publish starts it) and, while it registers, room to hold one more."""
        if topic not in self.publishing.publications:
            if self.publishing.data is None:
                self._advertise_later(topic)
            else:
                self.advertise(topic)
        if topic in self._advertising and not self.publishing.holding(topic, MAX_HELD):
            self._await_advertised(topic, self.timeout)

    def publish_many(self, topic: str, payloads: Iterable[bytes | str], *, key: str | None = None,
                     priority: int = DEFAULT_PRIORITY) -> int:
        """`publish` each payload in order, for an application that has several at hand: the same
        messages, numbered one after another, at a fraction of the cost per message. Every payload is
        checked before any is sent (a bad one raises and nothing is published); returns the last
        sequence number (0 for no payloads)."""
        batch = [self._checked_payload(p) for p in payloads]
        self._check_terms(key, priority)
        if not batch:
            return 0
        if topic not in self.publishing.publications:
            self.advertise(topic)
        elif topic in self._advertising:
            self._await_advertised(topic, self.timeout)
        return self.publishing.publish_many(topic, batch, key, priority)

    @staticmethod
    def _checked_payload(payload: bytes | str) -> bytes:
        if isinstance(payload, str):
            payload = payload.encode("utf-8")
        elif not isinstance(payload, bytes | bytearray | memoryview):
            raise TypeError(f"a payload is bytes or str, not {type(payload).__name__}")
        if len(payload) > MAX_PAYLOAD_BYTES:
            raise ValueError(f"a payload is at most {MAX_PAYLOAD_BYTES} bytes, got {len(payload)}")
        return bytes(payload)

    @staticmethod
    def _check_terms(key: str | None, priority: int) -> None:
        if key is not None and (not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_CHARS):
            raise ValueError(f"a key is 1..{MAX_KEY_CHARS} characters of text, got {key!r}")
        if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 9:
            raise ValueError(f"priority is an integer in 0..9, got {priority!r}")
