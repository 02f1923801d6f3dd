"""A durable subscription's positions across a restart (pubsub/positions.py over pubsub/durable.py)."""

from __future__ import annotations

from pubsub.directory import PublisherEntry
from pubsub.durable import DataDir
from pubsub.message import Message
from pubsub.positions import Positions
from pubsub.publication import Publication
from pubsub.subscription import TopicState

P = PublisherEntry("127.0.0.1:1", "127.0.0.1:1", "127.0.0.1:1", history=100)


def test_a_restarted_durable_subscription_resumes_after_its_commit_and_flags_what_was_handed(tmp_path):
    """Ten messages handed to the application, five committed, then the process is gone: the next run
    resumes after 5, delivers 6..10 marked redelivered (the application may have seen them) and 11, 12
    as new. To see it fail, make `Positions.start` forget what was handed (`return committed, 0`):
    6..10 come again unflagged."""
    data = DataDir(tmp_path, "sub")
    first = Positions(data, "billing", "t")
    handed = [Message("t", b"x", P.id, s, 0, 0) for s in range(1, 11)]
    first.hand(handed)
    first.commit(handed[4])
    data.close()

    again = Positions(DataDir(tmp_path, "sub"), "billing", "t")
    assert again.start(P.id) == (5, 10)
    pub = Publication("t", P.id, history_size=100, reliable=True)
    for i in range(12):
        pub.stamp(str(i + 1).encode(), i)
    ts = TopicState("t", "me", reliable=True, start=again.start)
    ts.reconcile([])
    (st,), _ = ts.reconcile([P])
    assert ts.fetches == [(st, 6, None)]
    ts.on_range(st, 6, None, pub.serve("range", lo=6), 1)
    ts.fetch_done(st, 1)
    assert [(m.seq, m.redelivered) for m in ts.deliveries] == [(s, s <= 10) for s in range(6, 13)]
    assert ts.stats.redelivered == 5
