"""commit_with's positions in the application's database (pubsub/tx_positions.py): a callback's writes
and the position commit together or not at all.

To see it fail: write the position after the savepoint is released (a failed callback's position
still moves, and a crash between them applies a message twice), or roll nothing back on a raise, or
commit each callback of a group on its own (a crash mid-group then keeps some)."""

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
    failed: list[int] = []

    def call(part: list[Message]) -> None:
        conn.execute("INSERT INTO got VALUES (?)", (part[0].seq,))
        if part[0].seq == 2:
            raise ZeroDivisionError("the application fails on 2")

    # messages that came together: one transaction, a savepoint each; 2 rolled back and passed over
    errors = tx.run_all([[msg(2)], [msg(3)]], call, lambda part, exc: failed.extend(m.seq for m in part),
                        lambda: True)
    assert (errors, failed, tx.snapshot()) == (1, [2], {"P": 3})
    conn.close()
    again = sqlite3.connect(tmp_path / "app.db", check_same_thread=False)
    assert [s for (s,) in again.execute("SELECT seq FROM got")] == [1, 3]
    assert TxPositions(again, "books", "orders").start("P") == (3, 3), "resumes after 3; nothing comes flagged"


def test_a_group_commit_cut_short_leaves_none_of_its_messages(tmp_path, monkeypatch):
    """The process dies in the middle of a group of callbacks (or before their one commit): reopened, the
    database holds none of the group's writes and the position before it; they all come again."""
    conn = db(tmp_path / "app.db")
    tx = TxPositions(conn, "books", "orders")
    tx.run(lambda: conn.execute("INSERT INTO got VALUES (1)"), [msg(1)])

    def call(part: list[Message]) -> None:
        conn.execute("INSERT INTO got VALUES (?)", (part[0].seq,))
        if part[0].seq == 4:
            raise SystemExit("killed here")

    with pytest.raises(SystemExit):
        tx.run_all([[msg(2)], [msg(3)], [msg(4)]], call, lambda part, exc: None, lambda: True)
    conn.close()
    again = sqlite3.connect(tmp_path / "app.db", check_same_thread=False)
    assert [s for (s,) in again.execute("SELECT seq FROM got")] == [1]
    assert TxPositions(again, "books", "orders").start("P") == (1, 1)


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


def test_a_transaction_left_open_is_kept_and_a_callback_committing_itself_is_warned_of(tmp_path, caplog):
    conn = db(tmp_path / "app.db")
    tx = TxPositions(conn, "books", "orders")
    conn.execute("INSERT INTO got VALUES (100)")  # the application's own, still open: ours nests in it
    with pytest.raises(ZeroDivisionError):
        tx.run(lambda: (conn.execute("INSERT INTO got VALUES (1)"), 1 / 0), [msg(1)])
    assert conn.in_transaction and [s for (s,) in conn.execute("SELECT seq FROM got")] == [100]
    tx.run(lambda: conn.execute("INSERT INTO got VALUES (2)"), [msg(2)])
    assert not conn.in_transaction and caplog.records == []
    tx.run(lambda: (conn.execute("INSERT INTO got VALUES (3)"), conn.commit()), [msg(3)])
    assert "committed apart" in caplog.text
    assert [s for (s,) in conn.execute("SELECT seq FROM got")] == [100, 2, 3] and tx.snapshot() == {"P": 3}
