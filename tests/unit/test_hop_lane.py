"""A node's lane for lookup steps (dht/hop_lane.py) sends, for any frame, the very bytes the general
path would, or leaves the frame to it; and it answers every plain next_hop itself, at any position of
the process. To see it fail, let the lane take requests with more fields than a plain one
(`if len(body) != _FIELDS:` made `if False:`: a step that avoids nodes, or asks another position,
answered as a plain one), or unwire it (`self.server.lane = HopLane(self.positions)` made
`self.server.lane = None`)."""

from __future__ import annotations

import random

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dht.host import ChordHost
from dht.node_config import NodeConfig
from dht.routing import Peer

BITS = 16
ABSENT = object()


@pytest.fixture(scope="module")
def host():
    h = ChordHost(NodeConfig(host="127.0.0.1", port=0, bits=BITS, vnodes=2))
    rng = random.Random(3)
    for p in h.positions:
        peers = [Peer(rng.getrandbits(BITS), f"127.0.0.1:{2000 + i}") for i in range(12)]
        p.routing.successors = sorted(peers, key=lambda q: (q.id - p.me.id) % 2**BITS)[:4]
        p.routing.fingers = [rng.choice([None, *peers]) for _ in range(BITS)]
    yield h
    h.close()


def field(*values: object) -> st.SearchStrategy:
    return st.sampled_from([ABSENT, *values])


bodies = st.fixed_dictionaries({
    "v": field(1, True, 2, None, "1"),
    "op": field("next_hop", "ping", "get", 7),
    "id": st.one_of(field(None, True, "3", -1), st.integers(0, 2**40)),
    "key_id": st.one_of(field(None, False, "12", -5, 2**BITS, 2**64 - 1), st.integers(0, 2**BITS - 1)),
    "at": field(0, 1, 2, True, -1, "1", None),
    "avoid": field([], ["127.0.0.1:2001"], "x"),
    "extra": field(1),
}).map(lambda d: {k: v for k, v in d.items() if v is not ABSENT})
plain_steps = st.fixed_dictionaries(  # what the lane answers (about one body in 600 above is one)
    {"v": st.just(1), "op": st.just("next_hop"), "id": st.integers(0, 2**64 - 1),
     "key_id": st.integers(0, 2**BITS - 1)}, optional={"at": st.just(1)})


@settings(max_examples=600, deadline=None)
@given(body=st.one_of(bodies, plain_steps))
def test_the_lane_sends_what_the_general_path_sends_or_leaves_it_the_frame(host, body):
    frame = msgpack.packb(body, use_bin_type=True)
    answered = host.server.lane(frame)
    if answered is not None:
        assert answered == host.server.handle_frames([b"peer", frame])[1]


@given(frame=st.binary(max_size=64))
def test_garbage_is_left_to_the_general_path(host, frame):
    if host.server.lane(frame) is not None:
        assert host.server.lane(frame) == host.server.handle_frames([b"peer", frame])[1]


def test_every_plain_step_takes_the_lane_at_any_position(host):
    rng = random.Random(5)
    before = [p.steps_in_lane for p in host.positions]
    for i in range(200):
        body = {"v": 1, "op": "next_hop", "id": i << (i % 5 * 12), "key_id": rng.getrandbits(BITS)}  # 1-9 bytes
        if i % 2:
            body["at"] = 1
        frame = msgpack.packb(body)
        assert host.server.lane(frame) == host.server.handle_frames([b"peer", frame])[1]
    assert [p.steps_in_lane - b for p, b in zip(host.positions, before, strict=True)] == [100, 100]
