"""Exactly once into the application's database: a durable subscription whose position commits in the
application's own SQLite transaction (`subscribe(topic, durable=NAME, commit_with=conn, callback=...)`).

A durable subscription is otherwise at least once: the position is committed after the callback, so
a process killed between the two delivers the message again, flagged `redelivered`
(pubsub/positions.py). Here each callback runs inside a savepoint of a transaction of the
application's connection, and the subscription's position (table `chordpub_positions`) is written in
the same transaction before it commits: the callback's writes and the position are both in the
database, or neither is. The callbacks of messages that arrived together share one transaction (group
commit, `run_all`), which is what keeps exactly once near the cost of at least once.
A restarted subscriber reads its positions from that database and resumes exactly after the last
committed message, and nothing it delivers again had left a trace (Kafka's offsets stored with the
consumer's output; the FEUP reliable pub/sub API's exactly-once promise).

A `get()` user does the same with `with sub.transaction() as conn:` (pubsub/delivery.py): the messages
get() returns inside the block commit with the block's writes, or none of them does.

A callback that raises has its writes rolled back; the message goes to the dead-letter queue and the
position moves past it in a transaction of its own. The connection is the subscription's while it
runs callbacks (on the client's thread: it must be made with `check_same_thread=False`), and a
callback must not commit it itself (the warning says so: the position would then commit apart).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pubsub.message import Message
from pubsub.positions import highest

log = logging.getLogger(__name__)

TABLE = "chordpub_positions"
SAVEPOINT = "chordpub_delivery"
UPSERT = (f"INSERT INTO {TABLE} VALUES (?, ?, ?, ?) ON CONFLICT(name, publisher) "
          "DO UPDATE SET committed=max(committed, excluded.committed)")


def usable_across_threads(conn: object) -> sqlite3.Connection:
    """`conn` when it is an sqlite3 connection the client's thread may use; ValueError saying why not."""
    if not isinstance(conn, sqlite3.Connection):
        raise ValueError(f"commit_with takes the application's sqlite3.Connection, not {type(conn).__name__}")
    failed: list[BaseException] = []

    def probe() -> None:
        try:
            conn.execute("SELECT 1").fetchall()
        except (sqlite3.ProgrammingError, sqlite3.OperationalError) as exc:
            failed.append(exc)

    t = threading.Thread(target=probe, name="commit-with-check")
    t.start()
    t.join()
    if failed:
        raise ValueError("commit_with needs a connection the client's thread can use: make it with "
                         f"sqlite3.connect(..., check_same_thread=False) ({failed[0]})")
    return conn


class TxPositions:
    """A durable subscription's committed positions, per publisher, in the application's database."""

    auto_commit = False  # nothing is committed outside a callback's transaction

    def __init__(self, conn: sqlite3.Connection, name: str, topic: str) -> None:
        self.conn, self.name, self.topic = usable_across_threads(conn), name, topic
        self._lock = threading.Lock()
        self._warned = False
        conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (name TEXT NOT NULL, topic TEXT NOT NULL, "
                     "publisher TEXT NOT NULL, committed INTEGER NOT NULL, PRIMARY KEY (name, publisher))")
        rows = conn.execute(f"SELECT topic, publisher, committed FROM {TABLE} WHERE name=?", (name,)).fetchall()
        if conn.in_transaction:
            conn.commit()
        other = {t for t, _, _ in rows if t != topic}
        if other:
            raise ValueError(f"durable subscription {name!r} in this database follows {sorted(other)[0]!r}, "
                             f"not {topic!r}")
        self.committed = {p: c for _, p, c in rows}

    def start(self, publisher: str) -> tuple[int, int]:
        """(committed, handed): nothing handed outlives its transaction, so nothing comes back flagged."""
        c = self.committed.get(publisher, 0)
        return c, c

    def knows(self, publisher: str) -> bool:
        with self._lock:
            return publisher in self.committed

    def hand(self, messages: list[Message]) -> None:
        """(Nothing to record before the callbacks: what they do commits with the position.)"""

    def commit(self, *messages: Message) -> None:
        """(Positions commit in the callbacks' transactions only.)"""

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.committed)

    def of(self, topic: str) -> TxPositions:
        return self

    def run(self, call: Callable[[], None], messages: list[Message]) -> None:
        """`call()` (the callback on `messages`) and the position after them, in one transaction of the
        application's connection; what `call` raises rolls its writes back and is raised again."""
        with self.block(messages):
            call()

    @contextmanager
    def block(self, messages: list[Message]) -> Iterator[sqlite3.Connection]:
        """A savepoint of the application's connection around the caller's work on `messages` (a list
        that may grow inside the block: `Subscription.transaction`); at its end the position after them
        is written and everything commits, or, when the block raises, its writes are rolled back."""
        conn = self.conn
        nested = conn.in_transaction  # the application left a transaction open: ours is a savepoint in it
        if nested:
            conn.execute(f"SAVEPOINT {SAVEPOINT}")
        changes = conn.total_changes
        try:
            yield conn
        except BaseException:
            try:
                if nested:
                    conn.execute(f"ROLLBACK TO {SAVEPOINT}")
                    conn.execute(f"RELEASE {SAVEPOINT}")
                else:
                    self._check_apart(changes)
                    conn.rollback()
            except sqlite3.OperationalError:  # the callback ended the transaction itself
                self._committed_apart()
            raise
        if not nested:
            self._check_apart(changes)
        self._write(messages)
        if nested:
            try:
                conn.execute(f"RELEASE {SAVEPOINT}")
            except sqlite3.OperationalError:
                self._committed_apart()
        if conn.in_transaction:
            conn.commit()
        self._moved(messages)

    def run_all(self, parts: list[list[Message]], call: Callable[[list[Message]], None],
                failed: Callable[[list[Message], Exception], None], active: Callable[[], bool]) -> int:
        """Group commit of the callbacks of messages that arrived together: each part's `call` in a
        savepoint of one transaction, and the positions after all of them written and committed once, at
        the end. A crash before that commit leaves none of their writes and none of their positions, so
        they all come again; one commit for many messages is what keeps exactly once near the cost of at
        least once under load (benchmarks/exactly_once.py). A part whose call raises is rolled back to its
        savepoint, handed to `failed` (dead-lettered) and passed over. Returns how many messages failed."""
        conn = self.conn
        errors = 0
        moved: list[Message] = []
        try:
            if not conn.in_transaction:
                conn.execute("BEGIN")
            for part in parts:
                if not active():
                    break
                conn.execute(f"SAVEPOINT {SAVEPOINT}")
                try:
                    call(part)
                except Exception as exc:
                    self._undo_savepoint()
                    errors += len(part)
                    failed(part, exc)
                else:
                    try:
                        conn.execute(f"RELEASE {SAVEPOINT}")
                    except sqlite3.OperationalError:  # the callback ended the transaction itself
                        self._committed_apart()
                moved.extend(part)
                if not conn.in_transaction:
                    conn.execute("BEGIN")
            if moved:
                self._write(moved)
            conn.commit()
        except BaseException:
            conn.rollback()  # none of them: they all come again
            raise
        self._moved(moved)
        return errors

    def _undo_savepoint(self) -> None:
        try:
            self.conn.execute(f"ROLLBACK TO {SAVEPOINT}")
            self.conn.execute(f"RELEASE {SAVEPOINT}")
        except sqlite3.OperationalError:  # the callback ended the transaction itself
            self._committed_apart()

    def _write(self, messages: list[Message]) -> None:
        if len(messages) == 1:  # a callback's one message: one statement, no list
            m = messages[0]
            self.conn.execute(UPSERT, (self.name, self.topic, m.publisher, m.seq))
            return
        self.conn.executemany(UPSERT, [(self.name, self.topic, p, s) for p, s in highest(messages).items()])

    def _moved(self, messages: list[Message]) -> None:
        with self._lock:
            for p, s in highest(messages).items():
                self.committed[p] = max(s, self.committed.get(p, 0))

    def _check_apart(self, changes: int) -> None:
        """The block changed rows and no transaction is open: it committed them itself."""
        if not self.conn.in_transaction and self.conn.total_changes > changes:
            self._committed_apart()

    def _committed_apart(self) -> None:
        if not self._warned:
            self._warned = True
            log.warning("%s: a callback committed the commit_with connection itself: its writes and the "
                        "subscription's position were committed apart (a crash between them delivers again)",
                        self.topic)
