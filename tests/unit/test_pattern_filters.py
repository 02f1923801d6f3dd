"""What a publisher makes of its subscribers' pattern filters (pubsub/filters.py) and how a message
goes out to them (pubsub/coalescing.py): pure, with a list for a socket."""

from __future__ import annotations

import threading

import msgpack
import pytest
import zmq

from pubsub import coalescing
from pubsub.coalescing import COALESCE_GAP_NS, COALESCE_MAX, Coalescer
from pubsub.envelope import Run, decode_frame, inner_frame, inner_frames, pattern_filter, topic_filter, wrap_bundle
from pubsub.filters import Filters
from pubsub.publication import Publication
from pubsub.publishing import PublishingSide


class Socket:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, frame: bytes) -> None:
        self.sent.append(frame)


def filters() -> Filters:
    return Filters(lambda _prefix, _on: False)


def test_each_subscribers_pattern_filter_counts_for_the_topics_it_matches_until_it_goes():
    """Two subscribers of `dev/*/temp` and one of `dev/>`: a temp topic has three filters in place, a hum
    topic one; the heads name each matching pattern once; a filter that goes stops counting."""
    f = filters()
    for prefix in (pattern_filter("dev/*/temp"), pattern_filter("dev/*/temp"), pattern_filter("dev/>")):
        f.message("direct", b"\x01" + prefix)
    assert f.held("direct", topic_filter("dev/1/temp"), "dev/1/temp") == 3
    assert f.held("direct", topic_filter("dev/1/hum"), "dev/1/hum") == 1
    assert sorted(f.pattern_heads("dev/1/temp")) == sorted([pattern_filter("dev/*/temp"), pattern_filter("dev/>")])
    version = f.version
    f.message("direct", b"\x00" + pattern_filter("dev/*/temp"))
    assert f.held("direct", topic_filter("dev/1/temp"), "dev/1/temp") == 2 and f.version == version
    f.message("direct", b"\x00" + pattern_filter("dev/*/temp"))
    assert f.pattern_heads("dev/1/temp") == {pattern_filter("dev/>")} and f.version > version
    f.message("direct", b"\x01" + pattern_filter("a*b"))  # not of the grammar: matches nothing, no harm
    assert f.pattern_heads("a*b") == set() and f.held("direct", topic_filter("x"), "x") == 0


def test_topics_matching_the_same_patterns_share_one_set_of_heads_and_a_first_publish_makes_none():
    """A burst of new topics leaves as few objects as it can (each one the collector walks again): the
    topics matching the same patterns share one set of heads, and a held first message that went to
    them shares it too. To see it fail, make `Filters.pattern_heads` build a set for each topic
    (`heads = self._heads_of.get(patterns)` made `heads = None`)."""
    f, sock = filters(), Socket()
    f.message("direct", b"\x01" + pattern_filter("dev/*/temp"))
    runs = Coalescer(lambda _pub: sock, msgpack.Packer(use_bin_type=True), f)
    pubs = [Publication(f"dev/{i}/temp", "p") for i in range(3)]
    for pub in pubs:
        env = pub.stamp(b"first", 10**9, keep=False)
        runs.early(pub, env, [env])
    assert [p.pattern_heads for p in pubs] == [{pattern_filter("dev/*/temp")}] * 3
    assert all(p.pattern_heads is pubs[0].pattern_heads and p.early_heads is pubs[0].pattern_heads for p in pubs)
    assert f.pattern_heads("dev/1/hum") is f.pattern_heads("dev/2/hum") == set()


def test_a_message_goes_once_plain_and_once_to_each_matching_pattern():
    """The plain frame for exact subscribers (when the socket holds one's filter: one that only
    patterns follow costs no plain send), then one pattern frame per matching pattern, each wrapping
    the same bytes; a pattern that comes later is matched from then on.

    To see it fail, leave out the pattern frames (`Coalescer.to_patterns` returning at once)."""
    f, sock = filters(), Socket()
    runs = Coalescer(lambda _pub: sock, msgpack.Packer(use_bin_type=True), f)
    pub = Publication("dev/7/temp", "p")
    runs.send(pub, pub.stamp(b"one", 10**9), 10**9)  # (a second apart: no run is coalesced)
    assert len(sock.sent) == 1
    f.message("direct", b"\x01" + pattern_filter("dev/*/temp"))
    f.message("direct", b"\x01" + pattern_filter("dev/hum/*"))
    runs.send(pub, pub.stamp(b"two", 2 * 10**9), 2 * 10**9)
    assert len(sock.sent) == 2 and sock.sent[1].startswith(pattern_filter("dev/*/temp")), "no exact subscriber"
    f.message("direct", b"\x01" + topic_filter("dev/7/temp"))
    runs.send(pub, pub.stamp(b"three", 3 * 10**9), 3 * 10**9)
    plain, wrapped = sock.sent[2], sock.sent[3:]
    assert len(wrapped) == 1 and wrapped[0].startswith(pattern_filter("dev/*/temp"))
    inner = inner_frame(wrapped[0], pattern_filter("dev/*/temp"))
    assert inner is not None and bytes(inner) == plain and decode_frame(inner).payload == b"three"


MS = 1_000_000  # publish times a millisecond apart: each message goes at once, in no run


def test_a_paced_stream_only_patterns_follow_reads_the_filters_at_most_every_steady_gap(monkeypatch):
    """A topic only a pattern follows checks, before each plain frame it skips, whether an exact
    subscriber's filter came unread; paced at 1 ms, that read (a receive on the socket, which finds
    nothing) once a frame cost the paced p50 through a pattern 4-8 µs. It reads at most every
    STEADY_DRAIN_GAP_NS, and a filter that came is still taken within that gap.

    To see it fail, let `_out` read at the registering topics' gap (`self._drain_due()`): 30 reads."""
    clock = [10**12]

    def monotonic_ns() -> int:  # each look at the clock a millisecond later
        clock[0] += MS
        return clock[0]

    monkeypatch.setattr(coalescing.time, "monotonic_ns", monotonic_ns)
    f, sock, reads = filters(), Socket(), []
    runs = Coalescer(lambda _pub: sock, msgpack.Packer(use_bin_type=True), f)
    f.message("direct", b"\x01" + pattern_filter("dev/*/temp"))
    pub = Publication("dev/7/temp", "p")

    came: list[bytes] = []  # filters that reached the socket, unread until the next read

    def drain() -> None:
        reads.append(clock[0])
        for message in came:
            f.message("direct", message)
        came.clear()

    runs.drain = drain

    def paced(n: int) -> list[bytes]:  # n messages a second apart (each alone): the plain frames sent
        start = len(sock.sent)
        for _ in range(n):
            t = (pub.seq + 1) * 10**9
            runs.send(pub, pub.stamp(b"m", t), t)
        return [frame for frame in sock.sent[start:] if not frame.startswith(pattern_filter("dev/*/temp"))]

    assert paced(30) == [] and len(sock.sent) == 30
    assert len(reads) <= 30 * MS // coalescing.STEADY_DRAIN_GAP_NS + 1, f"{len(reads)} reads of the filters"
    came.append(b"\x01" + topic_filter("dev/7/temp"))  # an exact subscriber's filter
    plain = paced(30)
    assert len(plain) >= 30 - coalescing.STEADY_DRAIN_GAP_NS // MS, "the exact filter was not taken within the gap"


def payloads(frames: list[bytes]) -> list[bytes]:
    """The messages in `frames`, in order (a run's each)."""
    out: list[bytes] = []
    for frame in frames:
        decoded = decode_frame(frame)
        out += decoded.payloads if isinstance(decoded, Run) else [decoded.payload]
    return out


def registering(*topics: str, history: int = 0) -> tuple[PublishingSide, ...]:
    """A publishing side's state alone (no sockets, no context), `topics` published and still registering
    (each keeping `history` messages): (the side, each topic's publication)."""
    side = PublishingSide.__new__(PublishingSide)
    side.held, side.publications, side._filters = {}, {}, filters()
    side._patterns_seen, side.direct, side.groups = 0, Socket(), type("G", (), {"groups": {}})()
    side.runs = Coalescer(lambda _pub: side.direct, msgpack.Packer(use_bin_type=True), side._filters)
    side.lock = threading.Lock()
    pubs = []
    for topic in topics:
        pub = Publication(topic, "p", history)
        side.publications[topic], side.held[topic] = pub, []
        pubs.append(pub)
    return (side, *pubs)


@pytest.mark.parametrize("pattern_first", [True, False])
def test_a_registering_topics_messages_reach_a_listening_pattern_once(pattern_first):
    """A topic still registering holds its messages back from exact subscribers; a pattern already
    listening (or arriving while they wait) gets each of them at once, and not again at the release,
    when the plain frames go out.

    To see it fail, make `Coalescer.send_released` send to every pattern again (`skip` ignored), or
    make `Coalescer.early_all` cut a bundle after every frame (its `if len(bundle.frames) >= COALESCE_MAX
    ...:` made `if True:`): the held messages go one a frame."""
    side, pub = registering("dev/1/temp")
    listen = b"\x01" + pattern_filter("dev/>")
    if pattern_first:
        side._filters.message("direct", listen)
    side._publish(pub, b"a", None, 4, MS)
    side._publish(pub, b"b", None, 4, 2 * MS)
    if not pattern_first:
        side._filters.message("direct", listen)
        side._held_to_new_patterns()
    early = list(side.direct.sent)
    head = pattern_filter("dev/>")
    assert [bytes(decode_frame(i).payload) for f in early for i in inner_frames(f, head)] == [b"a", b"b"]
    assert len(early) == (2 if pattern_first else 1), "a pattern that came later takes what was held in one bundle"
    side.release(pub.topic)
    later = side.direct.sent[len(early):]
    assert [decode_frame(f).payload for f in later] == [b"a", b"b"], "plain frames only, for exact subscribers"


def test_a_registering_topics_messages_reach_listening_exact_subscribers_at_once_and_a_newcomer_all_of_them():
    """A topic still registering sends each message at once to the exact subscribers whose filters the
    socket holds, and its release sends none of them again. A filter that comes while the messages wait
    gets all of them (its subscriber had none), and the next ones go on from there; one that came
    unseen before the release makes the release send them all again (a subscriber drops by seq what
    comes twice).

    To see it fail, make `Coalescer.early_exact` send only what it had not sent yet (the newcomer misses
    the first message), or `send_released` send to the exact subscribers again (the release repeats
    what went early)."""
    side, listened, joined = registering("dev/1/temp", "dev/2/temp")
    side._filters.message("direct", b"\x01" + topic_filter("dev/1/temp"))
    side._publish(listened, b"a", None, 4, 1 * MS)
    side._publish(listened, b"b", None, 4, 2 * MS)
    assert payloads(side.direct.sent) == [b"a", b"b"]
    side.release("dev/1/temp")
    assert payloads(side.direct.sent) == [b"a", b"b"], "the release sent them again"

    side.direct.sent.clear()
    side._publish(joined, b"c", None, 4, 3 * MS)
    assert side.direct.sent == [], "no filter of the topic held: nothing goes yet"
    side._filters.message("direct", b"\x01" + topic_filter("dev/2/temp"))
    side._held_to_exact({topic_filter("dev/2/temp")})
    side._publish(joined, b"d", None, 4, 4 * MS)
    assert payloads(side.direct.sent) == [b"c", b"d"]
    side._filters.message("direct", b"\x01" + topic_filter("dev/2/temp"))  # a second subscriber's
    side._held_to_exact({topic_filter("dev/2/temp")})
    assert payloads(side.direct.sent) == [b"c", b"d", b"c", b"d"], "the newcomer gets all that was held"
    side._filters.message("direct", b"\x01" + topic_filter("dev/2/temp"))  # a third, not looked at
    side.release("dev/2/temp")
    assert payloads(side.direct.sent)[4:] == [b"c", b"d"], "the release owes the unseen newcomer all of them"


def test_what_a_registering_topic_sends_early_is_kept_then_and_the_release_keeps_the_rest_once():
    """A topic still registering keeps a message it sends early at once, as its release would (a
    subscriber that has it may ask for it again: a durable one after a restart, a reliable one for a
    gap); the release keeps what was held back, each message once.

    To see it fail, make `Coalescer.early_exact` keep nothing: the history is empty while the
    subscriber has the first messages."""
    side, pub = registering("dev/9/temp", history=10)
    side._publish(pub, b"a", None, 4, 1 * MS)  # no subscriber's filter yet: held, not kept
    side._filters.message("direct", b"\x01" + topic_filter("dev/9/temp"))
    side._held_to_exact({topic_filter("dev/9/temp")})
    side._publish(pub, b"b", None, 4, 2 * MS)
    assert payloads(side.direct.sent) == [b"a", b"b"]
    assert [e.payload for e in pub.history.range(1, None)] == [b"a", b"b"], "sent early, and kept"
    side._filters.message("direct", b"\x01" + topic_filter("dev/9/temp"))  # a filter the release owes all
    side._publish(pub, b"c", None, 4, 3 * MS)
    side.release("dev/9/temp")
    assert [e.payload for e in pub.history.range(1, None)] == [b"a", b"b", b"c"]

def test_a_flood_while_its_topic_registers_goes_to_listening_subscribers_in_runs():
    """A publisher that floods a topic from its first message (the topic still registering) sends it to
    the exact subscribers already listening in runs, as it will once registered, not a frame each: one
    frame a message made each of 16 publishers into one subscriber send 1.1-1.7 messages a frame
    instead of 40, at half the throughput. The release sends none of them again.

    To see it fail, make `Coalescer.early_exact` send each message it had not sent yet alone."""
    side, pub = registering("fan/in")
    side._filters.message("direct", b"\x01" + topic_filter("fan/in"))
    for i in range(3 * COALESCE_MAX):
        side._publish(pub, b"m%d" % i, None, 4, MS + i * 1000)  # a microsecond apart
    side.runs.send_paused(10 * MS)  # the io loop, when the publisher has paused
    sent = list(side.direct.sent)
    assert payloads(sent) == [b"m%d" % i for i in range(3 * COALESCE_MAX)]
    assert len(sent) <= 5, f"{len(sent)} frames for {3 * COALESCE_MAX} messages"
    side.release("fan/in")
    assert side.direct.sent == sent, "the release sent them again"


class XpubSocket(Socket):
    """A PUB socket's side the filters come up on: `incoming` holds what subscribers sent."""

    def __init__(self) -> None:
        super().__init__()
        self.incoming: list[bytes] = []

    def recv(self, _flags: int = 0) -> bytes:
        if not self.incoming:
            raise zmq.Again()
        return self.incoming.pop(0)


def test_topics_counted_before_are_counted_again_only_once_a_filter_came_or_went():
    """`in_place_since` counts the known topics' filters again only when a filter came or went since
    the count it is given (the advertiser's looks at a thousand waiting topics cost that much each).

    To see it fail, make `Filters.seen` leave `changes` alone: the filter that came is never counted."""
    side = PublishingSide.__new__(PublishingSide)  # its state alone: no sockets, no context
    side.held, side.publications, side._filters = {}, {}, filters()
    side._patterns_seen, side.direct, side.relay, side._gate = 0, XpubSocket(), None, None
    side.runs = Coalescer(lambda _pub: side.direct, msgpack.Packer(use_bin_type=True), side._filters)
    side.lock = threading.Lock()
    for topic in ("a", "b"):
        side.publications[topic] = Publication(topic, "p")
    counts, changes = side.in_place_since(["a"], ["b"], -1)
    assert counts == {"a": 0, "b": 0}
    assert side.in_place_since([], ["b"], changes) == ({}, changes), "nothing came: b's count stands"
    side.direct.incoming.append(b"\x01" + topic_filter("b"))
    counts, later = side.in_place_since(["a"], ["b"], changes)
    assert counts == {"a": 0, "b": 1} and later != changes


def test_a_burst_of_new_topics_goes_to_a_pattern_in_bundles_in_order_and_a_lone_message_at_once():
    """Messages of many topics, each within COALESCE_GAP_NS of the one before, go to the pattern that
    matches them in bundles (one frame carrying several topics' frames, in the order published, at most
    COALESCE_MAX), the rest when the publisher pauses; a message after a pause goes alone, at once.
    To see it fail, send every frame at once (`if at_once or last is None or now - last >=
    COALESCE_GAP_NS:` made `if True:`): a thousand frames for a thousand messages."""
    f, sock = filters(), Socket()
    runs = Coalescer(lambda _pub: sock, msgpack.Packer(use_bin_type=True), f)
    head = pattern_filter("dev/>")
    f.message("direct", b"\x01" + head)
    t0 = 10**12
    for i in range(1000):
        pub = Publication(f"dev/{i}/temp", "p")
        runs.send(pub, pub.stamp(b"%d" % i, t0 + i * 1000), t0 + i * 1000)  # a microsecond apart
    assert runs.busy and runs.paused(t0 + 1000 * 1000 + COALESCE_GAP_NS)
    runs.send_paused(t0 + 1000 * 1000 + COALESCE_GAP_NS)
    assert not runs.busy
    inners = [bytes(i) for frame in sock.sent for i in inner_frames(frame, head)]
    assert [decode_frame(i).payload for i in inners] == [b"%d" % i for i in range(1000)]
    assert len(sock.sent) <= 1 + 1000 // COALESCE_MAX + 1, len(sock.sent)
    alone = Publication("dev/alone/temp", "p")
    later = t0 + 10**9
    runs.send(alone, alone.stamp(b"alone", later), later)
    assert not runs.busy and inner_frame(sock.sent[-1], head) is not None, "after a pause: at once"


def test_a_bundle_of_pattern_frames_is_taken_whole_or_not_at_all():
    """A subscriber takes every plain frame of a bundle, and a bundle cut short or padded as none."""
    head = pattern_filter("a/*")
    frames = [b"x" * n for n in (1, 300, 70_000)]
    bundle = wrap_bundle(head, frames)
    assert [bytes(i) for i in inner_frames(bundle, head)] == frames
    assert msgpack.unpackb(bundle)[2] == frames, "valid msgpack: [3, pattern, [frame, ...]]"
    assert inner_frames(bundle[:-1], head) is None and inner_frames(bundle + b"\x00", head) is None
    assert inner_frames(wrap_bundle(pattern_filter("b/*"), frames), head) is None
    assert [bytes(i) for i in inner_frames(wrap_bundle(head, [b"y"] * 20), head)] == [b"y"] * 20  # array 16
