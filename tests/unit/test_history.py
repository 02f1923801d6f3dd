"""What a publisher keeps of a topic (pubsub/history.py): pure, with the time passed in."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pubsub.envelope import Envelope
from pubsub.history import LATE_HOLD_MESSAGES, History, RetentionBounds


def envelope(seq: int, sent_ns: int) -> Envelope:
    return Envelope("t", "p", seq, sent_ns, b"x", None, 4)


def test_a_late_hold_keeps_every_message_until_its_deadline_and_no_more_than_its_bound():
    """A plain publisher's late hold keeps every message until its deadline, then nothing; and ends
    once it holds more than LATE_HOLD_MESSAGES.

    To see it fail, make `History.trim` end the hold only at its bound (the deadline ignored), or only
    at its deadline (the bound ignored)."""
    history = History(0)  # a plain publisher: it keeps nothing of its own
    history.add(envelope(1, 1))
    assert len(history) == 0
    history.hold_late(until_ns=1000)
    for seq in range(2, 7):
        history.add(envelope(seq, seq))
    assert [e.seq for e in history.range(1)] == [2, 3, 4, 5, 6]
    assert history.trim(999) == 2, "before its deadline it keeps them"
    assert history.trim(1000) == 7 and len(history) == 0, "at its deadline they go"
    history.add(envelope(7, 2000))
    assert len(history) == 0, "and nothing more is kept"

    bounded = History(0)
    bounded.hold_late(until_ns=10**18)
    for seq in range(1, LATE_HOLD_MESSAGES + 2):
        bounded.add(envelope(seq, seq))
    assert len(bounded) == 0 and bounded.late_until_ns == 0, "past its bound the hold ends"


class TrimmedAtEveryAdd(History):
    """The retention rule as `trim` states it, applied after every message: what `History.add`, which
    skips `trim` while nothing could go, must keep exactly."""

    def add(self, env: Envelope) -> None:
        super().add(env)
        self.trim(env.sent_ns)


@settings(max_examples=500, deadline=None)
@given(capacity=st.integers(0, 12), extra=st.integers(0, 12), seconds=st.sampled_from([0.001, 0.01, 1.0]),
       max_bytes=st.sampled_from([1, 50, 200, 10_000]), steps=st.lists(st.tuples(
           st.sampled_from(["add", "add", "add", "ack", "late"]), st.integers(0, 20),
           st.sampled_from([0, 1000, 600_000, 2_000_000, 20_000_000])), max_size=60))
def test_a_message_is_kept_exactly_as_the_retention_rule_says_after_every_add(capacity, extra, seconds, max_bytes,
                                                                               steps):
    """Whatever the size, bounds, durable positions and late holds, each add leaves the history holding
    what the rule (`trim` after every message) holds. To see it fail, leave the size, the bytes or the
    age out of `add`'s look (e.g. `or items[0].sent_ns < env.sent_ns - self._age_ns` dropped): a
    message past that bound stays."""
    bounds = RetentionBounds(messages=capacity + extra + 1, seconds=seconds, bytes=max_bytes)
    fast, rule = History(capacity, bounds), TrimmedAtEveryAdd(capacity, bounds)
    now, seq = 0, 0
    for op, size, gap in steps:
        now += gap
        for history in (fast, rule):
            if op == "add":
                history.add(Envelope("t", "p", seq + 1, now, b"x" * size, None, 4))
            elif op == "ack":
                history.ack(f"s{size % 2}", size)
            else:
                history.hold_late(now + gap)
        seq += op == "add"
        assert [e.seq for e in fast.range(1)] == [e.seq for e in rule.range(1)]
        assert fast.bytes == rule.bytes
