"""A node's key/value entries: owned versus replica, versions, and replica leases.

Whether an entry is *owned* is not stored: it follows from the ring (key in (predecessor, me]),
which the caller passes in as `owns`. Replicas are leases: the owner refreshes them on its
first R-1 successors every few rounds (Chord's successor-list replication, SIGCOMM'01 §6.4),
and a replica no longer refreshed and no longer owned is dropped. Every entry carries a version
(the owner's clock at the write); merging keeps the newest, so a stale replica can never undo a
newer write, and deletes are tombstones kept for one lease. No sockets; time is a parameter: the
node passes its maintenance rounds, so a lease is a number of rounds (a machine too loaded to keep
the period slows the owner's refreshes and the holder's clock alike, and no replica lapses for it).

A replica's lease is renewed by arc (`refresh_arc`, one message from the owner for all it holds there,
every few rounds): the arc and its round are noted, and entries take them when expiry next looks at
them (`_apply_stamps`), not at every refresh; what a refresh reports is counted once per arc while no
entry comes or goes.

Replication is incremental: every applied write marks its key dirty, and the owner pushes only the
dirty entries it owns (`take_dirty`), plus everything when its replica set changes. A field of a
leased record (dht/records.py) is an entry of its own under ``key + SEP + name``, placed by the
key id of `key`; the Store tells an observer (the node's RecordTable) of every such entry it
applies or drops.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass

import mmh3

from dht.ids import in_half_open, key_id

# (key, value or None for a tombstone, version, is a field of a leased record (dht/records.py))
EntryTuple = tuple[str, bytes | None, int, bool]
RecordObserver = Callable[[str, "bytes | None", int], None]  # (composite key, value or None, version)

MAX_ARC_STAMPS = 16  # arcs refreshed since expiry last looked (or counted) kept apart; past it, applied
SEP = "\x00"  # between a record's key and a field's name; refused in plain keys by dht/wire.py


def field_key(key: str, name: str) -> str:
    return key + SEP + name


def split_field_key(composite: str) -> tuple[str, str]:
    key, _, name = composite.partition(SEP)
    return key, name


def entries_digest(entries: Iterable[tuple[str, int, bool]]) -> bytes:
    """An order-free digest of (key, version, tombstone) triples: the sum of their 128-bit hashes. Two
    holders of an arc with the same digest hold the same versions of the same keys (merges keep the newest
    version, so equal versions are equal writes)."""
    total = 0
    for key, version, gone in entries:
        total += mmh3.hash128(f"{key}\x00{version}\x00{int(gone)}", signed=False)
    return (total % (1 << 128)).to_bytes(16, "big")


def entry_key_id(key: str, bits: int, record: bool) -> int:
    """Where an entry lives on the ring: a record field lives with its record's key."""
    return key_id(split_field_key(key)[0] if record else key, bits)


@dataclass
class Entry:
    key_id: int
    value: bytes | None
    version: int
    refreshed: float  # when it was last written or refreshed by its owner, on the holder's clock
    record: bool = False


class Store:
    def __init__(self, bits: int, observer: RecordObserver | None = None) -> None:
        self.bits = bits
        self._entries: dict[str, Entry] = {}
        self.loaded = 0  # entries restored from disk at start (DurableStore)
        self.observer = observer
        self.dirty: set[str] = set()  # keys written since the owner last replicated them
        self.writes = 0  # writes applied so far; `replicated`: how many of them the successors hold
        self.replicated = 0
        # no entry expiry may drop was refreshed before this (None: unknown): `expire` looks at no
        # entry while it is within the lease, instead of at every entry every round (a node holding
        # tens of thousands of record fields spent a quarter of its CPU there)
        self._floor: float | None = None
        self._arc: tuple[int, int] | None = None  # the owned arc `_floor` was taken under
        self._stamps: dict[tuple[int, int], float] = {}  # arc (lo, hi) -> the round it was last refreshed
        self._counts: dict[tuple[int, int], tuple[int, int]] = {}  # arc -> (`_shape` then, entries in it)
        self._shape = 0  # changes whenever an entry comes or goes (an arc's count is then taken again)

    def _refreshed_at(self, now: float) -> None:
        if self._floor is not None and now < self._floor:
            self._floor = now

    def write(self, key: str, value: bytes | None, version: int, now: float, record: bool = False) -> bool:
        """Apply a write (value None = delete) if it is not older than what is held."""
        current = self._entries.get(key)
        if current is not None and current.version > version:
            return False
        self._refreshed_at(now)
        if current is not None and current.version == version:
            current.refreshed = now
            return False
        if current is None:
            self._shape += 1
        self._entries[key] = Entry(entry_key_id(key, self.bits, record), value, version, now, record)
        self.dirty.add(key)
        self.writes += 1
        if record and self.observer is not None:
            self.observer(key, value, version)
        return True

    def take_dirty(self, keep: Callable[[int], bool]) -> list[EntryTuple]:
        """The entries written since the last call whose key id satisfies `keep`; forgets the rest."""
        out = []
        for k in self.dirty:
            e = self._entries.get(k)
            if e is not None and keep(e.key_id):
                out.append((k, e.value, e.version, e.record))
        self.dirty.clear()
        return out

    def refresh(self, keep: Callable[[int], bool], now: float) -> int:
        """The owner says it still holds these (by arc): their replica leases start again."""
        self._refreshed_at(now)
        n = 0
        for e in self._entries.values():
            if keep(e.key_id):
                e.refreshed = now
                n += 1
        return n

    def refresh_arc(self, lo: int, hi: int, now: float) -> int:
        """`refresh` of the entries whose key id is in the arc (lo, hi] (dht/ids.py `in_half_open`;
        (lo, lo] is the whole circle); returns how many entries the arc holds. The arc is noted, not
        applied to each entry: an owner refreshes its replicas every few rounds, expiry looks at them
        once a lease."""
        self._refreshed_at(now)
        arc = (lo, hi)
        if arc not in self._stamps and len(self._stamps) >= MAX_ARC_STAMPS:
            self._apply_stamps()
        self._stamps[arc] = max(now, self._stamps.get(arc, now))
        counted = self._counts.get(arc)
        if counted is None or counted[0] != self._shape:
            if len(self._counts) >= MAX_ARC_STAMPS:
                self._counts.clear()
            counted = self._counts[arc] = (self._shape, len(self._in_arc(lo, hi)))
        return counted[1]

    def _in_arc(self, lo: int, hi: int) -> list[Entry]:
        """The entries whose key id is in (lo, hi], the test written out: it runs for every entry held."""
        entries = self._entries.values()
        if lo < hi:
            return [e for e in entries if lo < e.key_id <= hi]
        if lo > hi:
            return [e for e in entries if e.key_id > lo or e.key_id <= hi]
        return list(entries)

    def _apply_stamps(self) -> None:
        """Give each entry the newest refresh of an arc it is in, as if each had been applied at once."""
        for (lo, hi), now in self._stamps.items():
            for e in self._in_arc(lo, hi):
                if e.refreshed < now:
                    e.refreshed = now
        self._stamps.clear()

    def refreshed(self, key: str) -> float | None:
        """When `key` was last written or refreshed (None: not held), its arcs' refreshes counted."""
        e = self._entries.get(key)
        if e is None:
            return None
        return max([e.refreshed, *(now for (lo, hi), now in self._stamps.items() if in_half_open(e.key_id, lo, hi))])

    def arc_digest(self, lo: int, hi: int) -> bytes:
        """`entries_digest` of every entry held whose key id is in (lo, hi]."""
        return entries_digest((k, e.version, e.value is None) for k, e in self._entries.items()
                              if in_half_open(e.key_id, lo, hi))

    def merge(self, entries: Iterable[EntryTuple], now: float) -> int:
        """Merge entries pushed by an owner (replicate) or a leaving node (handover)."""
        return sum(self.write(k, v, ver, now, rec) for k, v, ver, rec in entries)

    def get(self, key: str) -> bytes | None:
        entry = self._entries.get(key)
        return None if entry is None else entry.value

    def is_record(self, key: str) -> bool:
        entry = self._entries.get(key)
        return entry is not None and entry.record

    def version(self, key: str) -> int:
        entry = self._entries.get(key)
        return 0 if entry is None else entry.version

    def select(self, keep: Callable[[int], bool]) -> list[EntryTuple]:
        """Entries (tombstones included) whose key id satisfies `keep`."""
        return [(k, e.value, e.version, e.record) for k, e in self._entries.items() if keep(e.key_id)]

    def expire(self, now: float, lease: float, owns: Callable[[int], bool],
               owed: Container[str] = (), arc: tuple[int, int] | None = None) -> list[str]:
        """Drop replicas not refreshed within `lease`, and tombstones older than `lease`; entries `owed`
        to their owners (a hand-back still to make) are no replicas and stay. `arc`: (lo, hi) when
        `owns(k)` is exactly "k in (lo, hi]" ((lo, lo]: every key). Given, the entries are looked at only
        when one of those we may drop can be past its lease, or the arc moved, rather than every round."""
        cutoff = now - lease
        if arc is None:
            self._apply_stamps()
            gone = [k for k, e in self._entries.items()
                    if e.refreshed < cutoff and (e.value is None or not (owns(e.key_id) or k in owed))]
            self._arc = self._floor = None
        elif arc == self._arc and self._floor is not None and self._floor >= cutoff:
            return []
        else:
            gone, self._floor = self._outside(arc, cutoff, owed, now)
            self._arc = arc
        if gone:
            self._shape += 1
        for k in gone:
            e = self._entries.pop(k)
            if e.record and e.value is not None and self.observer is not None:
                self.observer(k, None, 0)
        return gone

    def _outside(self, arc: tuple[int, int], cutoff: float, owed: Container[str],
                 now: float) -> tuple[list[str], float]:
        """`expire`'s look at every entry, the arc's test written out: (what goes, the oldest refresh
        among the entries that stay and are not ours)."""
        self._apply_stamps()
        lo, hi = arc
        wraps, whole = lo > hi, lo == hi
        gone = []
        floor = now
        for k, e in self._entries.items():
            kid = e.key_id
            if e.value is not None and (whole or (kid > lo or kid <= hi if wraps else lo < kid <= hi)):
                continue  # ours: no lease ends it while the arc stays
            if e.refreshed >= cutoff or (e.value is not None and k in owed):
                floor = min(floor, e.refreshed)
            else:
                gone.append(k)
        return gone, floor

    def count(self, keep: Callable[[int], bool] = lambda _k: True) -> int:
        """Live (non-tombstone) entries whose key id satisfies `keep`."""
        return sum(1 for e in self._entries.values() if e.value is not None and keep(e.key_id))

    def keys(self) -> list[str]:
        return [k for k, e in self._entries.items() if e.value is not None]

    def clear(self) -> None:
        """Forget everything (after a graceful leave has handed it all over)."""
        for k, e in self._entries.items():
            if e.record and e.value is not None and self.observer is not None:
                self.observer(k, None, 0)
        self._entries.clear()
        self._shape += 1
        self._stamps.clear()
        self.dirty.clear()

    def close(self) -> None:
        """Nothing to release in memory; DurableStore closes its database."""
