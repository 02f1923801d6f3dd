"""commit_with's positions in the application's database (pubsub/tx_positions.py): a callback's writes
and the position commit together or not at all.

To see it fail: write the position after the savepoint is released (a failed callback's position
still moves, and a crash between them applies a message twice), or roll nothing back on a raise."""

from __future__ import annotations

import sqlite3

import pytest

from pubsub.message import Message
from pubsub.tx_positions import TxPositions


def msg(seq: int, publisher: str = "P") -> Message:
    return Message("orders", b"x", publisher, seq, 0, 0)


def db(path) -> sqlite3.Connection:  # noqa: ANN001
    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("CREATE TABLE IF NOT EXISTS got (seq INTEGER)")
    conn.commit()
    return conn


def test_the_callbacks_writes_and_the_position_commit_together_or_not_at_all(tmp_path):
    conn = db(tmp_path / "app.db")
    tx = TxPositions(conn, "books", "orders")
    tx.run(lambda: conn.execute("INSERT INTO got VALUES (1)"), [msg(1)])
    with pytest.raises(ZeroDivisionError):
        tx.run(lambda: (conn.execute("INSERT INTO got VALUES (2)"), 1 / 0), [msg(2)])
    assert tx.snapshot() == {"P": 1}
    tx.skip([msg(2)])  # dead-lettered: passed over on its own
    tx.run(lambda: conn.execute("INSERT INTO got VALUES (3)"), [msg(3)])
    conn.close()
    again = sqlite3.connect(tmp_path / "app.db", check_same_thread=False)
    assert [s for (s,) in again.execute("SELECT seq FROM got")] == [1, 3]
    assert TxPositions(again, "books", "orders").start("P") == (3, 3), "resumes after 3; nothing comes flagged"


def test_a_connection_the_clients_thread_cannot_use_or_a_name_of_another_topic_is_refused(tmp_path):
    mine = sqlite3.connect(tmp_path / "app.db")  # check_same_thread=True: callbacks run on another thread
    with pytest.raises(ValueError, match="check_same_thread=False"):
        TxPositions(mine, "books", "orders")
    conn = db(tmp_path / "app.db")
    TxPositions(conn, "books", "orders").run(lambda: None, [msg(1)])
    with pytest.raises(ValueError, match="follows 'orders', not 'refunds'"):
        TxPositions(conn, "books", "refunds")
    with pytest.raises(ValueError, match="sqlite3.Connection"):
        TxPositions("app.db", "books", "orders")  # type: ignore[arg-type]


def test_a_crash_before_the_position_is_written_leaves_no_trace_of_the_callback(tmp_path, monkeypatch):
    """The process dies after the callback's writes and before its position is written: reopened, the
    database holds neither (the message comes again, and is applied once)."""
    conn = db(tmp_path / "app.db")
    tx = TxPositions(conn, "books", "orders")

    def dies(messages: list[Message]) -> None:
        raise SystemExit("killed here")

    monkeypatch.setattr(tx, "_write", dies)
    with pytest.raises(SystemExit):
        tx.run(lambda: conn.execute("INSERT INTO got VALUES (1)"), [msg(1)])
    conn.close()  # what the process had not committed is gone with it
    again = sqlite3.connect(tmp_path / "app.db", check_same_thread=False)
    assert again.execute("SELECT count(*) FROM got").fetchone() == (0,), "the callback's write committed apart"
    assert TxPositions(again, "books", "orders").start("P") == (0, 0)
