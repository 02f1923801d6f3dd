"""A topic archive's feed (pubsub/archive.py) and the owner's replication counts it relies on
(dht/store.py, dht/node.py), without sockets."""

from __future__ import annotations

import threading

from dht.maintenance import Maintainer
from pubsub.archive import ARCHIVE_ACK, ArchiveFeed, archived_publishers, parse_name, segment_name, unpack
from pubsub.publication import Publication


def feed_of(n: int) -> tuple[Publication, ArchiveFeed]:
    pub = Publication("t", "p", history_size=0, archive=True)
    feed = ArchiveFeed(pub, threading.Lock())
    for i in range(n):
        pub.stamp(f"m{i + 1}".encode(), i)
    return pub, feed


def sent_seqs(items: list[dict]) -> list[tuple[int, int]]:
    return [parse_name(i["f"])[1:] for i in items if i.get("op") == "set"]  # type: ignore[index]


def test_segment_names_sort_by_seq_and_say_what_they_hold():
    names = [segment_name("p", 1001, 2000), segment_name("p", 1, 1000), "log/p/x-y", "pub/p"]
    got = archived_publishers(names)
    assert list(got) == ["p"] and got["p"].segments[0][:2] == (1, 1000) and got["p"].last == 2000
    assert got["p"].covering(999, 1001) == [segment_name("p", 1, 1000), segment_name("p", 1001, 2000)]


def test_a_message_is_archived_only_once_the_owners_successors_hold_it():
    pub, feed = feed_of(10)
    feed.sending_to("owner-a")
    items = feed.items()
    assert sent_seqs(items) == [(1, 10)]
    assert [e.payload for e in unpack(items[0]["val"], "t", "p")][:2] == [b"m1", b"m2"]
    feed.confirmed(written=7, replicated=6)  # the owner took it; its successors do not hold it yet
    assert (feed.sent, feed.archived) == (10, 0) and feed.unsafe and not feed.behind
    assert pub.history.acked[ARCHIVE_ACK] == 0, "the history keeps it until it is replicated"
    assert feed.items() == []  # nothing new to send
    feed.replicated(7)
    assert feed.archived == 10 and not feed.unsafe and pub.history.acked[ARCHIVE_ACK] == 10


def test_an_owner_that_died_before_replicating_gets_its_run_sent_again_to_the_next():
    pub, feed = feed_of(10)
    feed.sending_to("owner-a")
    feed.items()
    feed.confirmed(written=3, replicated=3)
    assert feed.archived == 10
    for i in range(10, 15):
        pub.stamp(b"x", i)
    feed.items()
    feed.confirmed(written=4, replicated=3)  # 11..15 taken by owner-a, which then dies
    feed.sending_to("owner-b")
    assert sent_seqs(feed.items()) == [(11, 15)]
    assert [s[1:3] for s in feed.segments] == [(1, 10)], "the unreplicated segment is not counted twice"
    feed.confirmed(written=1, replicated=1)
    assert feed.archived == 15 and [s[1:3] for s in feed.segments] == [(1, 10), (11, 15)]



def test_an_owner_counts_its_writes_and_says_how_many_are_replicated(node):
    def records(items: list[dict]) -> dict:
        with node.lock:
            return node._on_records({"op": "records", "id": 1, "items": items, "replicated": True})

    out = records([{"k": "t", "f": "log/p/1", "op": "set", "val": b"x", "ttl": 30.0}])
    assert out["written"] >= 1 and out["replicated"] < out["written"]
    renewed = records([{"k": "t", "f": "log/p/1", "op": "renew"}])
    assert renewed["written"] == out["written"], "a renewal writes nothing"
    maintainer = Maintainer(node)
    try:
        maintainer.replicate(full=False)  # alone: no successor to wait for
    finally:
        maintainer.rpc.close()
    assert records([{"k": "t"}])["replicated"] == out["written"]
