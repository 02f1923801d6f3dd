"""A data directory's WAL is copied back by its own thread, not inside commits (pubsub/checkpointer.py).

To see it fail: leave the thread unstarted (`self._thread.start()` gone): the log is never copied back
while the commits stay under the backstop."""

from __future__ import annotations

import time

from chordpub.launcher import wait_for
from pubsub.checkpointer import BACKSTOP_PAGES
from pubsub.durable import DataDir
from pubsub.envelope import Envelope


def test_the_log_is_copied_back_by_the_thread_and_commits_only_past_the_backstop(tmp_path):
    data = DataDir(tmp_path, "journaling")
    try:
        assert data.db.execute("PRAGMA wal_autocheckpoint").fetchone() == (BACKSTOP_PAGES,)
        for seq in range(1, 1501):  # more pages than SQLite's own automatic checkpoint would let pile up
            data.journal([Envelope("t", data.name, seq, time.time_ns(), b"x" * 100)], {})
        assert data.publication("t")[0] == 1500  # the log of the journal's writes folded into the database
        main_file = tmp_path / "client.sqlite3"

        def copied_back() -> bool:  # the messages are in the database file itself, not only in its log
            return main_file.stat().st_size >= 1500 * 100

        wait_for(copied_back, 10, interval=0.05, what="the thread's checkpoint of the journal's log")
    finally:
        data.close()
    assert not data.checkpointer._thread.is_alive()
