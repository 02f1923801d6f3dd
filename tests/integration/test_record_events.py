"""A watcher of a topic's record applies a change only when it was made from the state the watcher
holds; a watcher that missed a change reads the record whole (pubsub/registrar.py)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dht.records import Change, change_message, event_frame
from pubsub.directory import PUB, PublisherEntry
from pubsub.registration import Registration


def entry(port: int) -> PublisherEntry:
    return PublisherEntry(f"127.0.0.1:{port}", f"127.0.0.1:{port}", f"127.0.0.1:{port}")


def frame(*changes: Change) -> bytes:
    return event_frame("t", PUB, change_message(list(changes)))


def test_a_change_from_the_state_we_hold_is_applied_and_a_gap_asks_for_a_read(parts):
    reg = Registration("t", "sub/direct/me", b"", watch=True, placed=True, epoch=10)
    parts.registrar.watching["t"] = reg
    a, b = entry(1), entry(2)
    assert parts.registrar.apply_event(frame(Change("t", PUB + a.id, a.to_bytes(), 11, 10)))
    assert set(reg.publishers) == {a.id} and reg.epoch == 11 and not reg.need_read
    # the change that added b at epoch 12 never reached us; the next one (13, made from 12) does
    c = entry(3)
    assert not parts.registrar.apply_event(frame(Change("t", PUB + c.id, c.to_bytes(), 13, 12)))
    assert reg.need_read and set(reg.publishers) == {a.id} and reg.epoch == 11  # not half-applied
    reg.need_read = False
    assert not parts.registrar.apply_event(frame(Change("t", PUB + a.id, None, 11, 10)))  # older: ignored
    assert not reg.need_read and set(reg.publishers) == {a.id}
    assert parts.registrar.apply_event(frame(Change("t", PUB + b.id, b.to_bytes(), 12, 11),
                                             Change("t", PUB + a.id, None, 14, 12)))
    assert set(reg.publishers) == {b.id} and reg.epoch == 14


def test_a_frame_gathering_changes_around_our_read_is_applied_whole(parts):
    """A read can land amid the changes one frame gathers (prev < our epoch < its epoch): each field's
    last word in the frame, laid over what we read, is the state at its epoch, so it is applied, not
    read again. To see it fail, ask for a read whenever `prev` is not our epoch: the last assertion."""
    reg = Registration("t", "sub/direct/me", b"", watch=True, placed=True, epoch=12)
    parts.registrar.watching["t"] = reg
    a, b, c = entry(1), entry(2), entry(3)
    reg.publishers = {a.id: a, b.id: b}  # read at 12: a (set at 11) and b (set at 12)
    assert parts.registrar.apply_event(frame(Change("t", PUB + b.id, b.to_bytes(), 12, 11),
                                             Change("t", PUB + a.id, None, 13, 12),
                                             Change("t", PUB + c.id, c.to_bytes(), 14, 13)))
    assert set(reg.publishers) == {b.id, c.id} and reg.epoch == 14 and not reg.need_read


def test_a_renewal_ahead_of_our_view_reads_only_when_the_events_do_not_catch_up():
    """A renewal that finds the owner's epoch ahead of ours leaves the change frames on their way a
    moment before it reads (a burst of announcements kept every renewal a little ahead of them, and
    each read was a prefix record of thousands of fields): the read is called off if they bring us to
    that epoch meanwhile, and goes ahead if not. An owner whose epoch went back, or a record never
    read, is read at once. To see it fail, never call a read off (`Registrar.caught_up` always
    false): the read that the frames made needless stays due."""
    from pubsub.registrar import Registrar

    reg = Registration("t", "pat/me", b"", watch=True, placed=True, epoch=10)
    Registrar.read_unless_caught_up(reg, 15, now=100.0, grace=0.2)
    assert reg.need_read and reg.retry_at == 100.2  # not before the frames had their moment
    reg.epoch = 15  # they came
    assert Registrar.caught_up(reg) and not reg.need_read
    Registrar.read_unless_caught_up(reg, 18, now=101.0, grace=0.2)
    reg.epoch = 17  # some came, not all
    assert not Registrar.caught_up(reg) and reg.need_read
    back = Registration("t", "pat/me", b"", watch=True, placed=True, epoch=19)
    Registrar.read_unless_caught_up(back, 3, now=102.0, grace=0.2)  # the owner's clock went back
    assert back.need_read and back.retry_at == 0.0 and not Registrar.caught_up(back)
    never = Registration("t", "pat/me", b"", watch=True, placed=True)
    Registrar.read_unless_caught_up(never, 19, now=102.0, grace=0.2)
    assert never.need_read and never.retry_at == 0.0 and not Registrar.caught_up(never)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])  # a new
# Registration each example
@given(st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=1, max_size=30),
       st.data())
def test_whatever_frames_a_watcher_applies_leave_it_holding_the_record_as_it_stood(parts, changes, data):
    """Changes to a record's publishers cut into frames at random, a watcher that read the record at
    a random epoch, frames lost at random: after every frame it applies, the watcher holds exactly the
    publishers of the record at its epoch; a frame it cannot apply asks for a read and changes nothing.
    To see it fail, apply every frame newer than the watcher's epoch (no look at its `prev`): a frame
    after a lost one leaves the watcher short of the lost one's changes."""
    entries = [entry(100 + i) for i in range(6)]
    truth: list[dict] = [{}]  # the record's publishers after each epoch
    made = []
    for epoch, (i, present) in enumerate(changes, 1):
        now = dict(truth[-1])
        e = entries[i]
        if present:
            now[e.id] = e
        else:
            now.pop(e.id, None)
        truth.append(now)
        made.append(Change("t", PUB + e.id, e.to_bytes() if present else None, epoch, epoch - 1))
    cuts = sorted(data.draw(st.sets(st.integers(1, len(made) - 1), max_size=len(made))) if len(made) > 1 else [])
    frames = [made[a:b] for a, b in zip([0, *cuts], [*cuts, len(made)], strict=True)]
    read_at = data.draw(st.integers(0, len(made)))
    reg = Registration("t", "sub/direct/me", b"", watch=True, placed=True, epoch=read_at,
                       publishers=dict(truth[read_at]))
    parts.registrar.watching["t"] = reg
    for group in frames:
        if data.draw(st.integers(0, 4)) == 0:
            continue  # lost
        before = (reg.epoch, dict(reg.publishers))
        if parts.registrar.apply_event(frame(*group)):
            assert reg.publishers == truth[reg.epoch], (reg.epoch, group)
        else:
            assert (reg.epoch, reg.publishers) == before
            reg.need_read = False
