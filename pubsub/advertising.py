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
POLL = 0.002  # seconds between looks at the registrations under way (filters arrive on a socket)


@dataclass
class Registering:
    """One publication's registration: the owner's answer (subscribers counted, the record's groups),
    the prefix records' (plain patterns matching, their groups), and the deadlines."""

    topic: str
    mode: str
    placed: Future
    watchers: list[Future]
    deadline: float  # for the answers
    filters_by: float = 0.0  # for the subscribers' filters, once the answers are in
    subscribers: int = -1  # -1: answers still awaited
    groups: list[dict] = field(default_factory=list)

    def answered(self) -> bool:
        return self.placed.done() and all(w.done() for w in self.watchers)


class Advertiser:
    """Finishes registrations that no caller waits for, on a thread of its own (started when first
    needed, ended with the client). `settle(r)` gathers r's answers (raises what the owner said),
    `in_place(topic)` counts the filters at our socket, `done(r, error)` releases or drops the topic's
    waiting messages."""

    def __init__(self, settle: Callable[[Registering], None], in_place: Callable[[str], int],
                 done: Callable[[Registering, BaseException | None], None], filter_wait: float) -> None:
        self._settle, self._in_place, self._done = settle, in_place, done
        self.filter_wait = filter_wait
        self._pending: list[Registering] = []
        self._cond = threading.Condition()
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
            finished = {id(r) for r in pending if self._step(r)}
            if finished:
                with self._cond:
                    self._pending = [r for r in self._pending if id(r) not in finished]
            time.sleep(POLL)  # polling conditions with deadlines: answers and filters arrive on other threads
        for r in pending:
            self._done(r, RuntimeError("the client closed before the topic was registered"))

    def _step(self, r: Registering) -> bool:
        """One look at `r`; True when it is finished."""
        now = time.monotonic()
        if r.subscribers < 0:
            if not r.answered():
                if now < r.deadline:
                    return False
            try:
                self._settle(r)
            except BaseException as exc:  # noqa: BLE001 - refused or unanswered: the waiting messages go
                self._done(r, exc)
                return True
            r.filters_by = min(r.deadline, now + self.filter_wait)
        if r.subscribers and self._in_place(r.topic) < r.subscribers and now < r.filters_by:
            return False
        if r.subscribers and self._in_place(r.topic) < r.subscribers:
            log.warning("%s: %d of the %d subscribers known connected in time; the others may miss the first "
                        "messages unless they are reliable", r.topic, self._in_place(r.topic), r.subscribers)
        self._done(r, None)
        return True
