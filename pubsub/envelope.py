"""The message on the wire: topic, publisher id, seq, sent_ns, payload. One definition.

A published message is ONE ZeroMQ frame, the envelope: a msgpack array [1, topic, publisher, seq,
sent_ns, payload] (an array, not a map: it is on every message's hot path). Its first bytes are the
array's header, the version and the topic, so a SUB socket selects a topic with the prefix filter
`topic_filter(topic)`, which matches that topic exactly (msgpack writes a string's length before
it: "t-1" never matches "t-10"). One frame is one `recv` (a multipart message costs pyzmq two
more option lookups per message), and a malformed frame is rejected on its own, never shifting
the frames after it. The same envelope travels in history and repair replies and through the
relay, so every path delivers exactly the same bytes.

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
_HEADER = b"\x96\x01"  # msgpack: an array of 6, then the version


@dataclass(slots=True)  # not frozen: a frozen dataclass costs a microsecond more per message
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

    def encode(self, packer: msgpack.Packer | None = None) -> bytes:
        """The wire bytes (`packer`: a reusable msgpack.Packer of the caller's, for the hot path)."""
        fields = [VERSION, self.topic, self.publisher, self.seq, self.sent_ns, self.payload]
        return packer.pack(fields) if packer is not None else msgpack.packb(fields, use_bin_type=True)


    @classmethod
    def decode(cls, raw: bytes, probes: bool = False) -> Envelope:
        """The envelope in `raw`; a probe (seq 0) only when `probes` is set. EnvelopeError otherwise."""
        try:
            v, topic, publisher, seq, sent_ns, payload = msgpack.unpackb(raw, raw=False)
        except Exception as exc:  # wrong shape, wrong length, undecodable: all the same to us
            raise EnvelopeError(f"not an envelope: {type(exc).__name__}") from None
        if v != VERSION or type(v) is not int:
            raise EnvelopeError(f"unsupported envelope version {v!r}")
        # `type(x) is int` excludes bool; msgpack's integers are below 2**64 already
        if not (type(topic) is str and len(topic) <= MAX_TOPIC_CHARS and type(publisher) is str
                and type(seq) is int and (seq >= 1 or (probes and seq == 0)) and type(sent_ns) is int
                and sent_ns >= 0 and type(payload) is bytes):
            raise EnvelopeError("envelope fields have the wrong types")
        return cls(topic, publisher, seq, sent_ns, payload)


def topic_filter(topic: str) -> bytes:
    """The SUB prefix that selects `topic`'s messages, and nothing else."""
    return _HEADER + msgpack.packb(topic)
