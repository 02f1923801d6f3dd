"""A Store's expiry, given the arc the node owns, looks at no entry while none it may drop can be past its
lease and the arc has not moved (dht/store.py `_floor`, `_arc`), and drops exactly what a look at every
entry every round would: replicas and tombstones not refreshed within the lease, never a live entry it
owns or one it still owes to its owner. A property test runs random writes, refreshes, moves of the
arc and rounds against that rule, written out below. An arc's refresh is noted and applied when expiry
looks (`_apply_stamps`), and the count it reports is kept while no entry comes or goes: the same test
holds both to the rule.

To see it fail: make `expire` skip while `self._floor` is below the cutoff as well (`>=` becomes
`<=`): replicas past their lease stay; or skip after the arc moved (`arc == self._arc and ` dropped):
entries that are no longer ours stay past their lease; or leave an owed entry out of the floor
(`or (e.value is not None and k in owed)` dropped): it goes while still owed; or look without applying
the arcs' refreshes first (`self._apply_stamps()` gone from `_outside`): replicas refreshed by arc go
at the end of their first lease; or keep an arc's count when an entry is added (`self._shape += 1` gone
from `write`): a refresh reports what the arc held before.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dht import store as store_module
from dht.ids import in_half_open, key_id
from dht.store import Store

BITS = 8
LEASE = 4.0


class PlainStore:
    """The rule, with every entry looked at on every call."""

    def __init__(self) -> None:
        self.entries: dict[str, list] = {}  # key -> [key id, value, version, refreshed]

    def write(self, key: str, value: bytes | None, version: int, now: float) -> None:
        e = self.entries.get(key)
        if e is not None and e[2] > version:
            return
        if e is not None and e[2] == version:
            e[3] = now
            return
        self.entries[key] = [key_id(key, BITS), value, version, now]

    def refresh_arc(self, lo: int, hi: int, now: float) -> int:
        held = [e for e in self.entries.values() if in_half_open(e[0], lo, hi)]
        for e in held:
            e[3] = now
        return len(held)

    def expire(self, now: float, lo: int, hi: int, owed: set[str]) -> list[str]:
        gone = [k for k, e in self.entries.items()
                if now - e[3] > LEASE and (e[1] is None or not (in_half_open(e[0], lo, hi) or k in owed))]
        for k in gone:
            del self.entries[k]
        return gone


keys = st.sampled_from([f"k{i}" for i in range(6)])
ids = st.integers(0, 255)
steps = st.lists(st.one_of(
    st.tuples(st.just("write"), keys, st.booleans(), st.integers(1, 6)),
    st.tuples(st.just("refresh"), ids, ids),
    st.tuples(st.just("arc"), ids, ids),
    st.tuples(st.just("round"), st.sets(keys, max_size=2)),
    st.tuples(st.just("tick"), st.integers(1, 4)),
), max_size=60)


@settings(max_examples=400, deadline=None)
@given(ids, ids, steps, st.integers(1, 3))
def test_expiry_drops_exactly_what_a_look_at_every_entry_would(lo, hi, ops, bound):
    kept = store_module.MAX_ARC_STAMPS
    store_module.MAX_ARC_STAMPS = bound  # the bound on noted arcs reached within a few refreshes
    try:
        check_against_the_rule(lo, hi, ops)
    finally:
        store_module.MAX_ARC_STAMPS = kept


def check_against_the_rule(lo: int, hi: int, ops: list[tuple]) -> None:
    store, plain, now = Store(bits=BITS), PlainStore(), 0.0
    for op in ops:
        if op[0] == "write":
            _, key, live, version = op
            value = key.encode() if live else None
            store.write(key, value, version, now)
            plain.write(key, value, version, now)
        elif op[0] == "refresh":
            assert store.refresh_arc(op[1], op[2], now) == plain.refresh_arc(op[1], op[2], now)
        elif op[0] == "arc":
            lo, hi = op[1], op[2]
        elif op[0] == "round":

            def owns(k: int, lo: int = lo, hi: int = hi) -> bool:
                return in_half_open(k, lo, hi)

            assert sorted(store.expire(now, LEASE, owns, op[1], arc=(lo, hi))) == \
                sorted(plain.expire(now, lo, hi, op[1]))
        else:
            now += op[1]
        held = {k: (e.value, e.version, store.refreshed(k)) for k, e in store._entries.items()}
        assert held == {k: (e[1], e[2], e[3]) for k, e in plain.entries.items()}


def nobody(_k: int) -> bool:
    return False


def test_a_replica_goes_the_round_its_lease_ends_though_rounds_in_between_looked_at_nothing():
    store = Store(bits=BITS)
    store.write("r", b"x", 1, now=0.0)
    k = store._entries["r"].key_id
    arc = ((k + 1) % 256, (k + 2) % 256)  # not ours
    for now in range(1, 5):
        assert store.expire(float(now), LEASE, nobody, arc=arc) == []
    assert store.expire(5.0, LEASE, nobody, arc=arc) == ["r"]


def test_an_entry_of_ours_goes_the_round_its_arc_moves_if_past_its_lease():
    store = Store(bits=BITS)
    store.write("o", b"x", 1, now=0.0)
    k = store._entries["o"].key_id
    ours, moved = ((k - 1) % 256, k), ((k + 1) % 256, (k + 2) % 256)
    assert store.expire(10.0, LEASE, lambda _k: True, arc=ours) == []
    assert store.expire(11.0, LEASE, nobody, arc=moved) == ["o"]


def test_an_entry_owed_to_its_owner_goes_the_round_it_is_handed_over():
    store = Store(bits=BITS)
    store.write("h", b"x", 1, now=0.0)
    k = store._entries["h"].key_id
    arc = ((k + 1) % 256, (k + 2) % 256)
    assert store.expire(10.0, LEASE, nobody, owed={"h"}, arc=arc) == []  # past its lease, still to be given
    assert store.expire(10.0, LEASE, nobody, owed=set(), arc=arc) == ["h"]


def test_a_replica_refreshed_by_its_arc_stays_a_lease_from_the_refresh():
    store = Store(bits=BITS)
    store.write("r", b"x", 1, now=0.0)
    k = store._entries["r"].key_id
    arc = ((k + 1) % 256, (k + 2) % 256)  # not ours
    assert store.refresh_arc((k - 1) % 256, k, 3.0) == 1
    assert store.expire(6.0, LEASE, nobody, arc=arc) == []  # past the write's lease, within the refresh's
    assert store.expire(8.0, LEASE, nobody, arc=arc) == ["r"]


def test_a_refresh_reports_what_its_arc_holds_as_entries_come_and_go():
    store = Store(bits=BITS)
    keys = [f"k{i}" for i in range(40)]
    for key in keys:
        store.write(key, b"x", 1, now=0.0)
    whole = (7, 7)
    assert store.refresh_arc(*whole, 1.0) == 40
    store.write("late", b"x", 1, now=1.0)
    assert store.refresh_arc(*whole, 2.0) == 41
    store.write("late", None, 2, now=2.0)  # a tombstone is still an entry
    assert store.refresh_arc(*whole, 3.0) == 41
    assert store.expire(9.0, LEASE, nobody, arc=(8, 9)) != []  # no refresh since 3: all go
    assert store.refresh_arc(*whole, 9.0) == 0
