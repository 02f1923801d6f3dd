"""The message on the wire: topic, publisher id, seq, sent_ns, payload. One definition.

A published message is two ZeroMQ frames: the topic (UTF-8, for the SUB socket's prefix filter)
and the envelope, a msgpack array [1, topic, publisher, seq, sent_ns, payload] (an array, not a
map: it is on every message's hot path). The same envelope travels in history and repair replies
and through the relay, so every path delivers exactly the same bytes.

A *probe* is an envelope with seq 0 and an 8-byte token as payload. A publisher sends one on its
PUB socket when a subscriber asks (pubsub/io_loop.py); since it travels on the topic's own frame,
its arrival proves that the subscriber's filter is in place at that publisher (ZeroMQ propagates
subscriptions asynchronously), and everything published after it will arrive too.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgpack

VERSION = 1
MAX_TOPIC_CHARS = 1024


class EnvelopeError(ValueError):
    """Bytes that are not an envelope of this version."""


PROBE_SEQ = 0


@dataclass(frozen=True, slots=True)
class Envelope:
    topic: str
    publisher: str
    seq: int
    sent_ns: int
    payload: bytes

    @classmethod
    def probe(cls, topic: str, publisher: str, token: int, sent_ns: int) -> Envelope:
        return cls(topic, publisher, PROBE_SEQ, sent_ns, token.to_bytes(8, "big"))

    @property
    def is_probe(self) -> bool:
        return self.seq == PROBE_SEQ

    @property
    def token(self) -> int:
        return int.from_bytes(self.payload[:8], "big")

    def encode(self) -> bytes:
        return msgpack.packb([VERSION, self.topic, self.publisher, self.seq, self.sent_ns, self.payload],
                             use_bin_type=True)

    def frames(self) -> list[bytes]:
        return [self.topic.encode("utf-8"), self.encode()]

    @classmethod
    def decode(cls, raw: bytes, probes: bool = False) -> Envelope:
        """The envelope in `raw`; a probe (seq 0) only when `probes` is set. EnvelopeError otherwise."""
        try:
            v, topic, publisher, seq, sent_ns, payload = msgpack.unpackb(raw, raw=False)
        except Exception as exc:  # wrong shape, wrong length, undecodable: all the same to us
            raise EnvelopeError(f"not an envelope: {type(exc).__name__}") from None
        if v != VERSION:
            raise EnvelopeError(f"unsupported envelope version {v!r}")
        if not (isinstance(topic, str) and len(topic) <= MAX_TOPIC_CHARS and isinstance(publisher, str)
                and _uint(seq) and (seq >= 1 or probes) and _uint(sent_ns) and isinstance(payload, bytes)):
            raise EnvelopeError("envelope fields have the wrong types")
        return cls(topic, publisher, seq, sent_ns, payload)


def _uint(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**64
