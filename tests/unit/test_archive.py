"""A topic archive's feed (pubsub/archive.py) and the owner's replication counts it relies on
(dht/store.py, dht/node.py), without sockets."""

from __future__ import annotations

import threading

from pubsub.archive import ARCHIVE_ACK, ArchiveFeed, archived_publishers, parse_name, segment_name, unpack
from pubsub.publication import Publication


def feed_of(n: int) -> tuple[Publication, ArchiveFeed]:
    pub = Publication("t", "p", history_size=0, archive=True)
    feed = ArchiveFeed(pub, threading.Lock())
    for i in range(n):
        pub.stamp(f"m{i + 1}".encode(), i)
    return pub, feed


def sent_seqs(items: list[dict]) -> list[tuple[int, int]]:
    return [parse_name(i["f"])[1:] for i in items if i.get("op") == "set" and parse_name(i["f"])]  # type: ignore[index]


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



def test_an_owner_counts_its_writes_and_says_how_many_are_replicated(host, node):
    def records(items: list[dict]) -> dict:
        with node.lock:
            return node._on_records({"op": "records", "id": 1, "items": items, "replicated": True})

    out = records([{"k": "t", "f": "log/p/1", "op": "set", "val": b"x", "ttl": 30.0}])
    assert out["written"] >= 1 and out["replicated"] < out["written"]
    renewed = records([{"k": "t", "f": "log/p/1", "op": "renew"}])
    assert renewed["written"] == out["written"], "a renewal writes nothing"
    host.maintainers[0].replicate(full=False)  # alone: no successor to wait for
    assert records([{"k": "t"}])["replicated"] == out["written"]


def test_a_hand_over_sends_what_follows_the_lowest_ack_with_a_marker_of_what_was_owed():
    from pubsub.archive import left_name, parse_left
    from pubsub.history import RetentionBounds

    pub = Publication("t", "p", history_size=0, bounds=RetentionBounds(messages=60))
    pub.history.ack("s/d", 5)  # a durable subscriber that took 5, then left
    for i in range(105):
        pub.stamp(f"m{i + 1}".encode(), i)
    assert pub.history.first_seq == 46  # retain-messages let 6..45 go
    feed = ArchiveFeed(pub, threading.Lock(), after=5)
    feed.sending_to("owner")
    items = feed.items()
    assert sent_seqs(items) == [(46, 105)]
    assert [i["f"] for i in items if i["val"] == b""] == [left_name("p", 6, 105)]
    assert parse_left(left_name("p", 6, 105)) == ("p", 6, 105) and parse_name(left_name("p", 6, 105)) is None
    feed.confirmed(written=2, replicated=2)
    assert not feed.unsafe and feed.items() == []
    feed.sending_to("another owner")  # the marker goes again with what is not yet safe
    assert [i["f"] for i in feed.items()] == [left_name("p", 6, 105)]


def test_what_the_archive_names_say_of_a_hand_over():
    from pubsub.archive import left_name

    got = archived_publishers([segment_name("p", 46, 80), left_name("p", 6, 105)])["p"]
    assert (got.first, got.last, got.left) == (46, 105, (6, 105))
    assert got.held_from(6) == 46 and got.held_from(50) == 50 and got.held_from(81) == 106
    alone = archived_publishers([left_name("q", 3, 9)])["q"]
    assert (alone.segments, alone.first, alone.last, alone.held_from(3)) == ([], 10, 9, 10)


def test_a_hand_over_is_a_stream_only_for_a_subscription_that_has_a_position_with_its_publisher():
    from pubsub.archive import left_name
    from pubsub.registration import Registration

    reg = Registration("t", "sub/direct/s", b"", watch=True)
    reg.archived = archived_publishers([segment_name("p", 46, 105), left_name("p", 6, 105),
                                        segment_name("kept", 1, 10)])
    assert [e.id for e in reg.all_publishers()] == ["kept"]  # an archive=True topic is for everyone
    assert [e.id for e in reg.all_publishers(owed=lambda pid: pid == "other")] == ["kept"]
    both = reg.all_publishers(owed=lambda pid: pid == "p")
    assert sorted(e.id for e in both) == ["kept", "p"] and all(e.endpoint == "" for e in both)


def test_a_hand_over_starts_after_the_lowest_position_of_its_durable_subscribers():
    """Two durable subscribers, one far behind the other: the archive holds what the slower one lacks.
    To see it fail, make `Archives.hand_over` start after `max(lacking)`: the marker says 41..60."""
    from pubsub.archive import left_name
    from pubsub.archiving import Archives
    from pubsub.directory import PUB
    from pubsub.history import RetentionBounds

    pub = Publication("t", "p", history_size=0, bounds=RetentionBounds(messages=30))
    for i in range(60):
        pub.stamp(f"m{i + 1}".encode(), i)
        if i + 1 == 40:
            pub.history.ack("s/slow", 5)  # took 5, then left
            pub.history.ack("s/fast", 40)  # took 40, then left
    archives = Archives(None, {("t", PUB + "p"): None}, {})  # type: ignore[arg-type]
    assert archives.hand_over([pub], threading.Lock()) == ["t"]
    feed = archives.feeds[("t", PUB + "p")]
    feed.sending_to("owner")
    items = feed.items()
    assert pub.history.first_seq > 6  # retention let some of what the slower one lacks go
    assert [i["f"] for i in items if i["val"] == b""] == [left_name("p", 6, 60)]  # what the slower one was owed
