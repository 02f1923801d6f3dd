"""What a Client does for a pattern subscription (`subscribe("sensors/*/temp")`): it places the
pattern at its prefix record (pubsub/patterns.py) and follows each topic the record announces that
the pattern matches, as the io loop follows an exact topic, into the one `Subscription` the
application holds. It knows the Client only as a `PatternHost` (it never imports the Client).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol

from dht.client import DhtError
from dht.subjects import parse, pattern_record
from pubsub.delivery import Dispatcher, Subscription
from pubsub.directory import PublisherEntry
from pubsub.dispatch import GroupTerms
from pubsub.member import GroupMembership
from pubsub.message import Message
from pubsub.pattern_intake import PatternTaker
from pubsub.patterns import MAX_PATTERNS, PatternFollower, PatternWatches
from pubsub.positions import PatternPositions
from pubsub.subscription import HELD_LIMIT, TopicState

log = logging.getLogger(__name__)


class _Nobody:
    """What a topic met after `subscribe` returned is attached with: nobody waits for its confirmation."""

    def done(self) -> bool:
        return True

    def set_result(self, _result: object) -> None:
        pass

    def set_exception(self, _exc: BaseException) -> None:
        pass


NOBODY = _Nobody()


class FirstTopics:
    """The confirmations `subscribe` waits for: those of the topics the pattern matched when it was
    placed. Once it has waited, topics met later are attached with `NOBODY`: nothing is kept for each
    topic a long-lived pattern ever followed."""

    def __init__(self) -> None:
        self._futures: list[Future] | None = []

    def next(self) -> Future | _Nobody:
        if self._futures is None:
            return NOBODY
        done: Future = Future()
        self._futures.append(done)
        return done

    def close(self) -> list[Future]:
        """The confirmations to wait for now (the caller's thread); later topics' are nobody's."""
        futures, self._futures = self._futures or [], None
        return futures


class PatternHost(Protocol):
    """What pattern subscriptions use of their client (pubsub/client.py's Client)."""

    id: str
    via: str
    timeout: float
    io: Any  # pubsub/io_loop.py IoLoop
    registrar: Any  # pubsub/registrar.py Registrar
    patterns: PatternWatches
    _lock: threading.Lock
    _subscriptions: dict[str, Subscription]
    _dispatcher: Dispatcher | None
    _callback_thread: bool

    def unsubscribe(self, topic: str) -> None: ...

    def _dead_letter(self, letter: Any) -> None: ...


def subscribe_pattern(client: PatternHost, pattern: str, history: int, reliable: bool, mode: str,
                      callback: Callable[[Message], None] | None, timeout: float | None, pending_limit: int,
                      history_policy: str, batch: bool, positions: PatternPositions | None = None) -> Subscription:
    """`Client.subscribe` of a pattern: returns once the topics its prefix record announces now are
    followed, each with its known publishers' filters in place. `positions`: a durable pattern's."""
    levels = parse(pattern)
    record = pattern_record(levels)
    if mode != "direct":
        raise ValueError("a pattern subscription connects to each matching topic's publishers: mode must be direct")
    state = TopicState(pattern, client.id, history, reliable, mode, None, history_policy,
                       held_limit=min(HELD_LIMIT, max(pending_limit, 1000)))
    with client._lock:
        if pattern in client._subscriptions:
            raise ValueError(f"already subscribed to {pattern!r} (unsubscribe first to change the terms)")
        if sum(1 for s in client._subscriptions.values() if s.pattern is not None) >= MAX_PATTERNS:
            raise ValueError(f"a client follows at most {MAX_PATTERNS} patterns")
        if callback is not None and client._callback_thread and client._dispatcher is None:
            client._dispatcher = Dispatcher(client.id)
        handle = Subscription(pattern, state, client.unsubscribe, callback, client._dispatcher, pending_limit,
                              wake=client.io.wake, positions=positions,  # type: ignore[arg-type]
                              on_dead_letter=client._dead_letter, batch=batch)
        client._subscriptions[pattern] = handle
    wait = client.timeout if timeout is None else timeout
    first = FirstTopics()

    held_limit = min(HELD_LIMIT, max(pending_limit, 1000))

    def make_state(topic: str, late: bool = False) -> TopicState:
        start = positions.of(topic).start if positions is not None else None
        ts = TopicState(topic, client.id, history, reliable, mode, start, history_policy, held_limit=held_limit)
        if late and reliable:
            ts.owe_from_first()
        return ts

    def attach(topic: str, entries: list[PublisherEntry]) -> None:
        done = first.next()
        late = follower.first_read.done()  # announced after the pattern's first read: owed from seq 1
        met = client.io.topics.get(topic)  # (read across threads, a hint: the io loop decides)
        ts = None if met is not None and met.provisional else make_state(topic, late)

        def on_io() -> None:  # a topic met by its frames already needs no state of its own
            held = client.io.topics.get(topic)
            if ts is None and held is not None and held.provisional and client.io.handles.get(topic) is handle:
                client.io.attach(held, handle, entries, None, done, wait)
            else:
                client.io.attach(ts or make_state(topic, late), handle, entries, None, done, wait)

        client.io.call(on_io)

    def update(topic: str, entries: list[PublisherEntry]) -> None:
        client.io.call(lambda: client.io.set_publishers(topic, entries))

    def detach(topic: str) -> None:
        client.io.call(lambda: client.io.leave_later(topic, handle))

    # a best-effort pattern without history takes its topics by the pattern's own frames, from their first
    # (pubsub/pattern_intake.py); a reliable, durable or history one subscribes each topic it follows,
    # whose terms its repairs need first (and the prefix record says so: "x"); so does any pattern on a
    # CURVE ring, where a topic's publishers are those its record names (a frame names its sender, unchecked)
    by_frames = positions is None and not reliable and not history and client.io.setup is None
    follower = PatternFollower(pattern, attach, update, detach, spec=None if by_frames else {"p": pattern, "x": 1})
    if by_frames:
        taker = PatternTaker(pattern, handle, make_state)
        client.io.call(lambda: client.io.add_pattern(taker))
    return _placed(client, handle, record, follower, first, wait, f"subscribe to {pattern!r}")


def _placed(client: PatternHost, handle: Subscription, record: str, follower: PatternFollower,
            first: FirstTopics, wait: float, what: str) -> Subscription:
    """Place the pattern at its prefix record and wait (up to `wait`) until the topics it matches now
    are followed: `handle`, or DhtError saying it could not `what` in time, or PermissionError."""
    handle.pattern = follower
    handle.pattern_record = record
    client.registrar.call(lambda: client.patterns.add(record, follower))
    if threading.current_thread() is client.io.thread:
        first.close()  # (nobody can wait here: the io loop itself places the topics)
        return handle
    try:
        follower.first_read.result(wait)
        for done in first.close():
            try:
                done.result(wait)
            except PermissionError:
                pass  # a topic this principal may not read: its publisher's gate withholds it, as it should
            except RuntimeError:
                pass  # a topic gone meanwhile (its announcements lapsed): it is no longer followed
    except FutureTimeout:
        client.unsubscribe(handle.topic)
        raise DhtError(f"could not {what} via {client.via} within {wait:g}s") from None
    except PermissionError:
        with client._lock:
            client._subscriptions.pop(handle.topic, None)
        handle.close()
        raise
    return handle


def join_pattern_group(client: PatternHost, pattern: str, group: str, terms: GroupTerms, member_terms: bytes,
                       callback: Callable[[Message], None] | None, timeout: float | None, pending_limit: int,
                       prefetch: int, auto_ack: bool) -> Subscription:
    """`Client.subscribe(pattern, group=...)`: this client joins the group on every topic the pattern
    matches, at each of its publishers, so that each message of any of them goes to one member. The
    pattern's field at its prefix record names the group, so a publisher of a topic that appears later
    owes the group its messages from the first, as for a group the topic's record lists."""
    levels = parse(pattern)
    record = pattern_record(levels)
    state = GroupMembership(pattern, group, client.id, prefetch, terms, auto_ack, on_dead_letter=client._dead_letter)
    with client._lock:
        if pattern in client._subscriptions:
            raise ValueError(f"already subscribed to {pattern!r} (unsubscribe first to change the terms)")
        if callback is not None and client._dispatcher is None:
            client._dispatcher = Dispatcher(client.id)  # a group's callbacks never hold the io loop
        handle = Subscription(pattern, state, client.unsubscribe, callback,  # type: ignore[arg-type]
                              client._dispatcher if callback else None, max(pending_limit, prefetch),
                              wake=client.io.wake)
        client._subscriptions[pattern] = handle
    wait = client.timeout if timeout is None else timeout
    first = FirstTopics()

    def attach(topic: str, entries: list[PublisherEntry]) -> None:
        member = GroupMembership(topic, group, client.id, prefetch, terms, auto_ack,
                                 on_dead_letter=client._dead_letter)
        member.wake = client.io.wake
        done = first.next()

        def join() -> None:
            if topic in client.io.members.states:
                log.warning("%s: this client is a member on topic %r already; group %r is not joined there twice",
                            pattern, topic, group)
                done.set_result(handle)
                return
            client.io.members.attach(member, handle, entries, done, wait)

        client.io.call(join)

    def update(topic: str, entries: list[PublisherEntry]) -> None:
        client.io.call(lambda: client.io.members.set_publishers(topic, entries))

    def detach(topic: str) -> None:
        client.io.call(lambda: client.io.detach(topic, close=False))

    follower = PatternFollower(pattern, attach, update, detach, spec={"p": pattern, "g": group, "m": member_terms})
    handle.group_pattern = True
    return _placed(client, handle, record, follower, first, wait, f"join group {group!r} of {pattern!r}")


def unsubscribe_pattern(client: PatternHost, handle: Subscription) -> None:
    """Stop following the pattern's topics, and drop it from its prefix record."""
    follower: PatternFollower = handle.pattern  # type: ignore[assignment]
    done = threading.Event()

    def leave() -> None:
        client.patterns.remove(handle.pattern_record, follower.pattern)
        topics = list(follower.topics)
        follower.topics.clear()

        def detach_all() -> None:
            client.io.remove_pattern(follower.pattern)
            for topic in topics:
                client.io.detach(topic, close=False, handle=None if handle.group_pattern else handle)
            done.set()

        client.io.call(detach_all)

    client.registrar.call(leave)
    handle.close()
    if threading.current_thread() not in (client.registrar.thread, client.io.thread):
        done.wait(client.timeout)
