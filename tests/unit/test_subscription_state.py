"""A subscription's per-topic logic and figures without sockets (pubsub/subscription.py, stats.py)."""

from __future__ import annotations

import random

import pytest

from pubsub.directory import PublisherEntry
from pubsub.envelope import Envelope
from pubsub.publication import Publication
from pubsub.registration import OwnerArcs
from pubsub.stats import SeqWindow
from pubsub.subscription import TopicState

A = PublisherEntry("127.0.0.1:1", "127.0.0.1:1", "127.0.0.1:1", history=100)
B = PublisherEntry("127.0.0.1:2", "127.0.0.1:2", "127.0.0.1:2", history=100)


def env(seq: int, pub: PublisherEntry = A, topic: str = "t") -> Envelope:
    return Envelope(topic, pub.id, seq, 1_000_000, f"m{seq}".encode())


def delivered(ts: TopicState) -> list[tuple[str, int, bool]]:
    out = [(m.publisher, m.seq, m.recovered) for m in ts.deliveries]
    ts.deliveries.clear()
    return out


def range_reply(pub: Publication, lo: int, hi: int | None) -> dict:
    return pub.serve("range", lo=lo, hi=hi)


def test_best_effort_counts_duplicates_and_gaps_and_delivers_each_once():
    ts = TopicState("t", "me")
    ts.reconcile([])  # subscribed before the publisher came: owed everything from seq 1
    ts.reconcile([A])
    for seq in (1, 2, 2, 5, 4, 4):
        ts.on_message(env(seq), 2_000_000)
    assert delivered(ts) == [(A.id, s, False) for s in (1, 2, 5, 4)]
    assert ts.stats.duplicates == 2 and ts.lost == 1  # 3 never came
    assert ts.stats.latency.quantile(0.5) == pytest.approx(1.0, rel=0.02)


def test_history_on_join_comes_first_and_live_messages_wait_for_it():
    pub = Publication("t", A.id, history_size=50)
    for i in range(10):
        pub.stamp(b"x", i)
    ts = TopicState("t", "me", history=3)
    new, _ = ts.reconcile([A])
    assert ts.heads == new and new[0].catching_up
    ts.heads.clear()
    ts.on_message(env(11), 5)  # live, while the history is being fetched: held
    assert not ts.deliveries
    ts.on_head(new[0], pub.serve("last", count=0), 6)
    st, lo, hi = ts.fetches.pop()
    assert (lo, hi) == (8, 10)
    assert ts.on_range(st, lo, hi, range_reply(pub, lo, hi), 7) is None
    ts.fetch_done(st, 7)
    assert delivered(ts) == [(A.id, 8, True), (A.id, 9, True), (A.id, 10, True), (A.id, 11, False)]


def test_history_that_failed_at_a_dead_publisher_is_asked_of_its_archive():
    """The record can still name a publisher that has died (its lease not yet expired at a new
    owner): its history request fails; once the record serves it from the archive, ask again."""
    pub = Publication("t", A.id, history_size=50)
    for i in range(5):
        pub.stamp(b"x", i)
    ts = TopicState("t", "me", history=5)
    new, _ = ts.reconcile([A])
    ts.heads.clear()
    ts.fetch_done(new[0], 1)  # the head request timed out
    ts.reconcile([A])
    assert not ts.heads, "the same source is not asked again on every read of the record"
    archived = PublisherEntry(A.id, "", "", None, 5, archive=True)
    ts.reconcile([archived])
    assert ts.heads == new
    ts.heads.clear()
    ts.on_head(new[0], pub.serve("last", count=0), 2)
    st, lo, hi = ts.fetches.pop()
    assert ts.on_range(st, lo, hi, range_reply(pub, lo, hi), 3) is None
    ts.fetch_done(st, 3)
    assert delivered(ts) == [(A.id, s, True) for s in range(1, 6)]
    ts.reconcile([A])  # served again by a live source: the history is had, nothing asked
    assert not ts.heads


def test_reliable_orders_repairs_and_dead_letters_what_fell_out():
    pub = Publication("t", A.id, history_size=5, reliable=True)
    for i in range(12):
        pub.stamp(b"x", i)
    ts = TopicState("t", "me", reliable=True)
    (st,), _ = ts.reconcile([A])
    assert ts.fetches == [(st, 1, None)]  # a reliable start catches up from seq 1
    ts.fetches.clear()
    ts.on_message(env(13), 1)  # live during the catch-up: buffered
    assert ts.on_range(st, 1, None, range_reply(pub, 1, None), 2) is None
    ts.fetch_done(st, 2)
    got = delivered(ts)
    assert [s for _, s, _ in got] == [8, 9, 10, 11, 12, 13]  # 1..7 fell out of a 5-message history
    assert [(d.from_seq, d.to_seq) for d in ts.dead] == [(1, 7)] and ts.lost == 7
    ts.on_message(env(16), 3)  # 14 and 15 lost on the way: held, and a repair asked for
    assert ts.fetches == [(st, 14, 15)] and not ts.deliveries
    ts.on_message(env(16), 3)
    assert ts.stats.duplicates == 0  # reliable mode drops the repeat without a word
    for i in range(12, 16):
        pub.stamp(b"x", i)
    ts.fetches.clear()
    ts.on_range(st, 14, 15, range_reply(pub, 14, 15), 4)
    ts.fetch_done(st, 4)
    assert [(s, r) for _, s, r in delivered(ts)] == [(14, True), (15, True), (16, False)]
    assert ts.tail_check(st) is False and ts.tail_check(st) is True  # stalled for a beat: check the tail


def test_only_the_strongest_is_delivered_on_an_exclusive_topic():
    ts = TopicState("t", "me")
    strong = PublisherEntry("127.0.0.1:1", "127.0.0.1:1", "127.0.0.1:1", strength=5)
    weak = PublisherEntry("127.0.0.1:2", "127.0.0.1:2", "127.0.0.1:2", strength=1)
    ts.reconcile([])
    ts.reconcile([strong, weak])
    ts.on_message(env(1, weak), 1)
    ts.on_message(env(1, strong), 1)
    assert delivered(ts) == [(strong.id, 1, False)]
    ts.reconcile([weak])  # the strong one's lease ran out
    ts.on_message(env(2, weak), 1)
    assert delivered(ts) == [(weak.id, 2, False)]


def test_a_departed_publisher_is_delivered_until_forgotten_and_may_come_back():
    ts = TopicState("t", "me")
    ts.reconcile([])
    ts.reconcile([A])
    ts.on_message(env(1), 1)
    new, gone = ts.reconcile([])  # its unregistration overtook its last messages
    assert not new and [st.id for st in gone] == [A.id]
    ts.on_message(env(2), 1)
    ts.reconcile([A])  # named again: the same stream, nothing delivered twice
    ts.on_message(env(2), 1)
    ts.reconcile([])
    ts.on_message(env(4), 1)
    assert ts.forget(A.id) is not None and ts.lost == 1
    ts.on_message(env(5), 1)  # forgotten: a stranger now
    assert [s for _, s, _ in delivered(ts)] == [1, 2, 4] and ts.strangers


def test_a_publisher_forgotten_and_named_again_delivers_nothing_twice():
    """Its lease ran out at a busy owner for longer than our grace, and it renewed later: the new
    stream goes on after what this subscription delivered, not from the first message (reliable),
    the durable position (which lags what was handed), or its history again (best effort)."""
    pub = Publication("t", A.id, history_size=100)
    for i in range(20):
        pub.stamp(b"x", i)
    for ts in (TopicState("t", "me", reliable=True), TopicState("t", "me", reliable=True, start=lambda _: (3, 8)),
               TopicState("t", "me", history=5)):
        new, _ = ts.reconcile([A])
        if ts.reliable:
            st, lo, hi = ts.fetches.pop()
            ts.on_range(st, lo, hi, range_reply(pub, lo, 10), 1)
            ts.fetch_done(st, 1)
        else:
            ts.on_head(new[0], {"last": 10, "first": 1}, 1)
            st, lo, hi = ts.fetches.pop()
            ts.on_range(st, lo, hi, range_reply(pub, lo, hi), 1)
            ts.fetch_done(st, 1)
        assert [s for _, s, _ in delivered(ts)][-1] == 10
        ts.reconcile([])
        ts.forget(A.id)
        new, _ = ts.reconcile([A])  # back
        if ts.reliable:
            st, lo, hi = ts.fetches.pop()
            assert lo == 11, "from after what was delivered"
            ts.on_range(st, lo, hi, range_reply(pub, lo, None), 2)
        else:
            ts.on_head(new[0], {"last": 20, "first": 1}, 2)
            st, lo, hi = ts.fetches.pop()
            ts.on_range(st, lo, hi, range_reply(pub, 1, hi), 2)  # a reply from further back than asked
        assert [s for _, s, _ in delivered(ts)] == list(range(11 if ts.reliable else 16, 21))


def test_strangers_are_held_and_delivered_once_the_record_names_them():
    ts = TopicState("t", "me")
    ts.reconcile([A])
    ts.on_message(env(1, B), 9)
    assert not ts.deliveries and ts.reread
    ts.reconcile([A, B])
    assert delivered(ts) == [(B.id, 1, False)] and ts.deliveries == [] and not ts.strangers


def test_publishers_the_subscription_cannot_take_are_named():
    ts = TopicState("t", "me", history=500, mode="direct")
    relay_pub = PublisherEntry("127.0.0.1:3", "127.0.0.1:3", "127.0.0.1:3", history=1000, mode="relay")
    new, _ = ts.reconcile([A, relay_pub])
    assert not new
    assert "offers history 100 < requested 500" in ts.unmatched[A.id]
    assert "relay mode" in ts.unmatched[relay_pub.id]
    ts.on_message(env(1), 1)
    assert not ts.deliveries and not ts.strangers  # an unmatched publisher's messages are dropped


def test_history_up_to_takes_what_a_publisher_keeps_of_the_request():
    pub = Publication("t", A.id, history_size=3)
    for i in range(10):
        pub.stamp(b"x", i)
    short = PublisherEntry(A.id, A.endpoint, A.repair, history=3)
    ts = TopicState("t", "me", history=10, history_policy="up_to")
    new, _ = ts.reconcile([short])
    assert new and not ts.unmatched
    ts.on_head(new[0], pub.serve("last", count=0), 6)
    st, lo, hi = ts.fetches.pop()
    assert (lo, hi) == (8, 10)  # the three it keeps of the ten asked
    ts.on_range(st, lo, hi, range_reply(pub, lo, hi), 7)
    ts.fetch_done(st, 7)
    assert delivered(ts) == [(A.id, s, True) for s in (8, 9, 10)]
    with pytest.raises(ValueError, match="history_policy"):
        TopicState("t", "me", history=10, history_policy="some")


def test_seq_window_counts_exactly_and_stays_bounded():
    w = SeqWindow(window=100)
    rng = random.Random(1)
    seqs = list(range(1, 100_001))
    lost = set(rng.sample(seqs, 500))
    order = [s for s in seqs if s not in lost]
    for i in range(0, len(order) - 10, 10):  # reordered within small blocks
        block = order[i:i + 10]
        rng.shuffle(block)
        order[i:i + 10] = block
    for s in order:
        assert w.add(s)
        assert len(w.above) <= 200
    assert not w.add(order[-1])
    assert w.missing() == len(lost)


def test_history_replies_stop_at_their_byte_budget():
    pub = Publication("t", "p", history_size=100)
    for i in range(100):
        pub.stamp(b"y" * 10_000, i)
    reply = pub.serve("range", lo=1)
    assert reply["first"] == 1 and reply["last"] == 100 and 30 < len(reply["messages"]) < 100
    assert len(pub.serve("last", count=5)["messages"]) == 5
    with pytest.raises(ValueError):
        Publication("t", "p", mode="carrier-pigeon")


def test_owner_arcs_answer_for_keys_in_known_arcs_only():
    arcs = OwnerArcs()
    arcs.learn("a", (100, 200))
    arcs.learn("b", (200, 50))  # wraps around zero
    assert arcs.owner(150) == "a" and arcs.owner(200) == "a"
    assert arcs.owner(250) == "b" and arcs.owner(10) == "b"
    assert arcs.owner(75) is None  # (50, 100]: nobody we know
    arcs.learn("c", (None, 7))  # no predecessor known: not cached
    arcs.forget("b")
    assert arcs.owner(10) is None and arcs.owner(150) == "a"


def test_a_late_best_effort_joiner_is_owed_from_the_publishers_next_seq():
    """Joining a publisher that has sent 10: seq 11 on are owed (11 and 13 came: 12 is lost), 1-10 are
    not; live messages wait for the answer, so every delivery says where it is owed from."""
    pub = Publication("t", A.id, history_size=0)
    for i in range(10):
        pub.stamp(b"x", i)
    ts = TopicState("t", "me")
    new, _ = ts.reconcile([A])
    assert new[0].start_on_probe and not ts.starts and new[0].catching_up  # its probe's reply tells
    ts.on_message(env(11), 5)
    assert not ts.deliveries
    ts.on_start(new[0], pub.serve("last", count=0), 6)
    ts.on_message(env(13), 7)
    assert [(m.seq, m.first_owed) for m in ts.deliveries] == [(11, 11), (13, 11)]
    assert ts.lost == 1
    assert ts.summary()["expected"] == 3


def test_a_late_joiners_live_message_that_beat_the_start_reply_is_delivered_not_a_duplicate():
    """The connection was made before the publisher answered "last": seq 9 and 10 were held, then the
    publisher said its newest is 10. They arrived once each: delivered, owed from 9, no duplicate."""
    pub = Publication("t", A.id, history_size=0)
    for i in range(10):
        pub.stamp(b"x", i)
    ts = TopicState("t", "me")
    new, _ = ts.reconcile([A])
    ts.starts.clear()
    ts.on_message(env(9), 5)
    ts.on_message(env(10), 5)
    ts.on_start(new[0], pub.serve("last", count=0), 6)
    ts.on_message(env(11), 7)
    assert [(m.seq, m.first_owed) for m in ts.deliveries] == [(9, 9), (10, 9), (11, 9)]
    summary = ts.summary()
    assert summary["duplicates"] == 0 and summary["expected"] == 3 and ts.lost == 0


def test_a_reliable_joiner_of_a_running_publisher_without_history_is_owed_from_its_next_seq():
    """A publisher that keeps no history has nothing to repair seq 1..10 from: a reliable subscription
    joining it after they were sent is owed from 11 (asked, as best effort asks), not dead-lettered
    1..10; what came live before the answer is delivered in order. A publisher with history is still
    repaired from 1, and one that came after we subscribed is owed from 1.

    To see it fail, fetch every reliable start from 1 (`_repairable` always True): 1..10 come back
    as a dead letter."""
    plain = PublisherEntry("127.0.0.1:3", "127.0.0.1:3", "127.0.0.1:3")
    pub = Publication("t", plain.id, history_size=0)
    for i in range(12):
        pub.stamp(b"x", i)
    ts = TopicState("t", "me", reliable=True)
    (st, kept), _ = ts.reconcile([plain, A])
    assert st.start_on_probe and not ts.starts and ts.fetches == [(kept, 1, None)]
    ts.on_message(env(12, plain), 5)  # live, before the answer (11 was sent before our connection)
    ts.on_start(st, pub.serve("last", count=0), 6)
    assert [(m.seq, m.first_owed) for m in ts.deliveries] == [(12, 12)] and not ts.dead
    assert ts.summary()["expected"] == 1 and ts.lost == 0
    later = PublisherEntry("127.0.0.1:4", "127.0.0.1:4", "127.0.0.1:4")
    (st2,), _ = ts.reconcile([plain, A, later])
    assert ts.fetches[-1] == (st2, 1, None) and not st2.start_on_probe
