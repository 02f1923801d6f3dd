"""Coalesced frames: a fast publisher's run of messages in one frame, and a subscriber taking a run
exactly as it would take its messages one by one (pubsub/envelope.py, publishing.py, subscription.py).

To see these fail: make `decode_frame` accept runs of unequal lengths, or `TopicState.on_run` take
a run whole without checking it is next in order (the gap tests then deliver without counting), or
`Coalescer.send` coalesce after a pause (the paced message then waits for the io loop)."""

from __future__ import annotations

import time

import msgpack
import pytest
import zmq

from chordpub.launcher import wait_for
from pubsub.coalescing import COALESCE_BYTES, COALESCE_GAP_NS, COALESCE_MAX
from pubsub.directory import PublisherEntry
from pubsub.envelope import MAX_RUN, Envelope, EnvelopeError, Run, decode_frame, encode_run, topic_filter
from pubsub.publication import Publication
from pubsub.publishing import PublishingSide
from pubsub.subscription import TopicState

A = PublisherEntry("127.0.0.1:1", "127.0.0.1:1", "127.0.0.1:1")


def run_of(first: int, n: int, topic: str = "t") -> Run:
    frame = encode_run([Envelope(topic, A.id, first + i, 1_000_000 + i, f"m{first + i}".encode()) for i in range(n)])
    decoded = decode_frame(frame)
    assert isinstance(decoded, Run)
    return decoded


def test_a_run_round_trips_and_a_run_of_one_is_a_plain_envelope():
    envs = [Envelope("t", "p", 7 + i, 100 + i, bytes([i]) * i) for i in range(5)]
    run = decode_frame(encode_run(envs))
    assert isinstance(run, Run) and run.envelopes() == envs
    assert encode_run(envs[:1]) == envs[0].encode()
    assert decode_frame(encode_run(envs[:1])) == envs[0]
    assert encode_run(envs).startswith(topic_filter("t")), "the topic's own prefix selects a run"


@pytest.mark.parametrize("fields, why", [
    ([1, "t", "p", 1, [1, 2, 3], [b"a", b"b"]], "lengths differ"),
    ([1, "t", "p", 1, [1], [b"a"]], "a run of one is a plain envelope"),
    ([1, "t", "p", 1, [1] * (MAX_RUN + 1), [b"a"] * (MAX_RUN + 1)], "longer than a run may be"),
    ([1, "t", "p", 1, [1, 2], [b"a", "b"]], "a payload that is not bytes"),
    ([1, "t", "p", 1, [1, -2], [b"a", b"b"]], "a negative time"),
    ([1, "t", "p", 0, [1, 2], [b"a", b"b"]], "seq 0 is a probe's, never a run's"),
    ([1, "t", "p", 1, 5, [b"a", b"b"]], "one time for many payloads"),
])
def test_a_malformed_run_is_refused_whole(fields, why):
    with pytest.raises(EnvelopeError):
        decode_frame(msgpack.packb(fields, use_bin_type=True), probes=True)


def delivered(ts: TopicState) -> list[int]:
    seqs = [m.seq for m in ts.deliveries]
    ts.deliveries.clear()
    return seqs


def test_runs_in_order_are_delivered_and_counted_like_single_messages():
    ts = TopicState("t", "me")
    ts.reconcile([])
    ts.reconcile([A])
    ts.on_run(run_of(1, 5), 2_000_000)
    ts.on_message(Envelope("t", A.id, 6, 1, b"six"), 2_000_000)
    ts.on_run(run_of(7, 3), 2_000_000)
    assert delivered(ts) == list(range(1, 10))
    assert ts.stats.received == 9 and ts.lost == 0 and ts.stats.latency.count == 9


def test_a_run_after_a_gap_or_repeated_is_taken_message_by_message():
    ts = TopicState("t", "me")
    ts.reconcile([])
    ts.reconcile([A])
    ts.on_run(run_of(1, 3), 1)
    ts.on_run(run_of(6, 3), 1)  # 4 and 5 lost on the way
    assert delivered(ts) == [1, 2, 3, 6, 7, 8] and ts.lost == 2
    ts.on_run(run_of(4, 3), 1)  # the late 4 and 5 come, with 6 again
    assert delivered(ts) == [4, 5] and ts.lost == 0 and ts.stats.duplicates == 1
    ts.on_run(run_of(9, 2), 1)
    assert delivered(ts) == [9, 10]


def test_a_reliable_run_past_a_gap_waits_for_the_repair():
    pub = Publication("t", A.id, history_size=100, reliable=True)
    for i in range(10):
        pub.stamp(f"m{i + 1}".encode(), 1_000_000 + i)
    ts = TopicState("t", "me", reliable=True)
    (st,), _ = ts.reconcile([A])
    ts.fetches.clear()
    ts.on_range(st, 1, None, pub.serve("range", lo=1, hi=2), 1)
    ts.fetch_done(st, 1)
    assert delivered(ts) == [1, 2]
    ts.on_run(run_of(3, 2), 1)
    assert delivered(ts) == [3, 4]
    ts.on_run(run_of(7, 4), 1)  # 5 and 6 missing: held, repaired, then all in order
    assert not ts.deliveries and ts.fetches == [(st, 5, 6)]
    ts.fetches.clear()
    ts.on_range(st, 5, 6, pub.serve("range", lo=5, hi=6), 1)
    ts.fetch_done(st, 1)
    assert delivered(ts) == [5, 6, 7, 8, 9, 10]


@pytest.fixture
def publishing():
    context = zmq.Context()
    side = PublishingSide(context, "127.0.0.1", "pub-1", None)
    side.add(Publication("t", "pub-1"))
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, topic_filter("t"))
    sub.connect(f"tcp://{side.endpoint}")
    wait_for(lambda: side.in_place("t") == 1, 10, what="the subscriber's filter at the publisher")
    yield side, sub
    sub.close()
    side.close()
    context.term()


def received(sub: zmq.Socket, count: int) -> list[Envelope | Run]:
    frames: list[Envelope | Run] = []
    got = 0

    def more() -> bool:
        nonlocal got
        while sub.poll(0):
            frame = decode_frame(sub.recv())
            frames.append(frame)
            got += len(frame.payloads) if isinstance(frame, Run) else 1
        return got >= count
    wait_for(more, 10, what=f"{count} messages")
    return frames


def test_a_flood_goes_out_in_runs_and_a_message_after_a_pause_alone(publishing):
    side, sub = publishing
    woken = []
    side.runs.wake = lambda: woken.append(1)  # (no io loop here: the test does what it would do)
    for i in range(1000):
        side.publish("t", b"%d" % i)
    side.send_paused(10**20)
    frames = received(sub, 1000)
    seqs = [s for f in frames for s in (range(f.seq, f.seq + len(f.payloads)) if isinstance(f, Run) else [f.seq])]
    assert seqs == list(range(1, 1001))
    assert woken and len(frames) < 1000 // 4
    assert max(len(f.payloads) for f in frames if isinstance(f, Run)) <= COALESCE_MAX
    wait_for(lambda: time.time_ns() - side.publications["t"].last_published_ns > COALESCE_GAP_NS, 1,
             interval=0.001, what="a pause")
    side.publish("t", b"after a pause")
    (alone,) = received(sub, 1)
    assert isinstance(alone, Envelope) and alone.seq == 1001 and not side.runs.waiting, "sent at once, not held"


class SteadyClock:
    """The publisher's clock (`time.time_ns` in pubsub/publishing.py) a microsecond on at each reading, however
    long a loaded machine takes between two publishes: five in a row are a flood, never five after pauses."""

    def __init__(self) -> None:
        self.ns = time.time_ns()

    def time_ns(self) -> int:
        self.ns += 1_000
        return self.ns


def test_flush_sends_what_waits_in_a_run_at_once(publishing, monkeypatch):
    """No io loop here: without `flush` the run would wait for one. (To see it fail, let
    `PublishingSide.flush` send nothing.)"""
    side, sub = publishing
    side.runs.wake = lambda: None
    monkeypatch.setattr("pubsub.publishing.time", SteadyClock())
    for i in range(5):
        side.publish("t", b"%d" % i)
    assert side.runs.waiting, "a flood of five waits in a run"
    side.flush()
    frames = received(sub, 5)
    assert [s for f in frames for s in (range(f.seq, f.seq + len(f.payloads)) if isinstance(f, Run) else [f.seq])] \
        == [1, 2, 3, 4, 5]
    assert not side.runs.waiting and not side.publications["t"].pending


def test_a_run_is_cut_at_its_byte_bound(publishing):
    side, sub = publishing
    side.runs.wake = lambda: None
    big = b"x" * (COALESCE_BYTES // 4)
    for _ in range(8):
        side.publish("t", big)
    side.send_paused(10**20)
    frames = received(sub, 8)
    assert all(sum(map(len, f.payloads)) < COALESCE_BYTES + len(big) for f in frames if isinstance(f, Run))
    assert len(frames) >= 2
