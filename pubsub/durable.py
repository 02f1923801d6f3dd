"""A client's data directory: what must outlive its process, in DIR/client.sqlite3 (WAL journal).

- Its identity: the client's name. A restarted client takes it back; a client of another name is
  refused rather than handed someone else's positions or sequence numbers.
- Publisher side, per topic: the last sequence number used and the retained messages
  (pubsub/history.py decides what is retained; pubsub/journal.py writes each message here before it
  is sent, so a restarted publisher continues the numbering and can repair anything it ever sent
  and still retains), and the positions its durable subscribers acknowledged.
- Subscriber side, per durable subscription: the topic it follows and, per publisher, the last
  sequence number *committed* (the application is done with it) and the last *handed* to the
  application (delivered to a callback or a queue). After a crash, delivery resumes after the
  committed position; messages up to the handed one may have been seen before and come marked
  `redelivered`.
- The dead-letter queue: messages a subscription will not deliver, with the message itself when it
  is known (a callback that raised on it) or its range (it is gone everywhere), and the reason.

The writes on a message's way (the publisher's journal, its durable subscribers' acknowledged
positions, a durable subscription's positions) are appended to DIR/client.log (pubsub/record_log.py:
one `write()`, no transaction) and folded into the database in bulk: by the checkpoint thread once
the log passes FOLD_BYTES, before any read of what they hold, and at close. After a kill the log holds
what the process wrote since its last fold, and the next client of the directory folds it when it
opens it (a record torn by the kill was never acted on, and is dropped). A fold renames the log aside first
(DIR/client.log.folding), so the appending threads never wait for it; a fold interrupted by a kill is
done again, whole, by the next (its writes are idempotent in order). A reader of someone else's
directory (`create=False`: `chordpub dlq`) neither appends nor folds: it reads the log where it is.

One connection, used under a lock from the client's threads (the io loop, the journal thread, the
application's thread committing). A commit is one write to the WAL file: it survives the process
being killed; `synchronous=NORMAL` leaves only a power cut able to take the last commits back, as it
does the log's last records. The WAL is copied back into the file by a thread of its own
(pubsub/checkpointer.py), not by a commit.
"""

from __future__ import annotations

import logging
import operator
import os
import re
import sqlite3
import threading
import time
import uuid
from pathlib import Path

from pubsub.checkpointer import BACKSTOP_PAGES, Checkpointer
from pubsub.envelope import DEFAULT_PRIORITY, Envelope
from pubsub.message import DeadLetter
from pubsub.record_log import RecordLog, read

log = logging.getLogger(__name__)

FILE = "client.sqlite3"
LOG = "client.log"  # the journal's and positions' records not folded into FILE yet
FOLDING = "client.log.folding"  # a log being folded (or whose fold a kill interrupted)
FOLD_BYTES = 4 << 20  # the log's size past which the checkpoint thread folds it
LOG_LIMIT = 16 * FOLD_BYTES  # past it (the thread fell behind, or folds fail) a writer folds it itself
_ROW = operator.attrgetter("topic", "seq", "sent_ns", "payload", "key", "priority", "msg_id")  # a journal row
_RETAINED, _TOPIC_SEQ = operator.itemgetter(0, 1, 2, 3), operator.itemgetter(0, 1)
_KEY, _PRIORITY, _ID = operator.itemgetter(4), operator.itemgetter(5), operator.itemgetter(6)
_JOURNAL, _POSITIONS, _ACKS = 0, 1, 2  # record kinds: [0, rows, trims, ids_before_ns],
# [1, name, handed, committed], [2, topic, {subscriber: position}]
FORMAT = "chordpub-client/2"  # /2: the hot writes wait in client.log, which a client of /1 would not read
EARLIER_FORMATS = ("chordpub-client/1",)  # taken, and marked /2 by a client that writes (so that an older
# client refuses the directory rather than miss what its log holds)
NODE_FILE = "store.sqlite3"  # a discovery node's data directory (dht/durable.py)
_NAME = re.compile(r"^[A-Za-z0-9._:@-]{1,200}$")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS publications (topic TEXT PRIMARY KEY, last_seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS retained (topic TEXT NOT NULL, seq INTEGER NOT NULL, sent_ns INTEGER NOT NULL,
    payload BLOB NOT NULL, PRIMARY KEY (topic, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS acks (topic TEXT NOT NULL, subscriber TEXT NOT NULL, position INTEGER NOT NULL,
    PRIMARY KEY (topic, subscriber)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS durables (name TEXT PRIMARY KEY, topic TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS positions (name TEXT NOT NULL, publisher TEXT NOT NULL, committed INTEGER NOT NULL,
    handed INTEGER NOT NULL, PRIMARY KEY (name, publisher)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tags (topic TEXT NOT NULL, seq INTEGER NOT NULL, key TEXT, priority INTEGER NOT NULL,
    PRIMARY KEY (topic, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS groups (topic TEXT NOT NULL, name TEXT NOT NULL, ordering TEXT NOT NULL,
    max_deliver INTEGER NOT NULL, floor INTEGER NOT NULL, sent INTEGER NOT NULL, PRIMARY KEY (topic, name))
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS msg_ids (topic TEXT NOT NULL, msg_id TEXT NOT NULL, seq INTEGER NOT NULL,
    sent_ns INTEGER NOT NULL, PRIMARY KEY (topic, msg_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dead_letters (id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL,
    publisher TEXT NOT NULL, subscriber TEXT NOT NULL, from_seq INTEGER NOT NULL, to_seq INTEGER NOT NULL,
    reason TEXT NOT NULL, ts REAL NOT NULL, sent_ns INTEGER, payload BLOB, replayed REAL);
"""


def moved_positions(records: list) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
    """The highest handed and committed positions the log's `records` hold, by (name, publisher)."""
    handed: dict[tuple[str, str], int] = {}
    committed: dict[tuple[str, str], int] = {}
    for record in records:
        if record[0] == _POSITIONS:
            _kind, name, hands, commits = record
            for into, moved in ((handed, hands), (committed, commits)):
                for publisher, seq in moved.items():
                    into[name, publisher] = max(seq, into.get((name, publisher), 0))
    return handed, committed


class DataDirError(ValueError):
    """The data directory cannot be used by this client (another's, unreadable, not ours)."""


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"a client or durable name is 1-200 of A-Z a-z 0-9 . _ : @ -, got {name!r}")
    return name


class DataDir:
    """DIR/client.sqlite3, opened for the client `name` (None: whoever it belongs to, or a new name)."""

    def __init__(self, directory: str | Path, name: str | None = None, *, create: bool = True) -> None:
        self.directory = Path(directory)
        if name is not None:
            check_name(name)
        path = self.directory / FILE
        if self.directory.exists() and not self.directory.is_dir():
            raise DataDirError(f"{self.directory} is not a directory")
        if (self.directory / NODE_FILE).exists():
            raise DataDirError(f"{self.directory} is a discovery node's data directory, not a client's")
        if not path.exists() and not create:
            raise DataDirError(f"{self.directory} holds no client state ({FILE} is missing)")
        self.lock = threading.Lock()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fresh = not path.exists() or path.stat().st_size == 0
            self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            if fresh:
                self.db.execute("PRAGMA journal_mode=WAL")
            else:
                self._check_existing(path, create)
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("PRAGMA busy_timeout=5000")
            self.db.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_PAGES}")
        except sqlite3.DatabaseError as exc:
            raise DataDirError(f"{path} is not a usable client state file ({exc}): refusing to touch it") from None
        except OSError as exc:
            raise DataDirError(f"cannot use {self.directory}: {exc.strerror or exc}") from None
        self.name = self._claim(name, fresh)
        self._log_lock = threading.Lock()  # appends and the log's renaming; `lock` is the database's
        # a reader (create=False: `chordpub dlq`) leaves the log to the client whose it is
        self._log = RecordLog(self.directory / LOG) if create else None
        if self._log is not None:  # what a killed process left, folded before a torn record could be
            with self.lock:  # followed by new ones (read would stop at it)
                self._fold()
        self.checkpointer = Checkpointer(path, fold=self._fold_if_big)  # both off the committing threads

    def _check_existing(self, path: Path, create: bool) -> None:
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        fmt = None
        if "meta" in tables:
            row = self.db.execute("SELECT value FROM meta WHERE name='format'").fetchone()
            fmt = row[0] if row else None
        if fmt != FORMAT and fmt not in EARLIER_FORMATS:
            self.db.close()
            raise DataDirError(f"{path} is not a chordpub client's state file (format {fmt!r}): refusing to touch it")
        self.db.execute("PRAGMA journal_mode=WAL")
        if fmt != FORMAT and create:
            with self.db:
                self.db.execute("BEGIN")
                self.db.execute("UPDATE meta SET value=? WHERE name='format'", (FORMAT,))

    def _claim(self, name: str | None, fresh: bool) -> str:
        with self.lock:
            if fresh:
                self.db.executescript(_SCHEMA)
                chosen = name or f"client-{uuid.uuid4().hex[:12]}"
                with self.db:
                    self.db.execute("BEGIN")
                    self.db.executemany("INSERT INTO meta VALUES (?, ?)", [("format", FORMAT), ("name", chosen)])
                return chosen
            row = self.db.execute("SELECT value FROM meta WHERE name='name'").fetchone()
            if row is None:
                self.db.close()
                raise DataDirError(f"{self.directory} names no client: refusing to touch it")
            if name is not None and row[0] != name:
                self.db.close()
                raise DataDirError(f"{self.directory} holds the state of client {row[0]!r}, not {name!r}: "
                                   "give each client its own data directory")
            return row[0]

    def close(self) -> None:
        self.checkpointer.stop()
        with self.lock:
            if self._log is not None:
                self._fold()
                self._log.close()
            self.db.close()

    # -- the log of hot writes -------------------------------------------------------------------------
    def _append(self, record: list) -> None:
        if self._log is None:
            raise DataDirError(f"{self.directory} was opened to be read (create=False), not written")
        with self._log_lock:
            self._log.append(record)
            size = self._log.size
        if size >= LOG_LIMIT:
            with self.lock:
                self._fold()
        elif size >= FOLD_BYTES:
            self.checkpointer.nudge()

    def _fold_if_big(self) -> None:
        if self._log is not None and self._log.size >= FOLD_BYTES:
            with self.lock:
                self._fold()

    def _fold(self) -> None:
        """Move the log's records into the database (the caller holds `lock`): first a fold a kill
        interrupted, then the log, renamed aside while the appenders wait for nothing but the rename."""
        if self._log is None:
            return
        current, folding = self.directory / LOG, self.directory / FOLDING
        if folding.exists():
            self._apply(folding)
        with self._log_lock:
            if self._log.size == 0:
                return
            os.replace(current, folding)
            self._log.close()
            self._log = RecordLog(current)
        self._apply(folding)

    def _apply(self, path: Path) -> None:
        records, torn = read(path)
        if torn:
            log.warning("%s: %d bytes after its last whole record left unread (a write cut short by a kill)",
                        path, torn)
        rows: list = []  # every journaled message of the fold, oldest first
        floor: dict[str, int] = {}  # per topic, the oldest seq retention keeps after the fold's trims
        ids_before_ns = 0  # and the msg ids it forgets
        with self.db:
            self.db.execute("BEGIN")
            for record in records:
                if record[0] == _JOURNAL:
                    _kind, more, trims, forget = record
                    rows += more
                    for topic, first in trims.items():
                        floor[topic] = max(first, floor.get(topic, 0))
                    ids_before_ns = max(forget, ids_before_ns)
                elif record[0] == _ACKS:
                    self.db.executemany("INSERT OR REPLACE INTO acks VALUES (?, ?, ?)",
                                        [(record[1], s, p) for s, p in record[2].items()])
                elif record[0] != _POSITIONS:
                    log.warning("%s: a record of unknown kind %r skipped", path, record[0])
            self._apply_rows(rows, floor)
            self._apply_trims(floor, ids_before_ns)
            handed, committed = moved_positions(records)
            self.db.executemany("INSERT INTO positions VALUES (?, ?, 0, ?) ON CONFLICT(name, publisher) DO "
                                "UPDATE SET handed=max(handed, excluded.handed)",
                                [(n, p, s) for (n, p), s in handed.items()])
            self.db.executemany("INSERT INTO positions VALUES (?, ?, ?, ?) ON CONFLICT(name, publisher) DO "
                                "UPDATE SET committed=max(committed, excluded.committed), "
                                "handed=max(handed, excluded.committed)",
                                [(n, p, s, s) for (n, p), s in committed.items()])
        path.unlink()

    # -- the publisher's journal ------------------------------------------------------------------------
    def publication(self, topic: str) -> tuple[int, list[Envelope], dict[str, int], list[tuple[str, int, int]]]:
        """What a restarted publisher had on `topic`: last seq used, retained messages, acks, and the msg
        ids it sent (msg_id, seq, sent_ns), oldest first."""
        with self.lock:
            self._fold()
            row = self.db.execute("SELECT last_seq FROM publications WHERE topic=?", (topic,)).fetchone()
            kept = [Envelope(topic, self.name, seq, sent_ns, payload, key, DEFAULT_PRIORITY if prio is None else prio)
                    for seq, sent_ns, payload, key, prio in self.db.execute(
                        "SELECT r.seq, r.sent_ns, r.payload, t.key, t.priority FROM retained r LEFT JOIN tags t "
                        "ON t.topic=r.topic AND t.seq=r.seq WHERE r.topic=? ORDER BY r.seq", (topic,))]
            acks = dict(self.db.execute("SELECT subscriber, position FROM acks WHERE topic=?", (topic,)))
            ids = list(self.db.execute("SELECT msg_id, seq, sent_ns FROM msg_ids WHERE topic=? ORDER BY sent_ns, seq",
                                       (topic,)))
        return (row[0] if row else 0), kept, acks, ids

    def journal(self, messages: list[Envelope], trims: dict[str, int], ids_before_ns: int = 0) -> None:
        """Keep `messages` (before they are sent) with their msg ids, and drop what retention let go
        (`trims` maps a topic to its oldest retained seq) and the ids sent before `ids_before_ns` (past
        the dedup window): one record appended to the log."""
        self._append([_JOURNAL, list(map(_ROW, messages)), trims, ids_before_ns])

    def _apply_rows(self, rows: list, floor: dict[str, int]) -> None:
        """Journaled messages, oldest first, into the tables (the folding transaction). A message that
        retention let go of within the same fold (below its topic's `floor`) is not kept at all: a
        trim only ever lets go of messages journaled before it, so it would be deleted in this very
        transaction (a durable subscriber that keeps up acknowledges most messages before their fold)."""
        if not rows:
            return
        self.db.executemany("INSERT INTO publications VALUES (?, ?) ON CONFLICT(topic) DO UPDATE SET "
                            "last_seq=max(last_seq, excluded.last_seq)", dict(map(_TOPIC_SEQ, rows)).items())
        ids = list(map(_ID, rows))
        if ids.count(None) != len(rows):
            self.db.executemany("INSERT OR REPLACE INTO msg_ids VALUES (?, ?, ?, ?)",
                                [(r[0], r[6], r[1], r[2]) for r in rows if r[6] is not None])
        kept = [r for r in rows if r[1] >= floor.get(r[0], 0)] if floor else rows
        self.db.executemany("INSERT OR REPLACE INTO retained VALUES (?, ?, ?, ?)", map(_RETAINED, kept))
        keys, priorities = list(map(_KEY, kept)), list(map(_PRIORITY, kept))
        if keys.count(None) != len(kept) or priorities.count(DEFAULT_PRIORITY) != len(kept):
            self.db.executemany("INSERT OR REPLACE INTO tags VALUES (?, ?, ?, ?)",  # a consumer group's
                                [(r[0], r[1], r[4], r[5]) for r in kept  # (most messages have neither)
                                 if r[4] is not None or r[5] != DEFAULT_PRIORITY])

    def _apply_trims(self, trims: dict[str, int], ids_before_ns: int) -> None:
        if trims:
            self.db.executemany("DELETE FROM retained WHERE topic=? AND seq<?", list(trims.items()))
            self.db.executemany("DELETE FROM tags WHERE topic=? AND seq<?", list(trims.items()))
        if ids_before_ns:
            self.db.execute("DELETE FROM msg_ids WHERE sent_ns<?", (ids_before_ns,))

    def save_acks(self, topic: str, acks: dict[str, int]) -> None:
        """Durable subscribers' acknowledged positions on `topic` (each only moves forward): one record
        appended to the log (the io loop's, which must not wait for a fold)."""
        self._append([_ACKS, topic, acks])

    def save_group(self, topic: str, name: str, ordering: str, max_deliver: int, floor: int, sent: int) -> None:
        """A durable consumer group of a topic we publish: everything up to `floor` is done with, and
        nothing after `sent` has been handed to a member yet."""
        with self.lock, self.db:
            self.db.execute("BEGIN")
            self.db.execute("INSERT OR REPLACE INTO groups VALUES (?, ?, ?, ?, ?, ?)",
                            (topic, name, ordering, max_deliver, floor, sent))

    def groups(self, topic: str) -> list[tuple[str, str, int, int, int]]:
        """The durable groups of `topic`: (name, ordering, max_deliver, floor, sent)."""
        with self.lock:
            return list(self.db.execute("SELECT name, ordering, max_deliver, floor, sent FROM groups WHERE topic=? "
                                        "ORDER BY name", (topic,)))

    # -- durable subscriptions --------------------------------------------------------------------------
    def durable(self, name: str, topic: str) -> dict[str, tuple[int, int]]:
        """Claim durable subscription `name` for `topic`; its positions: publisher -> (committed, handed)."""
        check_name(name)
        with self.lock:
            self._fold()
            with self.db:
                self.db.execute("BEGIN")
                row = self.db.execute("SELECT topic FROM durables WHERE name=?", (name,)).fetchone()
                if row is not None and row[0] != topic:
                    raise DataDirError(f"durable subscription {name!r} in {self.directory} follows {row[0]!r}, "
                                       f"not {topic!r}")
                if row is None:
                    self.db.execute("INSERT INTO durables VALUES (?, ?)", (name, topic))
                return {p: (c, h) for p, c, h in self.db.execute(
                    "SELECT publisher, committed, handed FROM positions WHERE name=?", (name,))}

    def positions(self, name: str) -> dict[str, tuple[int, int]]:
        """The positions kept under `name` (publisher -> (committed, handed)), claiming nothing."""
        with self.lock:
            self._fold()
            kept = {p: (c, h) for p, c, h in self.db.execute(
                "SELECT publisher, committed, handed FROM positions WHERE name=?", (name,))}
        if self._log is None:  # a reader: the records its writer has not folded yet, read where they are
            handed, committed = moved_positions(read(self.directory / FOLDING)[0] + read(self.directory / LOG)[0])
            for (of, publisher), seq in handed.items():
                if of == name:
                    c, h = kept.get(publisher, (0, 0))
                    kept[publisher] = (c, max(h, seq))
            for (of, publisher), seq in committed.items():
                if of == name:
                    c, h = kept.get(publisher, (0, 0))
                    kept[publisher] = (max(c, seq), max(h, seq))
        return kept

    def set_positions(self, name: str, handed: dict[str, int] | None = None,
                      committed: dict[str, int] | None = None) -> None:
        """Move a durable subscription's positions forward (never back): one record appended to the log."""
        self._append([_POSITIONS, name, handed or {}, committed or {}])

    # -- the dead-letter queue ---------------------------------------------------------------------------
    def dead_letter(self, letter: DeadLetter) -> None:
        with self.lock, self.db:
            self.db.execute("BEGIN")
            self.db.execute("INSERT INTO dead_letters (topic, publisher, subscriber, from_seq, to_seq, reason, ts, "
                            "sent_ns, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            (letter.topic, letter.publisher, letter.subscriber, letter.from_seq, letter.to_seq,
                             letter.reason, letter.ts, letter.sent_ns, letter.payload))

    def dead_letters(self, pending_only: bool = False) -> list[dict]:
        """The queue, oldest first: each a dict with id, the letter's fields, and `replayed` (a time)."""
        query = ("SELECT id, topic, publisher, subscriber, from_seq, to_seq, reason, ts, sent_ns, payload, replayed "
                 "FROM dead_letters" + (" WHERE replayed IS NULL" if pending_only else "") + " ORDER BY id")
        keys = ("id", "topic", "publisher", "subscriber", "from_seq", "to_seq", "reason", "ts", "sent_ns", "payload",
                "replayed")
        with self.lock:
            return [dict(zip(keys, row, strict=True)) for row in self.db.execute(query)]

    def mark_replayed(self, ids: list[int]) -> None:
        with self.lock, self.db:
            self.db.execute("BEGIN")
            self.db.executemany("UPDATE dead_letters SET replayed=? WHERE id=?", [(time.time(), i) for i in ids])
