"""A publication's registration under way, and the thread that finishes the ones nobody waits for.

`advertise()` waits for its registration: the owner's answer, the prefix records' answers (the
patterns that match), then the filters of the subscribers they name. A first `publish()` on a new
topic need not: it hands the topic to the `Advertiser`, which finishes every registration under way
on one thread, while the topic's messages wait in order at the publishing side (at most
MAX_HELD of them: then `publish()` waits too). A registration that fails (refused, or no answer
within the client's timeout) drops its waiting messages as dead letters, with the reason, and the
next `publish()` on the topic tries again. So a thousand new topics cost a few batched rounds of the
registrar, not a thousand round trips one after another, and no message is sent before the
subscribers that were waiting for the topic can take it. The registrations of a burst of new topics
begin when the burst ends (`Advertiser.begin`), so that its messages go out first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

MAX_HELD = 10_000  # messages a topic's first publishes keep waiting while it registers
POLL = 0.002  # seconds between looks at the registrations under way (filters arrive on a socket) ...
POLL_PER_PENDING = 0.00001  # ... and more per registration under way: each look costs each of them
NUDGE_GAP = 0.0005  # seconds at least between two looks, however fast answers come
MAX_FILTER_WAIT = 30.0  # seconds a topic's messages wait for known subscribers that are still connecting
BURST_GAP = 0.002  # seconds without a new topic that end a burst of them: its registrations then begin
BURST_HOLD = 0.05  # seconds at most a new topic's registration waits for its burst to end
BEGIN_CHUNK = 64  # held-back registrations begun between two reads of the filters


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


def unbegun(topic: str) -> Registering:
    """A held-back registration that never began, for `done(r, error)` to drop what its topic holds."""
    return Registering(topic, "direct", Answer(), [], time.monotonic())


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
        self._later: list[tuple[str, Callable[[str, Any], Registering | None], Any]] = []  # a burst's, not begun yet
        self._later_since = 0.0  # when the first of them came
        self._last_new = -BURST_GAP  # when the last new topic came
        self._hurry = False  # begin what waits now (the client is closing)
        self._beginning = 0  # of those, taken to begin and not yet under way
        self._nudged = False  # an answer came since the last look
        self._stopped = False
        self.thread: threading.Thread | None = None

    def add(self, r: Registering) -> None:
        with self._cond:
            if self._stopped:
                raise RuntimeError("the client is closed")
            self._pending.append(r)
            self._wake()

    def begin(self, topic: str, start: Callable[[str, Any], Registering | None], arg: Any = None) -> None:
        """A new topic's registration: `start(topic, arg)` sends it to the ring (a burst keeps one tuple a
        topic, not a closure of its own: the fewer objects a first publish leaves, the rarer the
        collector's passes over them). A topic that comes alone begins
        at once, on the caller's thread; one of a burst of new topics waits on this thread until the
        burst ends (BURST_GAP without another) or for BURST_HOLD at most, with the others. Its first
        messages still go at once to the subscribers already connected to us. Measured on a two-core
        machine, a loop of first publishes on 1000 new topics took 67-75 ms (21-29 us a publish at the
        median, 40-50 ms of its thread's CPU) while each began its registration, and 9-23 ms (6-9 us,
        10-20 ms) with the burst's held back: their registrations, and the ring's and the subscribers'
        work on them, no longer share the cores with the burst. `start` returns None when the topic is
        no longer published."""
        now = time.monotonic()
        with self._cond:
            if self._stopped:
                raise RuntimeError("the client is closed")
            alone = not self._later and now - self._last_new >= BURST_GAP
            self._last_new = now
            if not alone:
                if not self._later:  # the thread wakes at the burst's first; it then waits for its end
                    self._later_since = now
                    self._wake()
                self._later.append((topic, start, arg))
                return
        r = start(topic, arg)
        if r is not None:
            self.add(r)

    def _wake(self) -> None:
        """(Under the condition.) Start the thread if it has not started, and wake it."""
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="chordpub-advertiser", daemon=True)
            self.thread.start()
        self._cond.notify()

    def _later_left(self) -> float | None:
        """(Under the condition.) Seconds until the held-back registrations begin; None: there are none."""
        if not self._later:
            return None
        if self._hurry:
            return 0.0
        due = min(self._last_new + BURST_GAP, self._later_since + BURST_HOLD)
        return due - time.monotonic()

    def _begin_later(self) -> None:
        """Begin the held-back registrations, if their burst is over (or has gone on BURST_HOLD)."""
        with self._cond:
            left = self._later_left()
            if left is None or left > 0:
                return
            later, self._later, self._hurry = self._later, [], False
            self._beginning = len(later)
        for i, (topic, start, arg) in enumerate(later):
            if i % BEGIN_CHUNK == 0:
                self._drain()  # (beginning a thousand takes a while: the filters that come meanwhile are read)
            try:
                r = start(topic, arg)
            except Exception as exc:  # noqa: BLE001 - the client closing: the topic's messages are dead letters
                r = None
                self._done(unbegun(topic), exc)
            with self._cond:
                if r is not None:
                    self._pending.append(r)
                self._beginning -= 1

    def flush(self, timeout: float) -> bool:
        """Wait (up to `timeout`) until every registration under way has finished; True if they have."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._hurry = bool(self._later)
            self._cond.notify()
        while True:
            with self._cond:
                if not self._pending and not self._later and not self._beginning:
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
                    left = self._later_left()
                    if left is not None and left <= 0:
                        break
                    self._cond.wait(left)
                if self._stopped:
                    pending, self._pending = self._pending, []
                    later, self._later = self._later, []
                    break
            self._begin_later()
            with self._cond:
                pending = list(self._pending)
            if not pending:
                continue
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
        closed = RuntimeError("the client closed before the topic was registered")
        for r in pending:
            self._done(r, closed)
        for topic, _start, _arg in later:
            self._done(unbegun(topic), closed)

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
        late: list[Registering] = []  # past their wait with subscribers still missing
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
                late.append(r)
            elif r.subscribers:
                self._progress_at = now
            self._done(r, None)
            finished.add(id(r))
        if late:  # one line for a look: a burst's topics whose pattern subscriber left would each say it
            r, more = late[0], f" (and {len(late) - 1} more topics)" if len(late) > 1 else ""
            log.warning("%s%s: %d of the %d subscribers known connected in time; the others get the first "
                        "messages only if they are reliable and connect within %.1f s more", r.topic, more, r.held,
                        r.subscribers, self.filter_wait)
        return finished
