"""A publisher's journal: every message is in the data directory before it is sent.

With a data directory, `publish()` stamps the message and queues it here; one thread writes what
has queued in one record of the data directory's log (group commit: under load a record carries
hundreds of messages), then sends them, in order, and hands them to the publication's retained
history. A publisher killed at any moment has therefore sent nothing its data directory
does not hold, and a restarted one continues the numbering after the last message it could have
sent. The queue is bounded: a publisher faster than its disk waits in `publish()`.

A message that comes alone (nothing queued or being written, and none put for LONE_GAP_NS) is written
and sent by the publishing thread itself (`put` with `send`): the same one write before the send, without
waking the journal's thread on the message's own path (a wake-up is tens of microseconds, and under
load it is the tail of a durable message's latency).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from pubsub.durable import DataDir
from pubsub.envelope import Envelope
from pubsub.publication import Publication

log = logging.getLogger(__name__)

QUEUE_LIMIT = 20_000
BATCH_LIMIT = 4096
LONE_GAP_NS = 200_000  # a message this long after the previous one is written by its publishing thread
FORGET_IDS_EVERY = 10.0  # seconds between deletions of msg ids past the dedup window (a scan of them)


class Journal:
    def __init__(self, data: DataDir, send: Callable[[list[tuple[Publication, Envelope]]], dict[str, int]],
                 dedup_seconds: float = 0.0) -> None:
        """`send(batch)` sends a written batch and returns the topics whose oldest retained seq moved;
        msg ids older than `dedup_seconds` are deleted every FORGET_IDS_EVERY seconds."""
        self.data = data
        self.dedup_seconds = dedup_seconds
        self._ids_forgotten_at = time.monotonic()
        self._send = send
        self._queue: list[tuple[Publication, Envelope]] = []
        self._trims: dict[str, int] = {}
        lock = threading.Lock()
        self._work = threading.Condition(lock)  # the thread waits here for messages (or stop)
        self._idle = threading.Condition(lock)  # publishers wait here for room, `flush` for the end of a write
        self._stopping = False
        self._busy = False
        self._last_put_ns = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="chordpub-journal", daemon=True)
        self.thread.start()

    def wait_for_room(self) -> None:
        """Block while the queue is full (called before taking the publishing lock: the journal's
        thread needs that lock to send)."""
        if len(self._queue) < QUEUE_LIMIT:  # (a glance without the lock: the bound is the thread's to keep)
            return
        with self._idle:
            while len(self._queue) >= QUEUE_LIMIT and not self._stopping and self.error is None:
                self._idle.wait(0.5)

    def put(self, pub: Publication, env: Envelope,
            send: Callable[[list[tuple[Publication, Envelope]]], dict[str, int]] | None = None) -> None:
        """Queue a stamped message (the caller holds the publishing lock, which keeps them in order);
        with `send`, one that comes alone is written and sent at once, on the caller's thread."""
        with self._work:
            if self.error is not None:
                raise RuntimeError(f"the journal in {self.data.directory} failed: {self.error}")
            alone = (send is not None and not self._queue and not self._busy
                     and env.sent_ns - self._last_put_ns >= LONE_GAP_NS)
            self._last_put_ns = env.sent_ns
            if not alone:
                self._queue.append((pub, env))
                if len(self._queue) == 1 and not self._busy:
                    self._work.notify()
                return
            trims, self._trims = self._trims, {}
            self._busy = True
        self._write_alone(pub, env, trims, send)  # type: ignore[arg-type]

    def _write_alone(self, pub: Publication, env: Envelope, trims: dict[str, int],
                     send: Callable[[list[tuple[Publication, Envelope]]], dict[str, int]]) -> None:
        moved: dict[str, int] = {}
        try:
            self.data.journal([env], trims, self._forget_ids_before())
            moved = send([(pub, env)])
        except BaseException as exc:
            log.exception("the journal failed")
            with self._work:
                self.error = exc
            raise RuntimeError(f"the journal in {self.data.directory} failed: {exc}") from exc
        finally:
            with self._work:
                for topic, first in moved.items():
                    self._trims[topic] = max(first, self._trims.get(topic, 0))
                self._busy = False
                self._idle.notify_all()  # (nothing to wake, unless a flush waits)

    def trimmed(self, topic: str, first_seq: int) -> None:
        """Retention let go of everything before `first_seq` (deleted with the next write)."""
        with self._work:
            self._trims[topic] = max(first_seq, self._trims.get(topic, 0))

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything queued is written and sent."""
        with self._idle:
            return self._idle.wait_for(lambda: (not self._queue and not self._busy) or self.error is not None,
                                       timeout)

    def _run(self) -> None:
        while True:
            with self._work:
                self._work.wait_for(lambda: self._queue or self._stopping)  # trims ride with the next write
                if not self._queue and not self._trims:
                    return
                batch, self._queue = self._queue[:BATCH_LIMIT], self._queue[BATCH_LIMIT:]
                trims, self._trims = self._trims, {}
                self._busy = True
                self._idle.notify_all()  # a publisher waiting for room
            try:
                self.data.journal([env for _pub, env in batch], trims, self._forget_ids_before())
                moved = self._send(batch) if batch else {}
            except BaseException as exc:  # the disk failed us: publishing stops with the reason
                log.exception("the journal failed")
                with self._work:
                    self.error = exc
                    self._busy = False
                    self._idle.notify_all()
                return
            with self._work:
                for topic, first in moved.items():
                    self._trims[topic] = max(first, self._trims.get(topic, 0))
                self._busy = False
                self._idle.notify_all()

    def _forget_ids_before(self) -> int:
        """The send time before which msg ids are deleted with this write (0: none this time)."""
        now = time.monotonic()
        if not self.dedup_seconds or now - self._ids_forgotten_at < FORGET_IDS_EVERY:
            return 0
        self._ids_forgotten_at = now
        return time.time_ns() - int(self.dedup_seconds * 1e9)

    def stop(self, timeout: float = 10.0) -> None:
        """Write and send what is queued, then end the thread."""
        self.flush(timeout)
        with self._work:
            self._stopping = True
            self._work.notify_all()
            self._idle.notify_all()
        self.thread.join(timeout)
