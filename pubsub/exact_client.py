"""What a Client does for an exact topic's subscription (`subscribe("sensors/7/temp")`), one or
thousands at once: the topic's state and the `Subscription` the application holds, its registration
at the topic's owner (which names the publishers, and tells of new ones), and the wait until each
publisher known holds our filter. It knows the Client only as an `ExactHost` (it never imports the
Client); patterns are pubsub/pattern_client.py's, consumer groups pubsub/group_client.py's.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol

from dht.client import DhtError
from dht.subjects import check_subscribable, is_pattern
from pubsub.delivery import PENDING_LIMIT, Dispatcher, Subscription
from pubsub.directory import member_field, subscriber_field
from pubsub.durable import DataDir, check_name
from pubsub.message import Message
from pubsub.positions import Positions
from pubsub.publication import check_mode
from pubsub.publisher import refuse
from pubsub.publishing import check_topic
from pubsub.registration import Registration, subscriber_value
from pubsub.subscription import HELD_LIMIT, HISTORY_POLICIES, TopicState
from pubsub.tx_positions import TxPositions

EXACT_TERMS = ("history", "reliable", "mode", "callback", "pending_limit", "durable", "auto_commit",
               "history_policy", "batch")  # what subscribe_many hands to an exact topic's subscription


class ExactHost(Protocol):
    """What exact subscriptions use of their client (pubsub/client.py's Client)."""

    id: str
    via: str
    timeout: float
    data: DataDir | None
    io: Any  # pubsub/io_loop.py IoLoop
    registrar: Any  # pubsub/registrar.py Registrar
    _lock: threading.Lock
    _subscriptions: dict[str, Subscription]
    _dispatcher: Dispatcher | None
    _callback_thread: bool

    def subscribe(self, topic: str, **terms: Any) -> Subscription: ...  # noqa: ANN401

    def unsubscribe(self, topic: str) -> None: ...

    def _check_open(self) -> None: ...

    def _dead_letter(self, letter: Any) -> None: ...  # noqa: ANN401


def subscribe_many(client: ExactHost, topics: Iterable[str], timeout: float | None,
                   terms: dict[str, Any]) -> list[Subscription]:
    """`Client.subscribe_many`: the registrations placed together and awaited together."""
    topics = list(topics)
    client._check_open()
    if len(set(topics)) != len(topics):
        raise ValueError("a topic is given twice")
    for t in topics:
        check_subscribable(check_topic(t))
    wait = client.timeout if timeout is None else timeout
    deadline = time.monotonic() + wait
    made: list[Subscription] = []
    waiting: list[tuple[str, Future]] = []
    exact_terms = {k: v for k, v in terms.items() if k in EXACT_TERMS}
    collecting = gc.isenabled()
    try:
        # Each subscription is a few dozen long-lived objects; made by the thousand, the collector
        # walked every one of them again each time the heap grew by a quarter: 4.4 of 6.4 s of
        # 10,000 topics. It waits until they are made (then runs as usual, once).
        gc.disable()
        for t in topics:
            if is_pattern(t) or terms.get("group") is not None:
                if collecting:
                    gc.enable()
                made.append(client.subscribe(t, timeout=max(0.0, deadline - time.monotonic()), **terms))
                gc.disable()
                continue
            handle, ready, _ = subscribe_exact(client, t, timeout=wait, **exact_terms)
            made.append(handle)
            waiting.append((t, ready))
        if collecting:
            gc.enable()
        for t, ready in waiting:
            await_subscribed(client, t, ready, max(0.0, deadline - time.monotonic()))
    except BaseException:
        if collecting:
            gc.enable()
        for handle in made:
            client.unsubscribe(handle.topic)
        raise
    return made


def await_subscribed(client: ExactHost, topic: str, ready: Future, wait: float) -> Subscription:
    """`ready`'s subscription, or DhtError when it is not in place within `wait` (then unsubscribed)."""
    try:
        return ready.result(wait)
    except FutureTimeout:
        client.unsubscribe(topic)
        raise DhtError(f"could not subscribe to {topic!r} via {client.via} within {wait:g}s") from None
    except PermissionError:
        client.unsubscribe(topic)
        raise


def subscribe_exact(client: ExactHost, topic: str, history: int = 0, reliable: bool = False, mode: str = "direct",
                    callback: Callable[[Message], None] | Callable[[list[Message]], None] | None = None,
                    timeout: float | None = None, pending_limit: int = PENDING_LIMIT, durable: object = None,
                    auto_commit: bool = True, history_policy: str = "at_least",
                    batch: bool = False, commit_with: object = None) -> tuple[Subscription, Future, float]:
    """An exact topic's subscription, started (`Client.subscribe`'s terms): its handle, the future it
    is ready by, and the wait."""
    check_mode(mode)
    if batch and callback is None:
        raise ValueError("batch=True is for a callback that takes a list of messages; none was given")
    if isinstance(durable, bool):
        raise ValueError("durable=True/False is for consumer groups; a durable subscription is given a name")
    if history_policy not in HISTORY_POLICIES:
        raise ValueError(f"history_policy must be one of {', '.join(HISTORY_POLICIES)}, not {history_policy!r}")
    positions: Positions | TxPositions | None = None
    if commit_with is not None and durable is None:
        raise ValueError("commit_with goes with durable=NAME (a callback's writes, or a transaction() block's, "
                         "commit with the position)")
    if durable is not None:
        if client.data is None and commit_with is None:
            raise ValueError("a durable subscription needs a client with a data_dir (or commit_with=connection)")
        reliable = True
    with client._lock:
        if topic in client._subscriptions:
            raise ValueError(f"already subscribed to {topic!r} (unsubscribe first to change the terms)")
    if commit_with is not None:
        positions = TxPositions(commit_with, check_name(durable), topic)  # type: ignore[arg-type]
    elif durable is not None:
        positions = Positions(client.data, durable, topic, auto_commit)  # type: ignore[arg-type]
    state = TopicState(topic, client.id, history, reliable, mode, positions.start if positions else None,
                       history_policy, held_limit=min(HELD_LIMIT, max(pending_limit, 1000)))
    with client._lock:
        if topic in client._subscriptions:
            raise ValueError(f"already subscribed to {topic!r} (unsubscribe first to change the terms)")
        if callback is not None and client._callback_thread and client._dispatcher is None:
            client._dispatcher = Dispatcher(client.id)
        handle = Subscription(topic, state, client.unsubscribe, callback, client._dispatcher, pending_limit,
                              wake=client.io.wake, positions=positions, on_dead_letter=client._dead_letter,
                              batch=batch)
        client._subscriptions[topic] = handle
    wait = client.timeout if timeout is None else timeout
    ready: Future = Future()

    owed = positions.knows if positions else None

    def placed(reg: Registration) -> None:
        publishers = reg.all_publishers(owed)
        client.io.call(lambda: client.io.attach(state, handle, publishers, reg.relay, ready, wait))

    reg = Registration(topic, subscriber_field(mode, client.id), subscriber_value(mode), watch=True,
                       relay_service="relay_out" if mode == "relay" else None, on_placed=placed,
                       on_publishers=lambda r: _publishers_changed(client, topic, r, owed),
                       on_relay=lambda r: client.io.call(lambda: client.io.set_relay(topic, r.relay)),
                       on_refused=lambda _r, err: refuse(ready, err),
                       archive_read=history > 0 or reliable, mode=mode)
    client.registrar.call(lambda: client.registrar.register(reg))
    return handle, ready, wait


def _publishers_changed(client: ExactHost, topic: str, reg: Registration,
                        owed: Callable[[str], bool] | None) -> None:
    publishers = reg.all_publishers(owed)
    client.io.call(lambda: client.io.set_publishers(topic, publishers))


def unsubscribe_exact(client: ExactHost, topic: str, handle: Subscription) -> None:
    """`Client.unsubscribe` of an exact topic (or a group's), already taken from the client's
    subscriptions: nothing more of it is delivered once this returns, and the owner drops our
    registration at once."""
    detached = threading.Event()

    def detach() -> None:
        client.io.detach(topic, handle=handle)
        detached.set()

    if threading.current_thread() is client.io.thread:
        detach()
    else:
        handle.close()  # a waiting get() returns now; the io loop stops delivering below
        client.io.call(detach)
        detached.wait(client.timeout)
    if client._dispatcher is not None:
        client._dispatcher.quiesce(handle)
    deleted = threading.Event()

    def unregister() -> None:
        group = handle.group
        client.registrar.unregister(topic, member_field(group, client.id) if group is not None
                                    else subscriber_field(handle._state.mode, client.id))
        deleted.set()

    client.registrar.call(unregister)
    if threading.current_thread() not in (client.registrar.thread, client.io.thread):
        deleted.wait(client.timeout)  # (a callback does not hold the loop for it: the delete is on its way)
