"""Anti-entropy's digest (dht/store.py `entries_digest`, `Store.arc_digest`): an owner pushes its whole
arc to a replica every FULL_EVERY rounds only when the replica's digest of the arc differs from its own.
The digest must not depend on the order entries are held in, and must change with any key, version or
tombstone in the arc, and with nothing outside it.

To see it fail: a digest of the keys alone (`{version}` gone from the hashed text) calls a replica that
missed a newer write in sync, and anti-entropy never repairs it (docs/testing.md lists it)."""

from __future__ import annotations

from dht.store import Store, entries_digest

BITS = 8


def test_the_digest_ignores_order_and_sees_every_key_version_and_tombstone():
    triples = [("a", 1, False), ("b", 2, False), ("c\x00f", 3, True)]
    assert entries_digest(triples) == entries_digest(reversed(triples))
    assert len(entries_digest(triples)) == 16
    for changed in (("a", 2, False), ("a", 1, True), ("z", 1, False)):
        assert entries_digest([changed, *triples[1:]]) != entries_digest(triples), changed
    assert entries_digest(triples[1:]) != entries_digest(triples)
    assert entries_digest([]) == bytes(16)


def test_a_store_digests_just_the_arc_it_is_asked_about():
    store, owner = Store(bits=BITS), Store(bits=BITS)
    for i in range(60):
        store.write(f"k{i}", b"x", 1, now=0.0)
    ids = {k: e.key_id for k, e in store._entries.items()}
    lo, hi = 40, 200
    mine = [k for k, kid in ids.items() if lo < kid <= hi]
    for k in reversed(mine):  # the owner holds the arc's entries, written in another order
        owner.write(k, b"x", 1, now=5.0)
    assert 0 < len(mine) < 60
    assert store.arc_digest(lo, hi) == owner.arc_digest(lo, hi) == entries_digest((k, 1, False) for k in mine)
    store.write(mine[0], b"y", 2, now=1.0)  # a newer write the owner has not seen
    assert store.arc_digest(lo, hi) != owner.arc_digest(lo, hi)
    outside = next(k for k, kid in ids.items() if not lo < kid <= hi)
    owner.write(outside, None, 2, now=6.0)  # a tombstone outside (lo, hi]
    assert owner.arc_digest(lo, hi) == entries_digest((k, 1, False) for k in mine)
    assert owner.arc_digest(hi, lo) == entries_digest([(outside, 2, True)])
