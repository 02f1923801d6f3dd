"""A node's key/value entries: owned versus replica, versions, and replica leases.

Whether an entry is *owned* is not stored: it follows from the ring (key in (predecessor, me]),
which the caller passes in as `owns`. Replicas are leases: the owner refreshes them on its
first R-1 successors every few rounds (Chord's successor-list replication, SIGCOMM'01 §6.4),
and a replica no longer refreshed and no longer owned is dropped. Every entry carries a version
(the owner's clock at the write); merging keeps the newest, so a stale replica can never undo a
newer write, and deletes are tombstones kept for one lease. No sockets; time is a parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dht.ids import key_id

# (key, value or None for a tombstone, version, is a leased record (dht/records.py))
EntryTuple = tuple[str, bytes | None, int, bool]


@dataclass
class Entry:
    key_id: int
    value: bytes | None
    version: int
    refreshed: float  # when it was last written or refreshed by its owner
    record: bool = False


class Store:
    def __init__(self, bits: int) -> None:
        self.bits = bits
        self._entries: dict[str, Entry] = {}
        self.loaded = 0  # entries restored from disk at start (DurableStore)

    def write(self, key: str, value: bytes | None, version: int, now: float, record: bool = False) -> bool:
        """Apply a write (value None = delete) if it is not older than what is held."""
        current = self._entries.get(key)
        if current is not None and current.version > version:
            return False
        if current is not None and current.version == version:
            current.refreshed = now
            return False
        self._entries[key] = Entry(key_id(key, self.bits), value, version, now, record)
        return True

    def merge(self, entries: Iterable[EntryTuple], now: float) -> int:
        """Merge entries pushed by an owner (replicate) or a leaving node (handover)."""
        return sum(self.write(k, v, ver, now, rec) for k, v, ver, rec in entries)

    def get(self, key: str) -> bytes | None:
        entry = self._entries.get(key)
        return None if entry is None else entry.value

    def is_record(self, key: str) -> bool:
        entry = self._entries.get(key)
        return entry is not None and entry.record

    def records(self, keep: Callable[[int], bool]) -> list[tuple[str, bytes]]:
        """(key, value) of the live leased records whose key id satisfies `keep`."""
        return [(k, e.value) for k, e in self._entries.items()
                if e.record and e.value is not None and keep(e.key_id)]

    def version(self, key: str) -> int:
        entry = self._entries.get(key)
        return 0 if entry is None else entry.version

    def select(self, keep: Callable[[int], bool]) -> list[EntryTuple]:
        """Entries (tombstones included) whose key id satisfies `keep`."""
        return [(k, e.value, e.version, e.record) for k, e in self._entries.items() if keep(e.key_id)]

    def expire(self, now: float, lease: float, owns: Callable[[int], bool]) -> list[str]:
        """Drop replicas not refreshed within `lease`, and tombstones older than `lease`."""
        gone = [
            k for k, e in self._entries.items()
            if now - e.refreshed > lease and (e.value is None or not owns(e.key_id))
        ]
        for k in gone:
            del self._entries[k]
        return gone

    def count(self, keep: Callable[[int], bool] = lambda _k: True) -> int:
        """Live (non-tombstone) entries whose key id satisfies `keep`."""
        return sum(1 for e in self._entries.values() if e.value is not None and keep(e.key_id))

    def keys(self) -> list[str]:
        return [k for k, e in self._entries.items() if e.value is not None]

    def clear(self) -> None:
        """Forget everything (after a graceful leave has handed it all over)."""
        self._entries.clear()

    def close(self) -> None:
        """Nothing to release in memory; DurableStore closes its database."""
