"""A gateway stream's deliveries held for Ack/Nak stay within their bounds (chordpub/gateway.py)."""

from __future__ import annotations

from chordpub import Message
from chordpub.gateway import UNACKED_BYTES, UNACKED_LIMIT, Stream


def message(seq: int, size: int) -> Message:
    return Message("t", b"x" * size, "p", seq, 0, 0)


def test_held_deliveries_are_bounded_by_count_and_bytes_oldest_first():
    stream = Stream(1, None, None, True, "alice")
    for seq in range(1, UNACKED_LIMIT + 11):
        stream.keep(f"1/p/{seq}/1", message(seq, 10))
    assert len(stream.unacked) == UNACKED_LIMIT and stream.take("1/p/10/1") is None
    assert stream.take(f"1/p/{UNACKED_LIMIT + 10}/1").seq == UNACKED_LIMIT + 10
    big = UNACKED_BYTES // 4 + 1
    for seq in range(1, 6):
        stream.keep(f"1/p/b{seq}/1", message(seq, big))
    assert stream.bytes <= UNACKED_BYTES and stream.take("1/p/b1/1") is None and stream.take("1/p/b5/1") is not None
    assert stream.bytes == sum(len(m.payload) for m in stream.unacked.values())
