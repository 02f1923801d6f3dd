"""A reliable stream's tail: when what is missing is fetched, and when what its publisher no longer holds
is given up (pubsub/subscription.py, without sockets)."""

from __future__ import annotations

from pubsub import subscription
from pubsub.directory import PublisherEntry
from pubsub.subscription import TopicState
from tests.unit.test_subscription_state import A, delivered, env


def test_a_stalled_tail_of_a_publisher_without_history_waits_longer_before_it_is_given_up():
    """Its newest seq counts messages stamped but not yet sent, and a fetch could only dead-letter
    them: a stalled stream of such a publisher is given up after TAIL_BEATS_UNREPAIRABLE beats ahead,
    one with history fetched after TAIL_BEATS; a message that comes between starts the count again.

    To see it fail, give both the same patience (`TAIL_BEATS_UNREPAIRABLE = TAIL_BEATS`): the tail
    that is late under load is fetched, found nowhere and dead-lettered."""
    plain = PublisherEntry("127.0.0.1:3", "127.0.0.1:3", "127.0.0.1:3")
    ts = TopicState("t", "me", reliable=True)
    ts.reconcile([])  # subscribed first: both are owed from seq 1
    st, kept = ts.reconcile([plain, A])[0]
    ts.fetches.clear()
    for s in (st, kept):
        ts.on_range(s, 1, None, {"first": 1, "last": 0, "messages": []}, 1)
        ts.fetch_done(s, 1)
    ts.on_message(env(1, plain), 2)
    ts.on_message(env(1, A), 2)

    def stalled_beats(stream: PublisherEntry, last: int, most: int = 50) -> int:
        """Beats with nothing come, the publisher at `last`, until the tail is fetched (or `most`)."""
        s = ts.streams[stream.id]
        ts.tail_check(s)  # a beat that saw the stream move
        for beat in range(1, most + 1):
            assert ts.tail_check(s)
            ts.on_tail(s, {"last": last})
            if any(f[0] is s for f in ts.fetches):
                return beat
        return most

    assert stalled_beats(A, 3) == subscription.TAIL_BEATS
    patience = subscription.TAIL_BEATS_UNREPAIRABLE
    assert patience > subscription.TAIL_BEATS
    assert stalled_beats(plain, 3, most=patience - 1) == patience - 1 and not ts.fetches[1:]
    ts.on_message(env(2, plain), 3)  # it was on its way: delivered, and the count starts again
    assert stalled_beats(plain, 3) == patience


def test_a_reliable_catch_up_does_not_give_up_what_is_still_on_its_way_live():
    """A publisher without history answers a reliable start "nothing held below 11": 4..10 were sent
    live before that reply, on the other connection, and are still on their way; they are delivered
    when they come, not dead-lettered. Only a stream that stalls for two beats gives up what the
    publisher no longer holds. To see it fail: take `_give_up`'s limit at the live stream away, and
    4..10 are dead-lettered, then dropped as duplicates when they arrive; fetch at the first beat that
    finds the publisher ahead, and 11..12 are fetched before they could have come; give up the whole
    gap a stalled fetch finds, and 13..14, sent since the stall began, are dead-lettered."""
    ts = TopicState("t", "me", reliable=True)
    (st,), _ = ts.reconcile([A])
    ts.fetches.clear()
    for seq in (1, 2, 3):
        ts.on_message(env(seq), 1)
    assert ts.on_range(st, 1, None, {"first": 11, "last": 10, "messages": []}, 2) is None
    ts.fetch_done(st, 2)
    for seq in range(4, 11):
        ts.on_message(env(seq), 3)
    assert [s for _, s, _ in delivered(ts)] == list(range(1, 11)) and not ts.dead and ts.lost == 0
    ts.on_tail(st, {"last": 12})  # a beat with nothing: 11 and 12 may still be on their way (the
    assert not ts.fetches  # answer came on the other connection, and can overtake them)
    ts.on_tail(st, {"last": 14})  # a second beat with nothing: 11 and 12 went where no one holds them
    (fetch,) = ts.fetches
    assert fetch == (st, 11, None)
    ts.on_range(st, 11, None, {"first": 15, "last": 14, "messages": []}, 4)
    assert [(d.from_seq, d.to_seq) for d in ts.dead] == [(11, 12)] and ts.lost == 2  # 13, 14: just sent
    for seq in (13, 14):
        ts.on_message(env(seq), 5)
    assert [s for _, s, _ in delivered(ts)] == [13, 14] and ts.lost == 2


def probe(ts: TopicState, st: subscription.Stream) -> None:
    """The publisher answers our probes (the lowest token when it stood at seq 2), and the probe comes."""
    st.promised(7, 2)
    st.promised(9, 4)  # a later reply (a retry) counts for nothing: its probe may not have come
    assert st.see_probe(7)
    ts.probe_passed(st, 2)


def test_what_a_publisher_sent_before_our_probe_and_no_longer_holds_is_given_up_when_the_probe_comes():
    """A reliable pattern meets a topic late (its announcement came after the pattern's first read): owed
    from seq 1 by a publisher that keeps nothing before seq 3. Its probe follows every message up to the
    newest seq its reply named (2): once it has come, 1..2 were sent before our filter was in place and
    are dead letters at once, whichever of the fetch's reply and the probe comes first; 3..4, sent after
    that reply, may still be on their way and wait. (They waited TAIL_BEATS_UNREPAIRABLE beats of tail
    checks, and in a loaded CI run a topic's only message was neither delivered nor dead-lettered in a
    minute.)

    To see it fail, leave the probe out of what the stream has passed (`Stream.passed_to` without
    `probe_last`): nothing is given up until ten beats of tail checks."""
    plain = PublisherEntry("127.0.0.1:3", "127.0.0.1:3", "127.0.0.1:3")
    for probe_first in (False, True):
        ts = TopicState("t", "me", reliable=True)
        ts.reconcile([])
        (st,), _ = ts.reconcile([plain])  # met after the first reconcile: owed from seq 1
        assert ts.fetches == [(st, 1, None)]
        ts.fetches.clear()

        if probe_first:
            probe(ts, st)
        ts.on_range(st, 1, None, {"first": 5, "last": 4, "messages": []}, 3)
        ts.fetch_done(st, 3)
        if not probe_first:
            assert not ts.dead  # (the probe not come yet: 1..4 may be on their way)
            probe(ts, st)
        assert [(d.from_seq, d.to_seq, d.reason) for d in ts.dead] == [(1, 2, subscription.UNRETAINED)]
        for seq in (3, 4):
            ts.on_message(env(seq, plain), 4)
        assert [s for _, s, _ in delivered(ts)] == [3, 4] and ts.lost == 2
