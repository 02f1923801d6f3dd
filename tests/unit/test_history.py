"""What a publisher keeps of a topic (pubsub/history.py): pure, with the time passed in."""

from __future__ import annotations

from pubsub.envelope import Envelope
from pubsub.history import LATE_HOLD_MESSAGES, History


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
