"""Property-based fuzzing (hypothesis) of wire decoding and of every socket kind's input.

Inputs are raw bytes, msgpack of any shape, and requests that are almost right (a real op, fields
of any type, out-of-range ids). For each: no exception escapes, an error reply is never the
handler's "internal error" (a bug), and when the reply is an error the handler's state is exactly
what it was. The sockets: a node's ROUTER; a client's service ROUTER (history, repair, probes),
its SUB sockets (envelopes of any shape) and its registrar's events SUB (record changes of any
shape). 300 inputs per socket kind by default; 10^4 under the `slow` marker (`make test` runs
both), every one of them through the wire decoder first: a quarter drawn by hypothesis, each followed
by three mutants of it (tests/helpers/mutate.py).
"""

from __future__ import annotations

import copy
import random

import msgpack
import pytest
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from dht import wire
from dht.host import ChordHost
from dht.node_config import NodeConfig
from pubsub.delivery import Subscription
from pubsub.directory import PUB, PublisherEntry
from pubsub.dispatch import GroupTerms
from pubsub.envelope import (
    DISPATCH_PREFIX,
    Envelope,
    EnvelopeError,
    Run,
    decode_dispatch,
    decode_frame,
    encode_dispatch,
    encode_run,
)
from pubsub.member import GroupMembership
from pubsub.publication import Publication
from pubsub.registration import Registration
from pubsub.service import SERVICE_SCHEMAS
from pubsub.subscription import STRANGER_LIMIT, TopicState
from tests.helpers.mutate import mutant

# the full size takes minutes of CPU, more when the suite's other workers compute too: a longer timeout
SIZES = [pytest.param(300, id="300"),
         pytest.param(10_000, id="10k", marks=[pytest.mark.slow, pytest.mark.timeout(900)])]

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
    items = st.lists(st.fixed_dictionaries({"k": st.text(max_size=8) | values},
                                           optional={"f": st.text(max_size=8) | values,
                                                     "op": st.sampled_from(["set", "renew", "del", "x"]) | values,
                                                     "val": st.binary(max_size=8) | values,
                                                     "ttl": st.floats(min_value=-1, max_value=1e6) | values,
                                                     "read": st.text(max_size=4) | values,
                                                     "epoch": st.text(max_size=4) | values,
                                                     "count": st.text(max_size=4) | values}), max_size=4)
    plausible = {"key_id": ids, "peer": peers, "predecessor": peers | st.none(), "successors": st.lists(peers),
                 "ttl": st.floats(min_value=-1, max_value=1e6) | values, "count": ids | values,
                 "from": ids | values, "to": ids | values | st.none(), "items": items | values,
                 "at": st.integers(min_value=0, max_value=3) | values}
    stray = st.dictionaries(st.sampled_from(fields), values, max_size=1)

    def body_of(op: str) -> st.SearchStrategy[dict]:
        """The op's own fields, each maybe present and of any type, and maybe a field of another op."""
        own = schemas.get(op, {})
        return st.tuples(st.fixed_dictionaries(
            {"v": st.sampled_from([1, 1, 1, 2]) | values, "op": st.just(op) | values, "id": ids | values},
            optional={f: plausible.get(f, values) | values for f in own}), stray).map(lambda t: {**t[1], **t[0]})

    # one op's fields at a time, each op's strategy built once (a flatmap would build, and hypothesis
    # validate, new strategies at every draw: most of the CPU this test took)
    body = st.one_of([body_of(op) for op in [*schemas, "bogus"]])
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


BATCH = 8  # inputs drawn together by one hypothesis example
MUTANTS = 3  # mutants checked beside each drawn input (tests/helpers/mutate.py)


def fuzz(inputs: int, strategy, check) -> None:  # noqa: ANN001
    """`check` at least `inputs` inputs: BATCH values drawn from `strategy` an example (hypothesis's own
    cost is mostly per example), each followed by MUTANTS mutants of it (one change in its msgpack
    tree, bytes or frames: a near neighbour a fresh draw rarely hits, at a tiny fraction of a draw's
    CPU, which is most of what these tests cost). A failing batch still shrinks; the failing mutant is
    printed beside the input it came from."""
    per_example = BATCH * (1 + MUTANTS)

    @settings(max_examples=max(-(-inputs // per_example), 1), deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
    @given(st.lists(strategy, min_size=BATCH, max_size=BATCH), st.integers(min_value=0, max_value=2**32 - 1))
    def run(values, seed: int) -> None:  # noqa: ANN001
        rnd = random.Random(seed)
        for value in values:
            check(value)
            for _ in range(MUTANTS):
                changed = mutant(value, rnd)
                try:
                    check(changed)
                except BaseException:
                    note(f"the failing input is a mutant of {value!r}: {changed!r}")
                    raise

    run()


def replied_error(reply: list[bytes] | None) -> bool:
    if reply is None:
        return True  # dropped: nothing could be answered
    body = wire.decode_reply(reply[-1])
    assert body.get("err") != "internal error", body
    return not body["ok"]


@pytest.mark.parametrize("schemas", [wire.SCHEMAS, SERVICE_SCHEMAS], ids=["ring", "service"])
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


def runs(topics: list[str] | None = None, publishers: list[str] | None = None) -> st.SearchStrategy[bytes]:
    """Coalesced frames (pubsub/envelope.py): well formed, and with one part made wrong."""
    def run(topic: str, publisher: str, seq: int, times: list[int], payloads: list[bytes]) -> bytes:
        pairs = zip(times, payloads, strict=False)
        return encode_run([Envelope(topic, publisher, seq + i, t, p) for i, (t, p) in enumerate(pairs)])

    names = st.text(max_size=6)
    good = st.builds(run, st.sampled_from(topics) if topics else names,
                     st.sampled_from(publishers) if publishers else names,
                     st.integers(min_value=0, max_value=2**62),
                     st.lists(st.integers(min_value=0, max_value=2**63), min_size=2, max_size=5),
                     st.lists(st.binary(max_size=8), min_size=2, max_size=5))
    times = st.lists(st.integers(min_value=-1, max_value=9), max_size=4) | st.integers()
    payloads = st.lists(st.binary(max_size=3) | st.text(max_size=3), max_size=4)
    bent = st.builds(lambda seq, t, p: _pack([1, "fuzzed", "127.0.0.1:2000", seq, t, p]),
                     st.integers(min_value=-2, max_value=3), times, payloads)
    return good | bent


@pytest.mark.parametrize("examples", SIZES)
def test_envelopes_decode_or_raise_envelope_error(examples):
    def check(raw: bytes) -> None:
        try:
            frame = decode_frame(raw)
        except EnvelopeError:
            with pytest.raises(EnvelopeError):
                Envelope.decode(raw)  # a plain envelope is a frame: what the frame refuses, so does it
            return
        if isinstance(frame, Run):
            assert decode_frame(encode_run(frame.envelopes())) == frame
        else:
            assert Envelope.decode(raw) == frame and Envelope.decode(frame.encode()) == frame

    fuzz(examples, st.binary(max_size=120) | values.map(_pack) | runs(), check)


def node_state(host: ChordHost) -> tuple:
    state = []
    for node in host.positions:
        with node.lock:
            info = node.info()
            del info["load"]["time"]  # the clock its load was read at: not state
            state.append((copy.deepcopy(node.store._entries), info))
    return tuple(state), host.jobs.qsize(), host.stopped.is_set()


@pytest.mark.parametrize("examples", SIZES)
def test_the_node_handler_changes_nothing_when_it_refuses(examples):
    """A process of two ring positions: requests for either (`at`), or for one it does not hold."""
    host = ChordHost(NodeConfig(host="127.0.0.1", port=0, bits=16, vnodes=2))
    try:
        def check(frames: list[bytes]) -> None:
            before = node_state(host)
            if replied_error(host.server.handle_frames(frames)):
                assert node_state(host) == before

        fuzz(examples, frame_lists(wire.SCHEMAS), check)
    finally:
        host.close()


@pytest.mark.parametrize("examples", SIZES)
def test_the_client_service_handler_changes_nothing(examples, parts):
    pub = Publication("fuzzed", parts.io.id, history_size=10)
    parts.publishing.add(pub)
    for i in range(5):
        parts.publishing.publish("fuzzed", bytes([i]))
    before = [e.encode() for e in pub.history.range(1, None, limit=100)]

    groups = parts.publishing.groups

    def group_state() -> str:
        return repr((groups.stats("fuzzed"), sorted(groups.filters), pub.history.acked))

    def check(frames: list[bytes]) -> None:
        groups_before = group_state()
        if replied_error(parts.io.service.server.handle_frames(frames)):
            assert group_state() == groups_before, "a refused group request changed the groups"
        assert [e.encode() for e in pub.history.range(1, None, limit=100)] == before

    fuzz(examples, frame_lists(SERVICE_SCHEMAS), check)


@pytest.mark.parametrize("examples", SIZES)
def test_dispatch_frames_decode_or_raise_and_a_member_takes_only_its_own(examples, parts):
    """SUB socket input of a consumer-group member: whatever arrives, only a well-formed dispatch frame
    for its topic, group and member id is delivered, with its delivery count; nothing raises."""
    me = parts.io.id
    state = GroupMembership("fuzzed", "g", me, 10, GroupTerms(), auto_ack=True)
    parts.io.members.states["fuzzed"] = state
    parts.io.members.handles["fuzzed"] = Subscription("fuzzed", state, lambda _t: None)
    good = st.builds(Envelope, st.sampled_from(["fuzzed", "other"]), st.text(max_size=8),
                     st.integers(min_value=0, max_value=2**64 - 1), st.integers(min_value=0, max_value=2**63),
                     st.binary(max_size=20), st.none() | st.text(max_size=5), st.integers(-1, 10))
    frames = (st.tuples(good, st.sampled_from(["g", "h"]), st.sampled_from([me, "someone"]), st.integers(-1, 6),
                        st.integers(-1, 6)).map(lambda t: _pack([2, f"{t[0].topic}\x00{t[1]}\x00{t[2]}",
                                                                 t[0].publisher, t[0].seq, t[0].sent_ns, t[0].payload,
                                                                 t[3], t[4], t[0].key, t[0].priority]))
              | st.binary(max_size=60).map(lambda b: DISPATCH_PREFIX + b) | values.map(_pack))

    def check(frame: bytes) -> None:
        try:
            d = decode_dispatch(frame)
        except EnvelopeError:
            d = None
        else:
            assert decode_dispatch(encode_dispatch(d.env, d.group, d.member, d.deliveries, d.max_deliver)) == d
        taken = parts.io.members.on_frame(frame, 0, lambda _why: None)
        delivered, state.deliveries = state.deliveries, []
        assert len(delivered) == (taken is not None)
        if delivered:
            (m,) = delivered
            assert d is not None and (d.env.topic, d.group, d.member) == ("fuzzed", "g", me)
            assert m.deliveries == d.deliveries >= 1 and m.redelivered == (d.deliveries > 1)
            m.ack()

    fuzz(examples, frames, check)
    assert state.held == 0


@pytest.mark.parametrize("examples", SIZES)
def test_record_changes_of_any_shape_only_ever_add_real_publishers(examples, parts):
    """The registrar's events input: whatever arrives, the publishers it keeps are well-formed entries
    named by their field, and nothing raises."""
    reg = Registration("fuzzed", "sub/direct/me", b"", watch=True, placed=True)
    parts.registrar.watching["fuzzed"] = reg
    good = PublisherEntry("127.0.0.1:2000", "127.0.0.1:2000", "127.0.0.1:2001")
    entries = st.builds(PublisherEntry, st.sampled_from(["127.0.0.1:2000", "x", "h:1"]),
                        st.sampled_from(["127.0.0.1:2000", "bad"]), st.sampled_from(["127.0.0.1:2001", "h:99999"]),
                        st.none() | st.integers(-5, 5), st.integers(-2, 5), st.sampled_from(["direct", "relay", "x"]))
    sets = st.dictionaries(st.sampled_from([PUB + "127.0.0.1:2000", PUB + "x", "sub/x", "other"]) | st.text(max_size=5),
                           entries.map(lambda e: e.to_bytes()) | st.binary(max_size=10) | values, max_size=3)
    bodies = st.fixed_dictionaries({"k": st.sampled_from(["fuzzed", "other"]) | values,
                                    "epoch": st.integers(0, 20) | st.integers(0, 2**63) | values},
                                   optional={"set": sets | values, "del": st.lists(st.text(max_size=20)) | values,
                                             "prev": st.sampled_from([5, 5, 4]) | values})
    raw = (bodies.map(lambda b: _pack(["fuzzed\x00pub/", b])) | st.tuples(values, values).map(lambda t: _pack(list(t)))
           | st.binary(max_size=60) | values.map(_pack))

    def check(body: bytes) -> None:
        reg.epoch = 5
        parts.registrar.apply_event(body)
        for pid, entry in reg.publishers.items():
            assert pid == entry.id and isinstance(entry, PublisherEntry)
            assert PublisherEntry.from_bytes(entry.to_bytes()) == entry

    reg.publishers = {good.id: good}
    fuzz(examples, raw, check)


@pytest.mark.parametrize("examples", SIZES)
def test_the_client_message_path_delivers_only_real_envelopes_of_its_publishers(examples, parts):
    """SUB socket input: whatever arrives, only a well-formed envelope of a matched publisher on a
    topic we follow is delivered; a stranger's is held (bounded) until the record says who it is.
    Frames are single: a multipart message from a rogue peer is only several frames, each judged alone."""
    state = TopicState("fuzzed", parts.io.id)
    handle = Subscription("fuzzed", state, lambda _t: None)
    parts.io.topics["fuzzed"] = state
    parts.io.handles["fuzzed"] = handle
    known = "127.0.0.1:2000"
    state.reconcile([PublisherEntry(known, known, "127.0.0.1:2001")])
    envelopes = st.builds(Envelope, st.sampled_from(["fuzzed", "fuzzed-other", "x"]),
                          st.sampled_from([known, "127.0.0.1:9"]) | st.text(max_size=12),
                          st.integers(min_value=0, max_value=2**64 - 1), st.integers(min_value=0, max_value=2**63),
                          st.binary(max_size=30)).map(lambda e: e.encode())
    frames = envelopes | st.binary(max_size=40) | values.map(_pack) | runs(["fuzzed", "x"], [known, "127.0.0.1:9"])

    def check(message: bytes) -> None:
        before = state.stats.received
        parts.io.on_frame(message, "direct", 0)
        try:
            frame = decode_frame(message, probes=True)
            envs = frame.envelopes() if isinstance(frame, Run) else [frame]
        except EnvelopeError:
            envs = []
        delivered = len(state.deliveries)
        state.deliveries.clear()
        assert delivered == state.stats.received - before <= len(envs)
        if delivered:
            assert all(e.topic == "fuzzed" and e.publisher == known and e.seq >= 1 for e in envs)
        assert known not in state.strangers  # a matched publisher's messages are never held
        assert sum(map(len, state.strangers.values())) <= STRANGER_LIMIT
        parts.io.on_frame(message, "relay", 0)  # a direct topic takes nothing from the relay socket
        assert not state.deliveries

    fuzz(examples, frames, check)
