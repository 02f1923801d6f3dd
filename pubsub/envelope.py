"""The message on the wire: topic, publisher id, seq, sent_ns, payload. One definition.

A published message is ONE ZeroMQ frame, the envelope: a msgpack array [1, topic, publisher, seq,
sent_ns, payload] (an array, not a map: it is on every message's hot path). Its first bytes are the
array's header, the version and the topic, so a SUB socket selects a topic with the prefix filter
`topic_filter(topic)`, which matches that topic exactly (msgpack writes a string's length before
it: "t-1" never matches "t-10"). One frame is one `recv` (a multipart message costs pyzmq two
more option lookups per message), and a malformed frame is rejected on its own, never shifting
the frames after it. The same envelope travels in history and repair replies and through the
relay, so every path delivers exactly the same bytes.

A message for one member of a consumer group (pubsub/dispatch.py) is a *dispatch* frame: a msgpack
array [2, address, publisher, seq, sent_ns, payload, deliveries, max_deliver, key, priority] whose
address is "topic NUL group NUL member". The member's SUB socket selects exactly its own with the
prefix `dispatch_filter(topic, group, member)`, and a plain subscriber's filter (another array
header) never matches one, so a publisher's one PUB socket carries both: every message to every
plain subscriber, and each group's copy to one member. A message's `key` and `priority` travel only
in dispatch frames; the plain frame stays as it is.

A publisher sending faster than one message per COALESCE_GAP_NS coalesces a run of consecutive
messages of one topic into one frame, [1, topic, publisher, first seq, [sent_ns...], [payload...]]
(`encode_run`; pubsub/coalescing.py decides when): the same header and topic, so the same prefix selects
it, and one frame and one decode carry up to 64 messages, which is where a subscriber's time per
message went. History and repair replies keep one envelope per message.

A message for the subscribers of a *pattern* (`sensors/*/temp`) is a *pattern frame*: a msgpack array
[3, pattern, frame] that wraps the plain frame (envelope or run) of a topic the pattern matches. A
pattern subscriber's SUB socket selects the frames of each of its patterns with the prefix
`pattern_filter(pattern)`, at every publisher it is connected to; the publisher matches its topics
against the patterns whose filters it holds (pubsub/filters.py) and sends each matching pattern its
copy, so a message on a topic the subscriber has not heard of yet reaches it with no round trip. A
*bundle*, [3, pattern, [frame, ...]], carries several topics' frames for one pattern in one frame
(`wrap_bundle`, `inner_frames`): the same prefix selects it.

A message of an *exclusive* topic (a publisher with a strength, pubsub/exclusive.py) names its publisher
as [publisher, epoch] instead of the bare id: the epoch of the election its publisher held when it sent
it, so that a subscriber drops a message of an older epoch than one it has delivered (fencing). The
array keeps its six fields, so the topic's prefix selects it as any other.

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
DISPATCH_KIND = 2
_DISPATCH_HEADER = b"\x9a\x02"  # an array of 10, then the kind
DISPATCH_PREFIX = _DISPATCH_HEADER
DEFAULT_PRIORITY = 4
MAX_KEY_CHARS = 256
PATTERN_PREFIX = b"\x93\x03"  # an array of 3, then the kind: [3, pattern, plain frame]
MAX_RUN = 1024  # messages a coalesced frame may carry (a publisher sends at most 64)


@dataclass(slots=True)  # not frozen: a frozen dataclass costs a microsecond more per message
class Envelope:
    topic: str
    publisher: str
    seq: int
    sent_ns: int
    payload: bytes
    key: str | None = None  # consumer groups only (not in the plain frame): key-ordered dispatch
    priority: int = DEFAULT_PRIORITY  # consumer groups only: 0..9, higher first
    msg_id: str | None = None  # idempotent publishing: the journal keeps it with the message (never on the wire)
    epoch: int = 0  # exclusive topics: the election its publisher held when it sent it (0: none)

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
        fields = [VERSION, self.topic, [self.publisher, self.epoch] if self.epoch else self.publisher, self.seq,
                  self.sent_ns, self.payload]
        return packer.pack(fields) if packer is not None else msgpack.packb(fields, use_bin_type=True)


    @classmethod
    def decode(cls, raw: bytes, probes: bool = False) -> Envelope:
        """The envelope in `raw`; a probe (seq 0) only when `probes` is set. EnvelopeError otherwise."""
        topic, publisher, seq, sent_ns, payload, epoch = _unpack(raw, probes)
        if not (type(sent_ns) is int and sent_ns >= 0 and type(payload) is bytes):
            raise EnvelopeError("envelope fields have the wrong types")
        return cls(topic, publisher, seq, sent_ns, payload, epoch=epoch)


def _unpack(raw: bytes, probes: bool) -> tuple:
    """A published frame's fields, the ones every kind shares checked (version, topic, publisher, seq)."""
    try:
        v, topic, publisher, seq, sent_ns, payload = msgpack.unpackb(raw, raw=False)
    except Exception as exc:  # wrong shape, wrong length, undecodable: all the same to us
        raise EnvelopeError(f"not an envelope: {type(exc).__name__}") from None
    if v != VERSION or type(v) is not int:
        raise EnvelopeError(f"unsupported envelope version {v!r}")
    epoch = 0
    if type(publisher) is list and len(publisher) == 2 and type(publisher[1]) is int and publisher[1] > 0:
        publisher, epoch = publisher
    # `type(x) is int` excludes bool; msgpack's integers are below 2**64 already
    if not (type(topic) is str and len(topic) <= MAX_TOPIC_CHARS and type(publisher) is str
            and type(seq) is int and (seq >= 1 or (probes and seq == 0))):
        raise EnvelopeError("envelope fields have the wrong types")
    return topic, publisher, seq, sent_ns, payload, epoch


def encode_run(envs: list[Envelope], packer: msgpack.Packer | None = None) -> bytes:
    """The frame for a run of one publisher's consecutive messages of one topic: a coalesced frame
    [1, topic, publisher, first seq, [sent_ns...], [payload...]] (one message: its plain envelope)."""
    if len(envs) == 1:
        return envs[0].encode(packer)
    first = envs[0]
    fields = [VERSION, first.topic, [first.publisher, first.epoch] if first.epoch else first.publisher, first.seq,
              [e.sent_ns for e in envs], [e.payload for e in envs]]
    return packer.pack(fields) if packer is not None else msgpack.packb(fields, use_bin_type=True)


@dataclass(slots=True)
class Run:
    """A coalesced frame, decoded: one publisher's messages `seq`, `seq + 1`, ... of `topic`."""

    topic: str
    publisher: str
    seq: int
    sent_ns: list[int]
    payloads: list[bytes]
    epoch: int = 0

    def envelopes(self) -> list[Envelope]:
        topic, publisher, seq, epoch = self.topic, self.publisher, self.seq, self.epoch
        return [Envelope(topic, publisher, seq + i, t, b, epoch=epoch)
                for i, (t, b) in enumerate(zip(self.sent_ns, self.payloads, strict=True))]


def decode_frame(raw: bytes, probes: bool = False) -> Envelope | Run:
    """A published frame: its envelope, or a coalesced run (`encode_run`), checked whole:
    EnvelopeError, and nothing, when any part is wrong."""
    topic, publisher, seq, sent_ns, payload, epoch = _unpack(raw, probes)
    if type(payload) is bytes:
        if not (type(sent_ns) is int and sent_ns >= 0):
            raise EnvelopeError("envelope fields have the wrong types")
        return Envelope(topic, publisher, seq, sent_ns, payload, epoch=epoch)
    if not (type(payload) is list and type(sent_ns) is list and 1 < len(payload) == len(sent_ns) <= MAX_RUN
            and seq >= 1 and all(type(t) is int and t >= 0 for t in sent_ns)
            and all(type(b) is bytes for b in payload)):
        raise EnvelopeError("envelope fields have the wrong types")
    return Run(topic, publisher, seq, sent_ns, payload, epoch)


@dataclass(slots=True)
class Dispatched:
    """A dispatch frame, decoded: the envelope, and which group and member it was for."""

    env: Envelope
    group: str
    member: str
    deliveries: int
    max_deliver: int


def dispatch_address(topic: str, group: str, member: str) -> str:
    return f"{topic}\x00{group}\x00{member}"


def dispatch_filter(topic: str, group: str, member: str) -> bytes:
    """The SUB prefix that selects the dispatch frames of `topic`'s `group` meant for `member`."""
    return _DISPATCH_HEADER + msgpack.packb(dispatch_address(topic, group, member))


def parse_dispatch_filter(raw: bytes) -> tuple[str, str, str] | None:
    """(topic, group, member) of a subscription to dispatch frames (what a member's SUB sent up to
    our PUB socket), or None for any other filter."""
    if not raw.startswith(_DISPATCH_HEADER):
        return None
    try:
        address = msgpack.unpackb(raw[len(_DISPATCH_HEADER):], raw=False)
    except Exception:  # a filter that is not a whole string: somebody else's
        return None
    parts = address.split("\x00") if isinstance(address, str) else []
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 and all(parts) else None


def encode_dispatch(env: Envelope, group: str, member: str, deliveries: int, max_deliver: int,
                    packer: msgpack.Packer | None = None) -> bytes:
    fields = [DISPATCH_KIND, dispatch_address(env.topic, group, member), env.publisher, env.seq, env.sent_ns,
              env.payload, deliveries, max_deliver, env.key, env.priority]
    return packer.pack(fields) if packer is not None else msgpack.packb(fields, use_bin_type=True)


def decode_dispatch(raw: bytes) -> Dispatched:
    """A dispatch frame, checked like an envelope; EnvelopeError otherwise."""
    try:
        kind, address, publisher, seq, sent_ns, payload, deliveries, max_deliver, key, priority = msgpack.unpackb(
            raw, raw=False)
    except Exception as exc:
        raise EnvelopeError(f"not a dispatch frame: {type(exc).__name__}") from None
    parts = address.split("\x00") if type(address) is str else []
    if not (kind == DISPATCH_KIND and type(kind) is int and len(parts) == 3 and all(parts)
            and len(parts[0]) <= MAX_TOPIC_CHARS and type(publisher) is str and type(seq) is int and seq >= 1
            and type(sent_ns) is int and sent_ns >= 0 and type(payload) is bytes
            and type(deliveries) is int and deliveries >= 1 and type(max_deliver) is int and max_deliver >= 1
            and (key is None or (type(key) is str and len(key) <= MAX_KEY_CHARS))
            and type(priority) is int and 0 <= priority <= 9):
        raise EnvelopeError("dispatch frame fields have the wrong types")
    env = Envelope(parts[0], publisher, seq, sent_ns, payload, key, priority)
    return Dispatched(env, parts[1], parts[2], deliveries, max_deliver)


def topic_filter(topic: str) -> bytes:
    """The SUB prefix that selects `topic`'s messages, and nothing else."""
    return _HEADER + msgpack.packb(topic)


def pattern_filter(pattern: str) -> bytes:
    """The SUB prefix that selects the pattern frames of `pattern` (and of no other pattern: msgpack
    writes the string's length first)."""
    return PATTERN_PREFIX + msgpack.packb(pattern)


def parse_pattern_filter(raw: bytes) -> str | None:
    """The pattern a subscription to pattern frames names (what a pattern subscriber's SUB sent up to our
    PUB socket), or None for any other filter."""
    if not raw.startswith(PATTERN_PREFIX):
        return None
    try:
        pattern = msgpack.unpackb(raw[len(PATTERN_PREFIX):], raw=False)
    except Exception:  # noqa: BLE001 - not exactly one string: not a pattern's filter
        return None
    return pattern if isinstance(pattern, str) and pattern else None


def _bin_head(n: int) -> bytes:
    """msgpack's head for a bin of `n` bytes."""
    if n < 0x100:
        return b"\xc4" + n.to_bytes(1, "big")
    if n < 0x10000:
        return b"\xc5" + n.to_bytes(2, "big")
    return b"\xc6" + n.to_bytes(4, "big")


def wrap_for_pattern(head: bytes, frame: bytes) -> bytes:
    """The pattern frame carrying `frame` to the subscribers of one pattern (`head`: its `pattern_filter`)."""
    return head + _bin_head(len(frame)) + frame


def wrap_bundle(head: bytes, frames: list[bytes]) -> bytes:
    """The pattern frame carrying several plain frames (of any topics the pattern matches, in the order
    sent) to the subscribers of one pattern: [3, pattern, [frame, ...]], the same prefix."""
    n = len(frames)
    parts = [head, bytes([0x90 | n]) if n < 16 else b"\xdc" + n.to_bytes(2, "big")]
    for frame in frames:
        parts.append(_bin_head(len(frame)))
        parts.append(frame)
    return b"".join(parts)


_BIN_SIZE = {0xC4: 1, 0xC5: 2, 0xC6: 4}  # msgpack bin 8/16/32: the bytes of the length that follows


def inner_frame(raw: bytes, head: bytes) -> memoryview | None:
    """The plain frame a pattern frame of the pattern whose filter is `head` wraps, without a copy
    (None: not one of that pattern's, or cut short); `decode_frame` takes it as it takes bytes."""
    if not raw.startswith(head) or len(raw) <= len(head):
        return None
    size = _BIN_SIZE.get(raw[len(head)])
    if size is None:
        return None
    start = len(head) + 1 + size
    if int.from_bytes(raw[len(head) + 1:start], "big") != len(raw) - start:
        return None
    return memoryview(raw)[start:]


def inner_frames(raw: bytes, head: bytes) -> list[memoryview] | None:
    """The plain frames a pattern frame of the pattern whose filter is `head` carries, one or a bundle
    of at most MAX_RUN, without a copy (None: not one of that pattern's, or malformed)."""
    if not raw.startswith(head) or len(raw) <= len(head):
        return None
    at = len(head)
    kind = raw[at]
    if kind in _BIN_SIZE:
        inner = inner_frame(raw, head)
        return None if inner is None else [inner]
    if 0x90 <= kind <= 0x9F:
        n, at = kind & 0x0F, at + 1
    elif kind == 0xDC and len(raw) >= at + 3:
        n, at = int.from_bytes(raw[at + 1:at + 3], "big"), at + 3
    else:
        return None
    if not 0 < n <= MAX_RUN:
        return None
    view, frames = memoryview(raw), []
    for _ in range(n):
        size = _BIN_SIZE.get(raw[at]) if at < len(raw) else None
        if size is None:
            return None
        start = at + 1 + size
        at = start + int.from_bytes(raw[at + 1:start], "big")
        if at > len(raw):
            return None
        frames.append(view[start:at])
    return frames if at == len(raw) else None

