"""`--data-dir`: a node's store kept in sqlite3, so that a restarted node rejoins with its keys.

`DurableStore` is the in-memory Store with every applied write and every expiry written through
to DIR/store.sqlite3 (WAL journal, one transaction per change). The file remembers whose store it
is (node id and identifier bits): a different node, or the same one on a ring of another width,
is refused rather than served wrong keys. On restart the entries come back with a fresh lease;
what the ring then dictates is the maintenance loop's ordinary work: entries the node owns are
replicated to its successors, its successor hands over anything newer in its range (merges keep
the newest version), entries it no longer owns are handed to their owners once (dht/maintenance.py,
`hand_back`), and unowned ones then expire like any unrefreshed replica.

All calls come under the node's lock (as for Store), so one connection serves every thread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Container
from pathlib import Path

from dht.store import Entry, RecordObserver, Store, entry_key_id

FILE = "store.sqlite3"


class DurableStoreError(RuntimeError):
    """The data directory cannot be used by this node (another node's, unreadable)."""


class DurableStore(Store):
    def __init__(self, bits: int, directory: Path, node_id: int, observer: RecordObserver | None = None) -> None:
        super().__init__(bits, observer)
        directory = Path(directory)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(directory / FILE, check_same_thread=False, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self.db.execute("CREATE TABLE IF NOT EXISTS entries (key TEXT PRIMARY KEY, value BLOB, "
                            "version INTEGER NOT NULL, record INTEGER NOT NULL)")
            meta = dict(self.db.execute("SELECT name, value FROM meta"))
        except (OSError, sqlite3.Error) as exc:
            raise DurableStoreError(f"cannot use {directory / FILE}: {exc}") from None
        mine = {"node_id": str(node_id), "bits": str(bits)}
        if meta and meta != mine:
            raise DurableStoreError(f"{directory} holds the store of node {meta.get('node_id')} "
                                    f"({meta.get('bits')} bits), not of node {node_id} ({bits} bits): "
                                    "start with that --id/--bits, or use another --data-dir")
        self.db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", mine.items())
        now = 0  # the store's clock is the position's rounds (dht/store.py), none run yet
        for key, value, version, record in self.db.execute("SELECT key, value, version, record FROM entries"):
            self._entries[key] = Entry(entry_key_id(key, bits, bool(record)), value, int(version), now, bool(record))
            if record and value is not None and observer is not None:
                observer(key, value, int(version))
        self.loaded = len(self._entries)

    def write(self, key: str, value: bytes | None, version: int, now: float, record: bool = False) -> bool:
        applied = super().write(key, value, version, now, record)
        if applied:
            self.db.execute("INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?)", (key, value, version, int(record)))
        return applied

    def expire(self, now: float, lease: float, owns: Callable[[int], bool],
               owed: Container[str] = (), arc: tuple[int, int] | None = None) -> list[str]:
        gone = super().expire(now, lease, owns, owed, arc)
        if gone:
            self.db.executemany("DELETE FROM entries WHERE key = ?", [(k,) for k in gone])
        return gone

    def clear(self) -> None:
        super().clear()
        self.db.execute("DELETE FROM entries")

    def close(self) -> None:
        self.db.close()
