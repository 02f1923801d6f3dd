"""A next_hop reply's bytes, packed ahead: the peers a position's table names (dht/hop_table.py) carry
the part of the reply that follows the request's id, so the lookup step's lane (dht/hop_lane.py)
joins three byte strings where packing the reply per request cost a cold process 5-6 us of a step.
The bytes are msgpack's for {"v", "id", "ok", "done", "peer"} in that order, as the general path
(dht/rpc_server.py, `wire.encode_reply`) packs the same answer: a property test compares them."""

from __future__ import annotations

import msgpack

from dht import wire
from dht.routing import Peer

_HEAD = b"\x85" + msgpack.packb("v") + msgpack.packb(wire.VERSION) + msgpack.packb("id")


class LanePeer(dict):
    """A peer as the wire encodes it (a map of id and endpoint, which msgpack packs as any map), with
    `replies[done]`: the rest of a next_hop reply that names it."""

    __slots__ = ("replies",)


def encode_peer(peer: Peer | None) -> LanePeer | None:
    """`wire.encode_peer`, with the reply's tail packed once."""
    encoded = wire.encode_peer(peer)
    if encoded is None:
        return None
    out = LanePeer(encoded)
    tail = msgpack.packb("peer") + msgpack.packb(encoded, use_bin_type=True)
    out.replies = tuple(msgpack.packb("ok") + msgpack.packb(True) + msgpack.packb("done") + msgpack.packb(done)
                        + tail for done in (False, True))
    return out


def reply_bytes(rid: int, done: bool, peer: LanePeer) -> bytes:
    """The reply to next_hop request `rid`: (done, peer), as `wire.encode_reply` packs it."""
    return _HEAD + msgpack.packb(rid) + peer.replies[done]
