"""Leased records without sockets: what a renewal costs the owner, epochs, expiry, the Store underneath."""

from __future__ import annotations

import random

import pytest

from dht.ids import in_half_open, key_id
from dht.node import ChordNode
from dht.records import (
    MISSING,
    READ_PAGE,
    Change,
    FieldValue,
    RecordTable,
    change_message,
    event_frame,
    events_topic,
    namespace,
)
from dht.store import Store, field_key


def table_and_store(bits: int = 64) -> tuple[RecordTable, Store]:
    table = RecordTable(bits)
    return table, Store(bits, table.observe)


def apply(table: RecordTable, store: Store, item: dict, now: float, version: int) -> dict:
    """What the node does with one item: apply, write what it asks, answer."""
    applied = table.apply(item, now)
    if applied.write is not None:
        store.write(applied.write[0], applied.write[1], version, now, record=True)
    return table.answer(item, applied.reply) if applied.reply["ok"] else applied.reply


def test_a_renewal_changes_one_deadline_and_nothing_else():
    table, store = table_and_store()
    set_item = {"k": "t", "f": "sub/direct/a", "op": "set", "val": b"v", "ttl": 3.0}
    assert apply(table, store, set_item, now=100.0, version=1) == {"ok": True}
    assert store.take_dirty(lambda _k: True)  # the first set is a write, replicated
    renewal = table.apply({"k": "t", "f": "sub/direct/a", "op": "renew"}, now=102.0)
    assert renewal.write is None and not renewal.news and renewal.reply == {"ok": True}
    assert table.leases[field_key("t", "sub/direct/a")] == 105.0
    assert not store.dirty  # nothing to replicate
    same = table.apply(set_item, now=103.0)  # the same value again: a renewal too
    assert same.write is None and not same.news
    assert table.apply({"k": "t", "f": "sub/direct/nobody", "op": "renew"}, now=103.0).reply == {
        "ok": False, "err": MISSING}


def test_epochs_move_per_namespace_and_only_on_membership_changes():
    table, store = table_and_store()
    apply(table, store, {"k": "t", "f": "pub/p1", "op": "set", "val": b"e1", "ttl": 3}, 0.0, version=10)
    assert table.epoch("t", "pub/") == 10
    apply(table, store, {"k": "t", "f": "sub/direct/s1", "op": "set", "val": b"", "ttl": 3}, 0.0, version=11)
    assert table.epoch("t", "pub/") == 10 and table.epoch("t", "sub/") == 11  # subscribers are not news to subscribers
    apply(table, store, {"k": "t", "f": "pub/p1", "op": "renew"}, 1.0, version=12)
    assert table.epoch("t", "pub/") == 10
    apply(table, store, {"k": "t", "f": "pub/p1", "op": "del"}, 2.0, version=13)
    assert table.epoch("t", "pub/") == 13 and table.view("t", "pub/") == {}
    reply = apply(table, store, {"k": "t", "read": "pub/", "count": "sub/"}, 2.0, version=14)
    assert reply == {"ok": True, "fields": {}, "epoch": 13, "count": 1}
    assert namespace("pub/x/y") == "pub/" and namespace("plain") == ""
    assert event_frame("t", "pub/", {"k": "t"}).startswith(events_topic("t", "pub/"))
    assert not event_frame("t2", "pub/", {"k": "t2"}).startswith(events_topic("t", "pub/"))


def test_an_owner_adopts_fields_it_never_leased_and_expires_the_rest():
    table, store = table_and_store()
    for name, version in (("pub/a", 1), ("pub/b", 2)):
        store.write(field_key("t", name), FieldValue(b"x", 3.0).encode(), version, 0.0, record=True)
    table.leases[field_key("t", "pub/a")] = 5.0  # a, leased here; b came by replication
    assert table.expired(now=4.0, owns=lambda _k: True) == []
    assert table.leases[field_key("t", "pub/b")] == 4.0 + 3 * 3.0  # adopted with a takeover's grace: 3 leases
    assert table.expired(now=6.0, owns=lambda _k: True) == [field_key("t", "pub/a")]
    table.expired(now=6.0, owns=lambda _k: False)  # no longer ours: its leases are forgotten
    assert not table.leases


def test_a_round_that_looks_only_at_due_leases_finds_what_a_look_at_every_field_finds():
    """Within one arc, `expired` pops due deadlines off a heap and adopts the fields written since the
    last round; it must answer exactly as the look at every field does, round after round, through
    sets, renewals, deletions, expiries and fields that arrive by replication.

    To see it fail: skip the adoption of the fields written since the last round (`for composite in
    ()` in `RecordTable.expired`), or do not push a lapsed lease back (`for composite, expires in
    {}.items()`): the leases, or the answers, part."""
    rng = random.Random(7)
    owns = lambda k: k % 3 != 0  # noqa: E731 - the arc: two keys in three are ours
    tables = [table_and_store() for _ in range(2)]
    keys, names = [f"t{i}" for i in range(12)], [f"pub/{c}" for c in "abcd"]
    version = 0
    for step in range(400):
        now = step * 0.5
        for _ in range(rng.randrange(4)):
            key, name, version = rng.choice(keys), rng.choice(names), version + 1
            roll, ttl = rng.random(), rng.choice((1.0, 2.0))
            for table, store in tables:
                if roll < 0.15:  # came by replication or a hand-over: never leased here
                    store.write(field_key(key, name), FieldValue(b"r", ttl).encode(), version, now, record=True)
                elif owns(key_id(key)):
                    op = "set" if roll < 0.6 else "renew" if roll < 0.9 else "del"
                    apply(table, store, {"k": key, "f": name, "op": op, "val": b"v", "ttl": 2.0}, now, version)
        answers = []
        for i, (table, store) in enumerate(tables):
            gone = table.expired(now, owns, arc="ours" if i == 0 else None)
            answers.append(sorted(gone))
            if step % 5:  # some rounds the lapsed fields stay a round longer (a delete not yet made)
                for composite in gone:
                    version += 1
                    store.write(composite, None, version, now, record=True)
        assert answers[0] == answers[1], step
        assert tables[0][0].leases == tables[1][0].leases, step
    assert any(tables[0][0].leases) and len(tables[0][0]._due) <= 2 * len(tables[0][0].leases) + 1024


def test_store_entries_of_a_record_live_at_the_records_key_and_replicate_incrementally():
    table, store = table_and_store(bits=16)
    composite = field_key("topic", "pub/p")
    store.write(composite, FieldValue(b"x", 3.0).encode(), 5, 0.0, record=True)
    store.write("plain", b"v", 6, 0.0)
    assert store._entries[composite].key_id == key_id("topic", 16)
    assert table.view("topic") == {"pub/p": b"x"}
    kid = key_id("topic", 16)
    assert [e[0] for e in store.take_dirty(lambda k: k == kid)] == [composite]
    assert store.take_dirty(lambda _k: True) == []  # taken once
    store.write(composite, None, 7, 1.0, record=True)  # a tombstone reaches the table as a deletion
    assert table.view("topic") == {}
    assert store.refresh(lambda k: in_half_open(k, kid - 1, kid), now=50.0) == 1
    assert store._entries[composite].refreshed == 50.0


def test_change_messages_keep_the_last_word_on_each_field():
    changes = [Change("t", "pub/a", b"1", 5, 4), Change("t", "pub/b", b"2", 6, 5), Change("t", "pub/a", None, 7, 6),
               Change("t", "pub/b", b"3", 8, 7)]
    assert change_message(changes) == {"k": "t", "set": {"pub/b": b"3"}, "del": ["pub/a"], "epoch": 8, "prev": 4}


def test_field_values_refuse_what_no_node_wrote():
    for raw in (b"", b"\x93\x01\x02\x03", FieldValue(b"x", 1.0).encode()[:-1]):
        with pytest.raises(ValueError):
            FieldValue.decode(raw)



def records(node: ChordNode, items: list[dict], about: bool = False) -> dict:
    with node.lock:
        return node._on_records({"op": "records", "id": 1, "items": items, "about": about})


def test_ten_thousand_subscribers_renewed_without_a_write_a_job_or_a_notification(node):
    n = 10_000
    for start in range(0, n, 4096):
        out = records(node, [{"k": "crowded", "f": f"sub/direct/{i}", "op": "set", "val": b"", "ttl": 30.0}
                             for i in range(start, min(start + 4096, n))])
        assert all(r["ok"] for r in out["results"])
    assert node.records.count("crowded", "sub/") == n  # no cap on a record's fields
    while not node.jobs.empty():
        node.jobs.get()
    changes_before = node.changes.qsize()
    versions = {k: e.version for k, e in node.store._entries.items()}
    node.store.dirty.clear()
    out = records(node, [{"k": "crowded", "f": f"sub/direct/{i}", "op": "renew", "epoch": "pub/"}
                         for i in range(4096)], about=True)
    assert all(r == {"ok": True, "epoch": 0} for r in out["results"])
    assert {k: e.version for k, e in node.store._entries.items()} == versions
    assert node.jobs.empty() and not node.store.dirty and node.changes.qsize() == changes_before
    assert out["arc"] == [node.me.id, node.me.id] and "events" in out["services"]  # alone: it owns every key


def test_a_big_read_comes_in_pages_within_the_replys_budget_and_misses_no_field():
    """A prefix record of 2,500 announcements is read in pages of READ_PAGE fields (and never past the
    reply's byte budget), each page naming where the next begins; reading the few `pat/` fields beside
    them does not page at all."""
    table, store = table_and_store()
    for i in range(2500):
        apply(table, store, {"k": "dev/>", "f": f"top/p/{i:05d}", "op": "set", "val": b"x" * 100, "ttl": 3.0},
              now=1.0, version=i + 1)
    apply(table, store, {"k": "dev/>", "f": "pat/c", "op": "set", "val": b"p", "ttl": 3.0}, now=1.0, version=9999)
    got, after, pages = {}, "", 0
    while True:
        reply = apply(table, store, {"k": "dev/>", "read": "top/", **({"after": after} if after else {})},
                      now=2.0, version=0)
        assert len(reply["fields"]) <= READ_PAGE and not set(reply["fields"]) & set(got)
        got.update(reply["fields"])
        pages += 1
        if not reply.get("more"):
            break
        after = reply["after"]
    assert pages == 3 and len(got) == 2500
    assert apply(table, store, {"k": "dev/>", "read": "pat/"}, now=2.0, version=0)["fields"] == {"pat/c": b"p"}
    budget = [50_000]  # a reply's items share one budget: this one stops at about 50 kB of fields
    applied = table.apply({"k": "dev/>", "read": "top/"}, 2.0)
    reply = table.answer({"k": "dev/>", "read": "top/"}, applied.reply, budget)
    assert reply["more"] and 300 < len(reply["fields"]) < 500 and budget[0] >= 0
