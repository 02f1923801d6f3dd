"""Exclusive topics (pubsub/exclusive.py): the epoch in the frame and the subscriber's fencing by it."""

from __future__ import annotations

from pubsub.directory import PublisherEntry
from pubsub.envelope import MAX_TOPIC_CHARS, Envelope, Run, decode_frame, encode_run
from pubsub.exclusive import election_name
from pubsub.subscription import TopicState
from tests.unit.test_subscription_state import delivered, env


def test_an_exclusive_topic_never_delivers_an_older_epoch_after_a_newer_one():
    """The epoch travels in the frame (plain and coalesced) and decides over the record's strongest: a
    message of an older epoch than one delivered is dropped and counted; a run with an epoch goes
    message by message. To see it fail, drop the `env.epoch < self.epoch` check in `_deliver`."""
    strong = PublisherEntry("127.0.0.1:1", "127.0.0.1:1", "127.0.0.1:1", strength=5)
    weak = PublisherEntry("127.0.0.1:2", "127.0.0.1:2", "127.0.0.1:2", strength=1)
    stamped = Envelope("t", weak.id, 1, 1_000_000, b"m1", epoch=7)
    assert decode_frame(stamped.encode()).epoch == 7 and decode_frame(env(1).encode()).epoch == 0
    run = decode_frame(encode_run([Envelope("t", strong.id, s, 1, b"x", epoch=3) for s in (1, 2)]))
    assert isinstance(run, Run) and run.epoch == 3 and [e.epoch for e in run.envelopes()] == [3, 3]
    ts = TopicState("t", "me")
    ts.reconcile([])
    ts.reconcile([strong, weak])
    ts.on_message(stamped, 1)  # the weaker leads (epoch 7), whatever the record says of strength
    ts.on_run(run, 1)  # the stronger's messages of an older epoch, late: dropped
    ts.on_message(Envelope("t", weak.id, 2, 1_000_000, b"m2", epoch=7), 1)
    ts.on_message(Envelope("t", strong.id, 3, 1_000_000, b"m3", epoch=9), 1)
    ts.on_message(Envelope("t", weak.id, 3, 1_000_000, b"m3", epoch=7), 1)
    assert delivered(ts) == [(weak.id, 1, False), (weak.id, 2, False), (strong.id, 3, False)]
    assert ts.stats.fenced == 3 and ts.epoch == 9 and ts.summary()["fenced"] == 3


def test_an_exclusive_topics_election_name_stays_within_a_names_length():
    assert election_name("orders") == "chordpub.exclusive/orders"
    long = election_name("t" * MAX_TOPIC_CHARS)
    assert len(long) <= 256 and long != election_name("t" * (MAX_TOPIC_CHARS - 1))
