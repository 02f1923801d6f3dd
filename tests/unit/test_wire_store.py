"""Wire validation and the store's merge and lease rules, without sockets."""

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dht import wire
from dht.routing import Peer
from dht.rpc_server import RpcServer
from dht.store import Store


def test_request_round_trip_with_a_128_bit_id():
    big = 2**127 + 5
    frame = wire.encode_request("next_hop", 7, key_id=wire.encode_id(big), avoid=["h:1"])
    req = wire.decode_request(frame)
    assert req == {"op": "next_hop", "id": 7, "key_id": big, "avoid": ["h:1"]}
    peer = Peer(big, "127.0.0.1:5")
    assert wire.decode_peer(wire.encode_peer(peer)) == peer


@pytest.mark.parametrize("body,reason", [
    (b"\xc1", "undecodable"),
    (msgpack.packb([1, 2]), "map"),
    (msgpack.packb({"v": 2, "op": "ping", "id": 1}), "version"),
    (msgpack.packb({"v": 1, "op": "ping"}), "request id"),
    (msgpack.packb({"v": 1, "op": "frobnicate", "id": 1}), "unknown op"),
    (msgpack.packb({"v": 1, "op": "next_hop", "id": 1}), "missing"),
    (msgpack.packb({"v": 1, "op": "next_hop", "id": 1, "key_id": -3}), "non-negative"),
    (msgpack.packb({"v": 1, "op": "put", "id": 1, "key": "k", "value": "text"}), "bytes"),
    (msgpack.packb({"v": 1, "op": "notify", "id": 1, "peer": {"id": 1, "endpoint": "nope"}}), "endpoint"),
    (msgpack.packb({"v": 1, "op": "replicate", "id": 1, "entries": [["k", b"v"]]}), "entries"),
    (b"\x00" * (wire.MAX_MESSAGE_BYTES + 1), "limit"),
])
def test_malformed_requests_are_refused_with_a_reason(body, reason):
    with pytest.raises(wire.WireError, match=reason):
        wire.decode_request(body)


@pytest.mark.parametrize("text", ["", "host", "host:", ":80", "h:0", "h:70000", "h:80:1", "tcp://h:80", 5])
def test_bad_endpoints(text):
    with pytest.raises(wire.WireError):
        wire.parse_endpoint(text)


def test_reply_fields_may_not_clobber_the_envelope():
    with pytest.raises(ValueError):
        wire.encode_reply(1, id=5)


class CountingHandler:
    def __init__(self):
        self.calls = 0

    def __call__(self, req):
        self.calls += 1
        return {"pong": True}


def make_server():
    handler = CountingHandler()
    server = RpcServer("127.0.0.1", 0, handler)
    return server, handler


@settings(max_examples=300, deadline=None)
@given(frames=st.lists(st.binary(max_size=64), min_size=0, max_size=5))
def test_server_never_raises_on_arbitrary_frames(frames):
    server, handler = make_server()
    try:
        reply = server.handle_frames(frames)
        if reply is not None:
            body = wire.decode_reply(reply[-1])
            # only a well-formed ping may reach the handler; nothing random does by chance
            assert body["ok"] is (handler.calls == 1)
    finally:
        server.close()


def test_server_answers_each_kind_of_malformed_input():
    server, handler = make_server()
    try:
        ident = b"\x00peer"
        assert server.handle_frames([ident]) is None
        bad = server.handle_frames([ident, b"", b"junk"])
        assert bad[:2] == [ident, b""] and not wire.decode_reply(bad[-1])["ok"]
        unknown = server.handle_frames([ident, wire.encode({"v": 1, "op": "nope", "id": 9})])
        body = wire.decode_reply(unknown[-1])
        assert body["id"] == 9 and "unknown op" in body["err"]
        too_many = server.handle_frames([ident, b"a", b"b", b"c"])
        assert not wire.decode_reply(too_many[-1])["ok"]
        assert handler.calls == 0
        good = server.handle_frames([ident, wire.encode_request("ping", 3)])
        assert wire.decode_reply(good[-1]) == {"v": 1, "id": 3, "ok": True, "pong": True}
    finally:
        server.close()


def test_store_keeps_the_newest_version_and_expires_unowned_replicas():
    s = Store(bits=64)
    assert s.write("a", b"1", version=10, now=0.0)
    assert not s.write("a", b"old", version=5, now=1.0)
    assert s.get("a") == b"1"
    assert s.merge([("a", b"2", 11, False), ("b", b"x", 3, False)], now=2.0) == 2
    assert s.get("a") == b"2"
    s.write("c", None, version=12, now=2.0)  # a tombstone
    assert s.get("c") is None and s.count() == 2
    owned = {s._entries["a"].key_id}
    gone = s.expire(now=100.0, lease=10.0, owns=lambda k: k in owned)
    assert sorted(gone) == ["b", "c"] and s.keys() == ["a"]
