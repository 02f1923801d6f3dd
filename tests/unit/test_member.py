"""A member's settlements (pubsub/member.py), without sockets: one per delivery, the outbox per
publisher, dead letters on the last delivery."""

from __future__ import annotations

from pubsub.dispatch import GroupTerms
from pubsub.envelope import Dispatched, Envelope
from pubsub.member import GroupMembership


def delivery(state: GroupMembership, seq: int, deliveries: int, max_deliver: int = 2):  # noqa: ANN201
    env = Envelope("t", "p", seq, 1, f"m{seq}".encode())
    return state.on_dispatch(Dispatched(env, "g", "me", deliveries, max_deliver), 2)


def test_a_late_settlement_of_an_earlier_delivery_does_not_settle_the_redelivery():
    letters = []
    state = GroupMembership("t", "g", "me", 10, GroupTerms(), auto_ack=True, on_dead_letter=letters.append)
    first = delivery(state, 4, 1)
    first.nak()  # the publisher sends it again at once...
    second = delivery(state, 4, 2)
    first.ack()  # ...before the first delivery's callback has returned (its ack must not count)
    assert state.held == 1 and state.take() == {"p": state_outbox(naked=[4])}
    second.nak()  # the last delivery fails: dead here, with its payload
    assert state.take() == {"p": state_outbox(dead=[4])} and state.held == 0
    (letter,) = letters
    assert (letter.payload, letter.from_seq, letter.subscriber) == (b"m4", 4, "me/g")


def test_frames_for_another_group_or_member_are_not_taken_and_settling_twice_counts_once():
    state = GroupMembership("t", "g", "me", 10, GroupTerms(), auto_ack=True)
    env = Envelope("t", "p", 1, 1, b"x")
    assert state.on_dispatch(Dispatched(env, "other", "me", 1, 5), 2) is None
    assert state.on_dispatch(Dispatched(env, "g", "someone", 1, 5), 2) is None
    msg = delivery(state, 1, 1, 5)
    msg.ack()
    msg.ack()
    msg.nak()
    assert state.take() == {"p": state_outbox(acked=[1])} and state.acked == 1 and state.naked == 0


def state_outbox(acked=(), naked=(), dead=()):  # noqa: ANN001, ANN201
    from pubsub.member import Outbox

    return Outbox(list(acked), list(naked), list(dead))
