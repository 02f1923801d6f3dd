"""WAL checkpoints off the committing threads of a data directory.

SQLite in WAL mode copies its log back into the database file (a checkpoint, with an fsync under
`synchronous=NORMAL`) inside whichever commit pushes the log past `wal_autocheckpoint` pages: that commit,
a publisher's journal write or a subscriber's position, then takes milliseconds instead of a tenth of
one, and so does the message behind it (measured on this project's machine, one message per journal
write at 2000/s: p99.9 5.8 ms and max 19.5 ms with the automatic checkpoint, 0.43 ms and 1.05 ms
without). Here a thread of the data directory, on a connection of its own, checkpoints every
CHECKPOINT_EVERY seconds, PASSIVE (it never waits for the writer, and the writer never waits for it);
the automatic checkpoint stays as the backstop at BACKSTOP_PAGES, so the log is bounded even if this
thread falls behind. Before each checkpoint it calls `fold` (the data directory's: its log of hot
writes moved into the database once it is big), and `nudge` wakes it for that at once.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

CHECKPOINT_EVERY = 0.5  # seconds between the thread's checkpoints
BACKSTOP_PAGES = 16_384  # the log's bound, in pages (64 MiB of 4 KiB): past it a commit checkpoints itself


class Checkpointer:
    """A daemon thread checkpointing the WAL of the database at `path`."""

    def __init__(self, path: Path, every: float = CHECKPOINT_EVERY, fold: Callable[[], None] | None = None) -> None:
        self.every = every
        self._fold = fold
        self.last: tuple[int, int] = (0, 0)  # (frames in the log, frames copied back) at its last checkpoint
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA busy_timeout=5000")
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chordpub-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait(self.every)
            self._wake.clear()
            if self._stop.is_set():
                return
            if self._fold is not None:
                try:
                    self._fold()
                except (sqlite3.Error, OSError) as exc:  # a read, or a writer past LOG_LIMIT, meets it again
                    log.warning("folding the data directory's log failed: %s", exc)
            try:
                _busy, logged, copied = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            except sqlite3.Error as exc:  # the file went away under us, or the disk failed: commits will say
                log.debug("checkpoint skipped: %s", exc)
                continue
            self.last = (logged, copied)

    def nudge(self) -> None:
        """Run a round now (the log has grown past its bound)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(5.0)
        self._conn.close()
