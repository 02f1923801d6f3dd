"""Where delivered messages go: a Subscription's own bounded queue, or its callback.

The io loop (pubsub/io_loop.py) hands every message of a topic to that topic's `Subscription`:
- without a callback, the message waits in the subscription's queue for `get()` or iteration
  (the FEUP API's pull get);
- with a callback, the io loop calls it at once, as paho-mqtt's network loop and nats.py's event
  loop do: no thread hand-off per message (with a hundred clients in one process, waking a second
  thread for every message of every client made the process spend its time switching threads).
  A callback therefore holds the loop while it runs, and with it this client's other deliveries
  and the history and probes it serves: keep it short, or give the client `callback_thread=True`,
  and a `Dispatcher` thread runs the callbacks in order from a queue instead.
Queues are bounded (`pending_limit` messages per subscription). When a best-effort subscription's
application does not keep up, what does not fit is dropped and counted (`stats.dropped`, and a
warning at most every 5 s), as nats.py's slow-consumer limit does; a reliable subscription never
drops here: its limit makes the io loop stop reading (`full`), the publishers' high-water marks
and histories take the strain, and the gaps are repaired once it drains.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

from pubsub.message import DeadLetter, Message

if TYPE_CHECKING:
    from pubsub.positions import Positions
    from pubsub.subscription import Stats, TopicState

log = logging.getLogger(__name__)

PENDING_LIMIT = 10_000
COMMIT_EVERY = 500  # durable: callbacks run between two commits of the position, at most
WARN_EVERY = 5.0


class Subscription:
    """A client's subscription to one topic: iterate it, `get()` from it, or give a callback."""

    def __init__(self, topic: str, state: TopicState, unsubscribe: Callable[[str], None],
                 callback: Callable[[Message], None] | None = None, dispatcher: Dispatcher | None = None,
                 pending_limit: int = PENDING_LIMIT, wake: Callable[[], None] | None = None,
                 positions: Positions | None = None,
                 on_dead_letter: Callable[[DeadLetter], None] | None = None, batch: bool = False) -> None:
        """`batch`: the callback takes a list, the messages that arrived together, in order."""
        self.topic = topic
        self.batch = batch
        self.positions = positions  # a durable subscription's
        self._on_dead_letter = on_dead_letter
        self._taken: Message | None = None  # the last message get() returned (committed on the next)
        self._in_transaction: list[Message] | None = None  # what get() returned inside transaction()
        self.callback = callback
        self.pending_limit = pending_limit
        self._state = state
        self._unsubscribe = unsubscribe
        self._dispatcher = dispatcher
        self._wake_io = wake
        self._queue: deque[Message] = deque()
        self._ready = threading.Condition()
        self._closed = False
        self._last_warning = float("-inf")
        self.pending = 0  # messages handed over but not yet taken (queue or dispatcher)
        self.was_full = False
        # a consumer group's member acks each message its callback returned from (or get() moved past)
        self.acks_each = bool(getattr(state, "group", None)) and state.auto_ack  # type: ignore[union-attr]
        self.group = getattr(state, "group", None)
        self.pattern: object | None = None  # a pattern subscription's follower (pubsub/patterns.py)
        self.pattern_record: str | None = None  # and the prefix record it is placed at
        self.group_pattern = False  # a consumer group's pattern: its topics are memberships, not topic states

    # -- the application's side ------------------------------------------------------------------------
    def get(self, timeout: float | None = None) -> Message | None:
        """The next message, waiting up to `timeout` seconds (None: until one comes); None if none came
        or the subscription has ended. Not for a subscription with a callback."""
        if self.callback is not None:
            raise RuntimeError(f"the subscription to {self.topic!r} has a callback; get() would never see a message")
        self._commit_taken()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._ready:
            while not self._queue and not self._closed:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._ready.wait(left)
            if not self._queue:
                return None
            msg = self._queue.popleft()
            if self._in_transaction is not None:
                self._in_transaction.append(msg)
            else:
                self._taken = msg
            self.pending -= 1
            resume = self.was_full and self.pending < self.pending_limit // 2
        if resume:
            self.was_full = False
            if self._wake_io is not None:
                self._wake_io()
        return msg

    def __iter__(self) -> Iterator[Message]:
        """Messages as they come, until the subscription ends."""
        while True:
            msg = self.get()
            if msg is None:
                return
            yield msg

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """For a subscription made with `commit_with=conn` and no callback: `with sub.transaction() as
        conn:` — the messages `get()` returns inside the block and what the block writes to `conn`
        commit together when it ends, with the subscription's position after them (pubsub/tx_positions.py).
        When the block raises, its writes are rolled back and its messages come again, in order and
        flagged `redelivered`, from the next `get()`; when the process dies inside it, a restarted
        subscriber gets them again from the database's position. Exactly once for pull consumers."""
        block = getattr(self.positions, "block", None)
        if block is None or self.callback is not None:
            raise RuntimeError(f"transaction() is for a subscription to {self.topic!r} made with commit_with= "
                               "and no callback")
        if self._in_transaction is not None:
            raise RuntimeError("transaction() blocks do not nest")
        self._commit_taken()
        taken: list[Message] = []
        self._in_transaction = taken
        try:
            with block(taken) as conn:
                yield conn
        except BaseException:
            self._give_back(taken)
            raise
        finally:
            self._in_transaction = None

    def _give_back(self, messages: list[Message]) -> None:
        with self._ready:
            self._queue.extendleft(replace(m, redelivered=True) for m in reversed(messages))
            self.pending += len(messages)
            self._ready.notify_all()

    def _commit_taken(self) -> None:
        taken, self._taken = self._taken, None
        if taken is not None and self.positions is not None and self.positions.auto_commit:
            self.positions.commit(taken)
        if taken is not None and self.acks_each:
            taken.ack()

    def unsubscribe(self) -> None:
        """Stop: nothing more of this topic is delivered once this returns, and the topic's owner drops
        the registration at once."""
        self._unsubscribe(self.topic)

    @property
    def stats(self) -> Stats:
        return self._state.stats

    @property
    def lost(self) -> int:
        return self._state.lost

    @property
    def unmatched(self) -> dict[str, str]:
        """Publishers of the topic that this subscription does not receive, and why."""
        return dict(self._state.unmatched)

    @property
    def warnings(self) -> list[str]:
        """What may keep messages from this subscription: publishers not matched (another mode, too
        little history), and a pattern's topics past its bound."""
        return sorted(self._state.unmatched.values()) + list(getattr(self.pattern, "warnings", []))

    @property
    def active(self) -> bool:
        return not self._closed

    def summary(self) -> dict:
        return self._state.summary()

    # -- the io loop's side ------------------------------------------------------------------------------
    @property
    def full(self) -> bool:
        return self.pending >= self.pending_limit

    def deliver(self, messages: list[Message]) -> None:
        """Hand over messages (io loop). Best effort: what exceeds the limit is dropped and counted."""
        if self._closed:
            return
        room = self.pending_limit - self.pending
        if len(messages) > room and not self._state.reliable:
            dropped = len(messages) - max(room, 0)
            self._state.stats.dropped += dropped
            messages = messages[: max(room, 0)]
            now = time.monotonic()
            if now - self._last_warning >= WARN_EVERY:
                self._last_warning = now
                log.warning("%s: the application is not keeping up; %d messages dropped so far",
                            self.topic, self._state.stats.dropped)
        if not messages:
            return
        if self.positions is not None:
            self.positions.hand(messages)
        self.pending += len(messages)
        if self.pending >= self.pending_limit:
            self.was_full = True
        if self.callback is not None:
            if self._dispatcher is not None:
                self._dispatcher.put(self, messages)
                return
            self.pending -= len(messages)
            run_callbacks(self, messages)
            return
        with self._ready:
            self._queue.extend(messages)
            self._ready.notify()

    def called_back(self, messages: list[Message]) -> None:
        """The callback returned for each of `messages` (raised or not: one that raised is in the
        dead-letter queue): a durable subscription commits them."""
        if self.positions is not None and self.positions.auto_commit and self.active:
            self.positions.commit(*messages)

    def failed(self, msg: Message, exc: Exception) -> None:
        """The callback raised on `msg`: the application's bug, logged; the message goes to the
        dead-letter queue with its payload (a consumer group's is naked: sent again, and dead-lettered
        on its last delivery), and the next message is still delivered."""
        where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ is not None else []
        log.error("callback of %s failed on seq %d of %s: %s: %s%s", self.topic, msg.seq, msg.publisher,
                  type(exc).__name__, exc, f" (at {where[0].filename}:{where[0].lineno})" if where else "")
        log.debug("the callback's traceback", exc_info=exc)  # one line a failure; the whole story at DEBUG
        if self.group is not None:
            msg.nak()
            return
        if self._on_dead_letter is not None:
            self._on_dead_letter(DeadLetter(msg.topic, msg.publisher, self._state.subscriber, msg.seq, msg.seq,
                                            f"callback raised {type(exc).__name__}: {exc}"[:500], time.time(),
                                            msg.payload, msg.sent_ns))

    def done(self, messages: list[Message]) -> None:
        """The dispatcher ran the callbacks of `messages`."""
        n = len(messages)
        self.pending -= n
        if self.was_full and self.pending < self.pending_limit // 2:
            self.was_full = False
            if self._wake_io is not None:
                self._wake_io()

    def close(self) -> None:
        """No more deliveries (io loop, on unsubscribe or close); a waiting get() returns None. The
        last message get() returned is committed: the application took it and is done."""
        self._commit_taken()
        with self._ready:
            self._closed = True
            self._queue.clear()
            self.pending = 0
            self._ready.notify_all()


def run_callbacks(sub: Subscription, messages: list[Message]) -> int:
    """Run `sub`'s callback on each message in order (one that raises: `Subscription.failed`).
    Returns how many raised."""
    tx = getattr(sub.positions, "run", None)  # commit_with: each callback in the application's transaction
    if tx is not None:
        return _run_in_transactions(sub, messages)
    if sub.batch:
        return _run_batch_callback(sub, messages)
    errors, done = 0, 0
    for i, msg in enumerate(messages):
        if not sub.active:
            break
        try:
            sub.callback(msg)  # type: ignore[misc]
        except Exception as exc:
            errors += 1
            sub.failed(msg, exc)
        else:
            if sub.acks_each:
                msg.ack()
        if i + 1 - done >= COMMIT_EVERY:  # a long batch (a repaired gap releasing thousands) commits as it goes
            sub.called_back(messages[done:i + 1])
            done = i + 1
    if done < len(messages):
        sub.called_back(messages[done:])
    return errors


def _run_in_transactions(sub: Subscription, messages: list[Message]) -> int:
    """commit_with (pubsub/tx_positions.py): the callbacks (a batch callback: its list) of messages that
    arrived together in one transaction of the application's connection, each in a savepoint of it, with
    the positions after them, committed at most COMMIT_EVERY messages apart; a callback that raises is
    rolled back, dead-lettered and passed over."""
    tx = sub.positions
    parts = [messages] if sub.batch else [[m] for m in messages]

    def call(part: list[Message]) -> None:
        sub.callback(part if sub.batch else part[0])  # type: ignore[misc]

    def failed(part: list[Message], exc: Exception) -> None:
        for msg in part:
            sub.failed(msg, exc)

    errors = 0
    for i in range(0, len(parts), COMMIT_EVERY):
        errors += tx.run_all(parts[i:i + COMMIT_EVERY], call, failed, lambda: sub.active)  # type: ignore[union-attr]
    return errors


def _run_batch_callback(sub: Subscription, messages: list[Message]) -> int:
    """A callback that takes a list: one call for `messages`. When it raises, every one of them is the
    callback's failure (dead-lettered with its payload): which ones it had done, only it knows."""
    if not sub.active:
        return 0
    try:
        sub.callback(messages)  # type: ignore[misc]
    except Exception as exc:
        for msg in messages:
            sub.failed(msg, exc)
        sub.called_back(messages)
        return len(messages)
    sub.called_back(messages)
    return 0


class Dispatcher:
    """One thread per client running the callbacks of its subscriptions, in delivery order."""

    def __init__(self, name: str) -> None:
        self._queue: deque[tuple[Subscription, list[Message]]] = deque()
        self._ready = threading.Condition()
        self._stopping = False
        self._current: Subscription | None = None  # whose callbacks run now
        self._thread = threading.Thread(target=self._run, name=f"chordpub-callbacks-{name}", daemon=True)
        self._thread.start()
        self.errors = 0

    def put(self, sub: Subscription, messages: list[Message]) -> None:
        with self._ready:
            self._queue.append((sub, messages))
            self._ready.notify()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._queue and not self._stopping:
                    self._ready.wait()
                if not self._queue:
                    return
                sub, messages = self._queue.popleft()
                self._current = sub
            self.errors += run_callbacks(sub, messages)
            sub.done(messages)
            with self._ready:
                self._current = None
                self._ready.notify_all()

    def quiesce(self, sub: Subscription, timeout: float = 10.0) -> None:
        """Wait until no callback of `sub` is running (a closed subscription starts no new one)."""
        if self._thread is threading.current_thread():
            return  # a callback unsubscribing its own topic: it is the one running
        deadline = time.monotonic() + timeout
        with self._ready:
            while self._current is sub and time.monotonic() < deadline:
                self._ready.wait(deadline - time.monotonic())

    def stop(self, timeout: float = 5.0) -> None:
        with self._ready:
            self._stopping = True
            self._ready.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
