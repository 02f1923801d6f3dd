"""Malformed frames sent to a live node get error replies or are dropped; the node keeps serving."""

from __future__ import annotations

import random

import msgpack
import zmq

from chordpub.launcher import wait_for
from dht import wire
from dht.client import DhtClient


def state(client: DhtClient, endpoint: str) -> tuple:
    info = client.info(endpoint)
    return (info["id"], info["predecessor"], tuple(s["id"] for s in info["successors"]), info["stored"])


def test_garbage_never_changes_state_or_stops_the_node(ring_factory):
    ring = ring_factory()
    ring.start(3)
    ring.wait_consistent(timeout=30, fingers=True)
    target = ring.nodes[1].endpoint
    with DhtClient(ring.nodes[0].endpoint) as client:
        client.put("precious", b"v1")
        # all three copies in place first, so that nothing legitimate changes during the test
        wait_for(lambda: sum(client.info(n.endpoint)["stored"] for n in ring.nodes) == 3, timeout=10,
                 what="the key on all three nodes")
        before = state(client, target)
        ctx = zmq.Context.instance()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(wire.zmq_address(target))
        rng = random.Random(5)
        cases = [rng.randbytes(rng.randint(0, 200)) for _ in range(200)]
        cases += [
            msgpack.packb({"v": 1, "op": "put", "id": 1, "key": 5, "value": b"x"}),  # wrong type
            msgpack.packb({"v": 1, "op": "put", "id": 2, "key": "precious", "value": None}),
            msgpack.packb({"v": 1, "op": "notify", "id": 3, "peer": {"id": "x", "endpoint": "a:1"}}),
            msgpack.packb({"v": 1, "op": "replicate", "id": 4, "entries": [["precious", 7, 1, False]]}),
            msgpack.packb({"v": 1, "op": "self_destruct", "id": 5}),
            msgpack.packb({"v": 1, "op": "leaving", "id": 6, "peer": {"id": 1, "endpoint": "bad"}}),
            msgpack.packb({"v": 1, "op": "delete", "id": 7, "key": ["precious"]}),
            msgpack.packb({"v": 1, "op": "next_hop", "id": 8, "key_id": "9" * 60}),
            msgpack.packb({"v": 1, "op": "next_hop", "id": 9, "key_id": str(2**100)}),  # > 2**64 ring
            msgpack.packb({"v": 1, "op": "notify", "id": 10, "peer": {"id": -1, "endpoint": "h:1"}}),
        ]
        errors = 0
        for body in cases:
            sock.send_multipart([b"", body])
            if sock.poll(2000):
                reply = wire.decode_reply(sock.recv_multipart()[-1])
                assert reply["ok"] is False and reply["err"]
                errors += 1
        assert errors >= len(cases) - 5  # a few random byte strings are dropped (no routable reply)
        # a multi-frame message and an oversize frame: dropped or refused, never fatal
        sock.send_multipart([b"", b"a", b"b"])
        assert sock.poll(2000) and not wire.decode_reply(sock.recv_multipart()[-1])["ok"]
        sock.send_multipart([b"", b"\x00" * (wire.MAX_MESSAGE_BYTES + 10)])
        sock.close()
        assert state(client, target) == before
        assert client.get("precious") == b"v1"
        assert client.ping(target)
        assert all(n.alive() for n in ring.nodes)
