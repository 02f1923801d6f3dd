"""Work posted to a thread that sleeps in zmq.Poller: a queue of calls and a pipe to wake it.

ZeroMQ sockets belong to one thread, so the client's threads never touch each other's sockets:
they post a call here instead. The pipe is an ordinary file descriptor, which zmq.Poller polls
beside the thread's sockets, and writing to it is safe from any thread.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)


class Mailbox:
    def __init__(self) -> None:
        self._calls: deque[Callable[[], None]] = deque()
        self.fd, self._write_fd = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._write_fd, False)
        self.closed = False
        self._woken = False  # a wake is in the pipe and the owner has not yet begun to run the calls

    def call(self, fn: Callable[[], None]) -> None:
        """Run `fn` on the owning thread, soon (any thread)."""
        self.call_all((fn,))

    def call_all(self, fns: Iterable[Callable[[], None]]) -> None:
        """Run each of `fns` on the owning thread, in order and in one go: the owner's `run` takes them
        all in the same turn (they are queued at once), each failing on its own."""
        self._calls.extend(fns)
        if not self._woken:  # one wake in the pipe is enough (the owner clears this before it runs the calls)
            self._woken = True
            self.wake()

    def wake(self) -> None:
        try:
            os.write(self._write_fd, b"x")
        except BlockingIOError:
            pass  # already woken
        except OSError:
            pass  # the owner has ended and closed the pipe

    def run(self, until: Callable[[], bool] | None = None) -> None:
        """Empty the pipe and run every posted call (the owning thread); `until`: the owner is stopping,
        and the calls still posted are left (its socket's closing would fail them one by one)."""
        try:
            while os.read(self.fd, 4096):
                pass
        except BlockingIOError:
            pass
        self._woken = False  # after the pipe is emptied: a wake written from here on stays in it
        while self._calls:
            if until is not None and until():
                log.info("stopping: %d posted call(s) left unrun", len(self._calls))
                return
            fn = self._calls.popleft()
            try:
                fn()
            except Exception:  # a bug in one piece of work must not stop the thread that runs them all
                log.exception("posted work failed")

    def close(self) -> None:
        self.closed = True
        os.close(self.fd)
        os.close(self._write_fd)
