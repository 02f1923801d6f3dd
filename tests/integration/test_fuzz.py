"""Property-based fuzzing (hypothesis) of wire decoding and of every socket kind's request handler.

Inputs are raw bytes, msgpack of any shape, and requests that are almost right (a real op, fields
of any type, out-of-range ids). For each: no exception escapes, an error reply is never the
handler's "internal error" (a bug), and when the reply is an error the handler's state is exactly
what it was. 300 inputs per socket kind by default; 10^4 under the `slow` marker (`make test` runs
both), every one of them through the wire decoder first.
"""

from __future__ import annotations

import copy

import msgpack
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dht import wire
from dht.node import ChordNode, NodeConfig
from pubsub.directory import PublisherEntry
from pubsub.envelope import Envelope, EnvelopeError
from pubsub.publisher import REPAIR_SCHEMAS, Publisher
from pubsub.subscriber import NOTIFY_SCHEMAS, PENDING_LIMIT, Subscriber

SIZES = [pytest.param(300, id="300"), pytest.param(10_000, id="10k", marks=pytest.mark.slow)]

scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
           | st.floats(allow_nan=True) | st.text(max_size=30) | st.binary(max_size=40))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
ids = st.integers(min_value=0, max_value=2**64 - 1)
peers = st.fixed_dictionaries({"id": ids | values, "endpoint": st.sampled_from(["127.0.0.1:1", "h:99999", "x"])
                               | st.text(max_size=20)})


def requests(schemas: wire.Schemas) -> st.SearchStrategy[bytes]:
    """Almost-right requests: real ops and field names, values of any type (well-typed ones too)."""
    fields = sorted({f for schema in schemas.values() for f in schema})
    plausible = {"key_id": ids, "peer": peers, "predecessor": peers | st.none(), "successors": st.lists(peers),
                 "ttl": st.floats(min_value=-1, max_value=1e6) | values, "count": ids | values,
                 "from": ids | values, "to": ids | values | st.none()}
    body = st.fixed_dictionaries(
        {"v": st.sampled_from([1, 1, 1, 2]) | values, "op": st.sampled_from([*schemas, "bogus"]) | values,
         "id": ids | values},
        optional={f: plausible.get(f, values) | values for f in fields})
    return body.map(_pack) | st.binary(max_size=200) | values.map(_pack)


def _pack(obj: object) -> bytes:
    try:
        return msgpack.packb(obj, use_bin_type=True)
    except (OverflowError, ValueError, TypeError):
        assume(False)
        raise


def frame_lists(schemas: wire.Schemas) -> st.SearchStrategy[list[bytes]]:
    good = requests(schemas).map(lambda body: [b"peer-identity", body])
    odd = st.lists(st.binary(max_size=30) | requests(schemas), max_size=4)  # wrong frame counts, envelopes
    return good | good | odd


def fuzz(examples: int, strategy, check) -> None:  # noqa: ANN001
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(strategy)
    def run(value) -> None:  # noqa: ANN001
        check(value)

    run()


def replied_error(reply: list[bytes] | None) -> bool:
    if reply is None:
        return True  # dropped: nothing could be answered
    body = wire.decode_reply(reply[-1])
    assert body.get("err") != "internal error", body
    return not body["ok"]


@pytest.mark.parametrize("schemas", [wire.SCHEMAS, NOTIFY_SCHEMAS, REPAIR_SCHEMAS], ids=["ring", "notify", "repair"])
def test_decoding_either_validates_or_says_why(schemas):
    """What decoding returns is well formed. (The handler tests below decode their 10^4 inputs too.)"""
    examples = 1000
    def check(frame: bytes) -> None:
        try:
            request = wire.decode_request(frame, schemas)
        except wire.WireError:
            return
        assert request["op"] in schemas and isinstance(request["id"], int)
        assert set(request) - {"op", "id"} <= set(schemas[request["op"]])

    fuzz(examples, requests(schemas), check)


@pytest.mark.parametrize("examples", SIZES)
def test_envelopes_decode_or_raise_envelope_error(examples):
    def check(raw: bytes) -> None:
        try:
            env = Envelope.decode(raw)
        except EnvelopeError:
            return
        assert Envelope.decode(env.encode()) == env

    fuzz(examples, st.binary(max_size=120) | values.map(_pack), check)


def node_state(node: ChordNode) -> tuple:
    with node.lock:
        return (copy.deepcopy(node.store._entries), node.info(), node.jobs.qsize(), node.stopped.is_set())


@pytest.mark.parametrize("examples", SIZES)
def test_the_node_handler_changes_nothing_when_it_refuses(examples):
    node = ChordNode(NodeConfig(host="127.0.0.1", port=0, bits=16))
    try:
        def check(frames: list[bytes]) -> None:
            before = node_state(node)
            if replied_error(node.server.handle_frames(frames)):
                assert node_state(node) == before

        fuzz(examples, frame_lists(wire.SCHEMAS), check)
    finally:
        node.server.close()


@pytest.mark.parametrize("examples", SIZES)
def test_the_publisher_repair_handler_changes_nothing(examples):
    publisher = Publisher("127.0.0.1:1", "fuzzed", history=10)
    for i in range(5):
        publisher.publish(bytes([i]))
    before = [e.encode() for e in publisher.history.range(1, None, limit=100)]
    try:
        def check(frames: list[bytes]) -> None:
            replied_error(publisher.repair.handle_frames(frames))
            assert [e.encode() for e in publisher.history.range(1, None, limit=100)] == before

        fuzz(examples, frame_lists(REPAIR_SCHEMAS), check)
    finally:
        publisher.close(unregister=False)


@pytest.mark.parametrize("examples", SIZES)
def test_the_subscriber_notify_handler_changes_nothing(examples):
    subscriber = Subscriber("127.0.0.1:1", "fuzzed")
    try:
        def check(frames: list[bytes]) -> None:
            replied_error(subscriber.notify.handle_frames(frames))
            assert not subscriber.states and subscriber.stats.received == 0

        fuzz(examples, frame_lists(NOTIFY_SCHEMAS), check)
    finally:
        subscriber.close(unregister=False)


@pytest.mark.parametrize("examples", SIZES)
def test_the_subscriber_message_path_delivers_only_real_envelopes_of_its_publishers(examples):
    """SUB socket input: whatever arrives, only a well-formed envelope of a matched publisher on our
    topic is delivered; a stranger's is held (bounded) until the record says who it is."""
    subscriber = Subscriber("127.0.0.1:1", "fuzzed")
    known = "127.0.0.1:2000"
    subscriber._reconcile([PublisherEntry(known, known, "127.0.0.1:2001")])
    envelopes = st.builds(Envelope, st.sampled_from(["fuzzed", "fuzzed-other", "x"]),
                          st.sampled_from([known, "127.0.0.1:9"]) | st.text(max_size=12),
                          st.integers(min_value=1, max_value=2**64 - 1), st.integers(min_value=0, max_value=2**63),
                          st.binary(max_size=30)).map(lambda e: [e.topic.encode(), e.encode()])
    frames = envelopes | st.lists(st.binary(max_size=40) | values.map(_pack), max_size=4)
    try:
        def check(message: list[bytes]) -> None:
            before = subscriber.stats.received
            subscriber.on_message(message)
            try:
                env = Envelope.decode(message[1]) if len(message) == 2 else None
            except EnvelopeError:
                env = None
            delivered = subscriber.stats.received - before
            assert delivered <= 1
            if delivered:
                assert env is not None and env.topic == "fuzzed" and env.publisher == known
            assert known not in subscriber.pending  # a matched publisher's messages are never held
            assert subscriber._pending_count <= PENDING_LIMIT

        fuzz(examples, frames, check)
    finally:
        subscriber.close(unregister=False)
