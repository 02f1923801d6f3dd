"""A publication's registration under way, and the thread that finishes the ones nobody waits for.

`advertise()` waits for its registration: the owner's answer, the prefix records' answers (the
patterns that match), then the filters of the subscribers they name. A first `publish()` on a new
topic need not: it hands the topic to the `Advertiser`, which finishes every registration under way
on one thread, while the topic's messages wait in order at the publishing side (at most
MAX_HELD of them: then `publish()` waits too). A registration that fails (refused, or no answer
within the client's timeout) drops its waiting messages as dead letters, with the reason, and the
next `publish()` on the topic tries again. So a thousand new topics cost a few batched rounds of the
registrar, not a thousand round trips one after another, and no message is sent before the
subscribers that were waiting for the topic can take it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

MAX_HELD = 10_000  # messages a topic's first publishes keep waiting while it registers
POLL = 0.002  # seconds between looks at the registrations under way (filters arrive on a socket) ...
POLL_PER_PENDING = 0.00001  # ... and more per registration under way: each look costs each of them
NUDGE_GAP = 0.0005  # seconds at least between two looks, however fast answers come
MAX_FILTER_WAIT = 30.0  # seconds a topic's messages wait for known subscribers that are still connecting


class Answer:
    """One answer to a registration, for the advertiser's looks: a Future without its condition (a
    thousand new topics made three thousand, a fifth of their first publishes' cost), since nobody
    blocks on it. Set on the registrar's thread, read on the advertiser's."""

    __slots__ = ("_value", "_error", "_done", "_then")

    def __init__(self, then: Callable[[], None] | None = None) -> None:
        self._value: object = None
        self._error: BaseException | None = None
        self._done = False
        self._then = then  # told when the answer is in (the advertiser looks then, not at its next poll)

    def set_result(self, value: object) -> None:
        self._value, self._done = value, True
        if self._then is not None:
            self._then()

    def set_exception(self, error: BaseException) -> None:
        self._error, self._done = error, True
        if self._then is not None:
            self._then()

    def done(self) -> bool:
        return self._done

    def exception(self) -> BaseException | None:
        return self._error

    def result(self) -> object:
        if self._error is not None:
            raise self._error
        return self._value


@dataclass
class Registering:
    """One publication's registration: the owner's answer (subscribers counted, the record's groups),
    the prefix records' (plain patterns matching, their groups), and the deadlines."""

    topic: str
    mode: str
    placed: Future | Answer
    watchers: list[Future | Answer]
    deadline: float  # for the answers
    filters_by: float = 0.0  # for the subscribers' filters, once the answers are in
    subscribers: int = -1  # -1: answers still awaited
    groups: list[dict] = field(default_factory=list)
    held: int = 0  # of their filters, those our socket held at the last count

    def answered(self) -> bool:
        return self.placed.done() and all(w.done() for w in self.watchers)


class Advertiser:
    """Finishes registrations that no caller waits for, on a thread of its own (started when first
    needed, ended with the client). `settle(r)` gathers r's answers (raises what the owner said),
    `in_place(topics)` counts the filters at our socket for each (one look for all: a look per topic
    every POLL, with 2,000 topics under way, held the publishing side's lock from the threads that answer
    probes; the topics counted before are counted again only when a filter came or went since),
    `done(r, error)` releases or drops the topic's waiting messages."""

    def __init__(self, settle: Callable[[Registering], None],
                 in_place: Callable[[list[str], list[str], int], tuple[dict[str, int], int]],
                 done: Callable[[Registering, BaseException | None], None], filter_wait: float,
                 drain: Callable[[], None] = lambda: None) -> None:
        self._settle, self._in_place, self._done = settle, in_place, done
        self._drain = drain  # reads the filters that came (a held topic's then go at once: pubsub/coalescing.py)
        self._changes = -1  # the filters' `changes` at the last count (pubsub/publishing.py `in_place_since`)
        self.filter_wait = filter_wait
        self._pending: list[Registering] = []
        self._progress_at = 0.0  # when a registration last found its subscribers' filters in place
        self._cond = threading.Condition()
        self._nudged = False  # an answer came since the last look
        self._stopped = False
        self.thread: threading.Thread | None = None

    def add(self, r: Registering) -> None:
        with self._cond:
            if self._stopped:
                raise RuntimeError("the client is closed")
            self._pending.append(r)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="chordpub-advertiser", daemon=True)
                self.thread.start()
            self._cond.notify()

    def flush(self, timeout: float) -> bool:
        """Wait (up to `timeout`) until every registration under way has finished; True if they have."""
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                if not self._pending:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL)  # polling a condition with a deadline: the advertiser thread finishes them

    def nudge(self) -> None:
        """An answer came: look now (any thread)."""
        if not self._nudged:
            with self._cond:
                self._nudged = True
                self._cond.notify()

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self.thread is not None:
            self.thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    pending, self._pending = self._pending, []
                    break
                pending = list(self._pending)
            began = time.monotonic()
            finished = self._look(pending)
            took = time.monotonic() - began
            with self._cond:
                if finished:
                    self._pending = [r for r in self._pending if id(r) not in finished]
            # polling conditions with deadlines (filters arrive on our socket; answers nudge us), a look at
            # most every NUDGE_GAP or as long as one took, whichever is longer; between looks the filters
            # are read every POLL, so a subscriber that connected gets what its topics hold at once
            until = time.monotonic() + POLL + POLL_PER_PENDING * len(pending)
            while True:
                with self._cond:
                    left = until - time.monotonic()
                    if self._nudged or self._stopped or left <= 0:
                        self._nudged = False
                        break
                    self._cond.wait(min(POLL, left))
                self._drain()
            time.sleep(max(NUDGE_GAP, took))
        for r in pending:
            self._done(r, RuntimeError("the client closed before the topic was registered"))

    def _look(self, pending: list[Registering]) -> set[int]:
        """One look at every registration under way; the ids of those finished."""
        now = time.monotonic()
        finished: set[int] = set()
        fresh: set[int] = set()  # settled at this look: their filters not counted yet
        for r in pending:
            if r.subscribers >= 0 or (not r.answered() and now < r.deadline):
                continue
            try:
                self._settle(r)
            except BaseException as exc:  # noqa: BLE001 - refused or unanswered: the waiting messages go
                self._done(r, exc)
                finished.add(id(r))
                continue
            r.filters_by = min(r.deadline, now + self.filter_wait)
            fresh.add(id(r))
        waiting = [r for r in pending if r.subscribers >= 0 and id(r) not in finished]
        counting = [r for r in waiting if r.subscribers]
        if counting:
            counts, self._changes = self._in_place([r.topic for r in counting if id(r) in fresh],
                                                   [r.topic for r in counting if id(r) not in fresh], self._changes)
            for r in counting:
                r.held = counts.get(r.topic, r.held)
        for r in waiting:
            held = r.held
            if r.subscribers and held < r.subscribers:
                # past its own wait, a topic still waits while others' filters keep coming: a subscriber
                # taking thousands of new topics at once is slow, not gone
                connecting = now - self._progress_at < self.filter_wait and now < r.filters_by + MAX_FILTER_WAIT
                if now < r.filters_by or connecting:
                    continue
                log.warning("%s: %d of the %d subscribers known connected in time; the others get the first "
                            "messages only if they are reliable and connect within %.1f s more", r.topic, held,
                            r.subscribers, self.filter_wait)
            elif r.subscribers:
                self._progress_at = now
            self._done(r, None)
            finished.add(id(r))
        return finished
