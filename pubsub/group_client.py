"""What a Client does for consumer groups, as the publisher of a topic and as one of its members:
joining a group (the Client's `subscribe(topic, group=...)`), the groups a new publication owes its
messages to, and what a closing publisher's groups still lack. The work itself is pubsub/groups.py's
(the publisher) and pubsub/member.py's and member_links.py's (the member); this module wires them
to the Client's threads, which it knows only as a `GroupHost` (it never imports the Client).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol

from dht.client import DhtError
from pubsub.delivery import Dispatcher, Subscription
from pubsub.directory import member_field, member_value, members_from_fields
from pubsub.dispatch import MAX_PREFETCH, ORDERINGS, GroupTerms, check_group
from pubsub.member import GroupMembership
from pubsub.message import Message
from pubsub.registration import Registration


class GroupHost(Protocol):
    """What group membership uses of its client (pubsub/client.py's Client holds it; named here so that
    neither module imports the other)."""

    id: str
    via: str
    timeout: float
    io: Any  # pubsub/io_loop.py IoLoop: its `members` are this client's group memberships
    registrar: Any  # pubsub/registrar.py Registrar
    publishing: Any  # pubsub/publishing.py PublishingSide: its `groups` are what this client dispatches
    _lock: threading.Lock  # guards `_subscriptions` and `_dispatcher`
    _subscriptions: dict[str, Subscription]
    _dispatcher: Dispatcher | None  # the callback thread, made on first need

    def unsubscribe(self, topic: str) -> None: ...

    def _dead_letter(self, letter: Any) -> None: ...


log = logging.getLogger(__name__)


def group_terms(group: str, mode: str, durable: object, history: int, reliable: bool, prefetch: int,
                ack_wait: float, max_deliver: int, ordering: str) -> GroupTerms:
    """A member's terms, checked: ValueError naming what is wrong."""
    check_group(group)
    if mode != "direct":
        raise ValueError("consumer groups are dispatched directly by each publisher: mode must be direct")
    if history or reliable:
        raise ValueError("a consumer group member takes neither history nor reliable: the group's "
                         "delivery is acknowledged already")
    if durable is not None and not isinstance(durable, bool):
        raise ValueError("in a consumer group, durable is True or False")
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or not 1 <= prefetch <= MAX_PREFETCH:
        raise ValueError(f"prefetch must be an integer in 1..{MAX_PREFETCH}, got {prefetch!r}")
    if isinstance(max_deliver, bool) or not isinstance(max_deliver, int) or max_deliver < 1:
        raise ValueError(f"max_deliver must be a positive integer, got {max_deliver!r}")
    if isinstance(ack_wait, bool) or not isinstance(ack_wait, int | float) or not 0 < ack_wait <= 86_400:
        raise ValueError(f"ack_wait must be seconds in (0, 86400], got {ack_wait!r}")
    if ordering not in ORDERINGS:
        raise ValueError(f"ordering must be one of {', '.join(ORDERINGS)}, got {ordering!r}")
    return GroupTerms(ordering, float(ack_wait), max_deliver, bool(durable))


def join_group(client: GroupHost, topic: str, group: str, mode: str, callback: Callable[[Message], None] | None,
               timeout: float | None, pending_limit: int, durable: object, history: int, reliable: bool,
               prefetch: int, ack_wait: float, max_deliver: int, ordering: str, auto_ack: bool) -> Subscription:
    terms = group_terms(group, mode, durable, history, reliable, prefetch, ack_wait, max_deliver, ordering)
    state = GroupMembership(topic, group, client.id, prefetch, terms, auto_ack, on_dead_letter=client._dead_letter)
    state.wake = client.io.wake
    with client._lock:
        if topic in client._subscriptions:
            raise ValueError(f"already subscribed to {topic!r} (unsubscribe first to change the terms)")
        if callback is not None and client._dispatcher is None:
            client._dispatcher = Dispatcher(client.id)  # a group's callbacks never hold the io loop
        handle = Subscription(topic, state, client.unsubscribe, callback, client._dispatcher if callback else None,
                              max(pending_limit, prefetch), wake=client.io.wake)  # type: ignore[arg-type]
        client._subscriptions[topic] = handle
    wait = client.timeout if timeout is None else timeout
    ready: Future = Future()

    def placed(reg: Registration) -> None:
        publishers = reg.all_publishers()
        client.io.call(lambda: client.io.members.attach(state, handle, publishers, ready, wait))

    reg = Registration(topic, member_field(group, client.id),
                       member_value(prefetch, ordering, float(ack_wait), max_deliver, bool(durable)), watch=True,
                       on_placed=placed, on_refused=lambda _r, err: _refused(ready, err),
                       on_publishers=lambda r: client.io.call(
                           lambda: client.io.members.set_publishers(topic, r.all_publishers())))
    client.registrar.call(lambda: client.registrar.register(reg))
    if threading.current_thread() is client.io.thread:
        return handle
    try:
        return ready.result(wait)
    except FutureTimeout:
        client.unsubscribe(topic)
        raise DhtError(f"could not join group {group!r} of {topic!r} via {client.via} within {wait:g}s") from None
    except (ValueError, PermissionError):
        client.unsubscribe(topic)
        raise



def _refused(waiting: Future, err: str) -> None:
    if not waiting.done():
        waiting.set_exception(PermissionError(err))


def expect_groups(publishing: Any, topic: str, fields: dict) -> None:  # a pubsub/publishing.py PublishingSide
    """The consumer groups the topic's record lists (its "grp/" fields, read when the publication was
    placed) are owed our messages from the first one on, before their members have joined us (they do
    as soon as they hear of us)."""
    for group, members in members_from_fields(fields).items():
        terms = next(iter(members.values()))
        try:
            expected = GroupTerms(str(terms.get("ordering", "none")), max_deliver=int(terms.get("max_deliver") or 5),
                                  durable=bool(terms.get("durable")))
            check_group(group)
        except (TypeError, ValueError) as exc:
            log.warning("%s: ignoring group %r of the record: %s", topic, group, exc)
            continue
        with publishing.lock:
            publishing.groups.expect(topic, group, expected)


def settle_groups(client: GroupHost, wait: float) -> None:
    """Give the consumer groups with members the moment to take what they are owed (up to `wait`);
    what a group that is not durable still lacks then is dead-lettered here, as a range."""
    groups = client.publishing.groups
    if not groups.groups:
        return
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        with client.publishing.lock:
            if not groups.owing():
                break
        time.sleep(0.01)  # polling with a deadline: the io loop dispatches and takes the acks
    with client.publishing.lock:
        letters = groups.abandon()
    for letter in letters:
        log.warning("dead letter: %s", letter)
        client._dead_letter(letter)

