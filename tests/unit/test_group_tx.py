"""A consumer group's ack with commit_with (pubsub/group_tx.py): a message's writes commit with the
group's row for it, once; a message that comes again has its writes rolled back; the rows are bounded.

To see it fail: let the ack commit whether or not its row was there (`if cur.rowcount == 0:` → `if
False:`): the message applied again commits its writes a second time."""

from __future__ import annotations

import sqlite3

import pytest

from pubsub import group_tx
from pubsub.group_tx import APPLIED, apply_once
from pubsub.message import Message


def orders(conn: sqlite3.Connection) -> list[str]:
    return [p for (p,) in conn.execute("SELECT payload FROM orders ORDER BY rowid")]


def test_a_message_applied_again_has_its_writes_rolled_back(tmp_path):
    conn = sqlite3.connect(tmp_path / "app.db")
    conn.execute("CREATE TABLE orders (payload TEXT)")
    conn.execute("INSERT INTO orders VALUES ('o1')")
    assert apply_once(conn, "billing", "invoices", "P", 1)
    conn.execute("INSERT INTO orders VALUES ('o1 again')")  # another member, after the first died unacked
    assert not apply_once(conn, "billing", "invoices", "P", 1)
    assert not conn.in_transaction
    conn.execute("INSERT INTO orders VALUES ('o1 by another group')")
    assert apply_once(conn, "audit", "invoices", "P", 1)  # each group applies it once
    assert orders(sqlite3.connect(tmp_path / "app.db")) == ["o1", "o1 by another group"]


def test_the_rows_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(group_tx, "APPLIED_KEPT", 50)
    monkeypatch.setattr(group_tx, "PRUNE_EVERY", 10)
    conn = sqlite3.connect(tmp_path / "app.db")
    for seq in range(1, 301):
        assert apply_once(conn, "g", "t", "P", seq)
    assert conn.execute(f"SELECT count(*) FROM {APPLIED}").fetchone()[0] <= 50 + 10


def test_a_failed_ack_leaves_neither_the_writes_nor_the_row_and_bad_terms_are_refused(tmp_path):
    conn = sqlite3.connect(tmp_path / "app.db")
    conn.execute("CREATE TABLE orders (payload TEXT)")
    conn.execute("INSERT INTO orders VALUES ('o1')")
    with pytest.raises(sqlite3.ProgrammingError):
        apply_once(conn, "g", "t", "P", object())  # type: ignore[arg-type]
    assert not conn.in_transaction and orders(conn) == []
    with pytest.raises(ValueError, match="sqlite3.Connection"):
        apply_once("app.db", "g", "t", "P", 1)
    plain = Message("t", b"x", "P", 1, 0, 0)
    with pytest.raises(ValueError, match="consumer group"):
        plain.ack(commit_with=conn)
    grouped = Message("t", b"x", "P", 2, 0, 0, group="g")
    assert grouped.ack(commit_with=conn) and not grouped.ack(commit_with=conn)
