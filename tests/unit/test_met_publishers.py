"""A publisher a topic's record does not name yet, met by its first frame (pubsub/subscription.py
`meet` and `confirm`, which the io loop's `_meet_publisher` and `set_publishers` use): pure, no sockets."""

from __future__ import annotations

from pubsub.directory import PublisherEntry
from pubsub.subscription import TopicState
from tests.unit.test_subscription_state import delivered, env


def test_a_publisher_met_by_its_first_frame_is_taken_from_seq_1_and_confirmed_by_its_record():
    """A best-effort subscription without history, past its first read of the record, takes a publisher
    the record does not name yet from its first frame (`meet`); the record's event then confirms it
    where it is, and a publisher that moved is left to `reconcile` (which reconnects it). A reliable
    subscription, or one whose first read is not in, waits for the record.

    To see it fail, make `confirm` ignore the endpoint (the moved publisher is taken as confirmed), or
    `meet` ignore the first read (`not self._joined` gone)."""
    ts = TopicState("t", "me")
    ts.reconcile([])
    met = PublisherEntry("127.0.0.1:5", "127.0.0.1:5", "127.0.0.1:6", patterns=True)
    st = ts.meet(met)
    assert st is not None and st.provisional
    ts.on_message(env(1, met), 0)
    ts.on_message(env(2, met), 0)
    assert delivered(ts) == [(met.id, 1, False), (met.id, 2, False)]
    named = PublisherEntry(met.id, met.endpoint, met.repair, patterns=True, retain={"messages": 10})
    assert ts.confirm([named]) and not st.provisional and st.entry is named
    moved = PublisherEntry(met.id, "127.0.0.1:7", met.repair, patterns=True)
    assert not ts.confirm([moved]), "a publisher that moved is reconnected, not confirmed"
    ts.reconcile([moved])
    assert [(s.id, old) for s, old in ts.moved] == [(met.id, met.endpoint)]
    reliable = TopicState("t", "me", reliable=True)
    reliable.reconcile([])
    assert reliable.meet(met) is None
    assert TopicState("t", "me").meet(met) is None, "its first read of the record is not in"
