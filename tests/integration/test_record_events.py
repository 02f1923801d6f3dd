"""A watcher of a topic's record applies a change only when it was made from the state the watcher
holds; a watcher that missed a change reads the record whole (pubsub/registrar.py)."""

from __future__ import annotations

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
