"""The lookup step's own lane through a node process's server: a plain `next_hop` request answered in
one function, from the position's precomputed table (dht/hop_table.py), with the very bytes the
general path (dht/rpc_server.py: schema check, dispatch, reply encoding) would send.

An iterative lookup is h + 1 round trips, each to a process that was idle, so a hop's cost is mostly
what its request touches while the process's caches are cold: every function and object on its way.
Measured on this project's two-core machine, 32 processes each asked at random: the general path cost
0.3-0.4x of a raw round trip more than the least Python request path, this lane about 0.1x.

Only the common case takes the lane: a next_hop with its key as an integer on the ring, nothing to
avoid, and at most a valid position index; anything else (and anything malformed) returns None and
goes the general way, which checks it, answers it, or says why not. A property test sends both ways
the same frames and compares the bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgpack

from dht.hop_reply import reply_bytes
from dht.wire import MAX_MESSAGE_BYTES, VERSION

if TYPE_CHECKING:
    from dht.node import ChordNode

_FIELDS = 4  # v, op, id, key_id


class HopLane:
    """`lane(frame) -> reply frame | None` for a process's positions, counting what it answers as the
    general path does (dht/host.py `_tally_served`: a position's bytes in and out, its lookup steps)."""

    def __init__(self, positions: Sequence[ChordNode]) -> None:
        self.positions = positions
        self.size = 1 << positions[0].config.bits

    def __call__(self, frame: bytes) -> bytes | None:
        if len(frame) > MAX_MESSAGE_BYTES:
            return None
        try:
            body = msgpack.unpackb(frame, raw=False, strict_map_key=True)
        except Exception:  # the general path says what is wrong with it
            return None
        if type(body) is not dict or body.get("op") != "next_hop" or body.get("v") != VERSION:
            return None
        rid, k = body.get("id"), body.get("key_id")
        if type(rid) is not int or type(k) is not int or not 0 <= k < self.size:
            return None
        at = 0
        if len(body) != _FIELDS:
            at = body.get("at")
            if len(body) != _FIELDS + 1 or type(at) is not int or not 0 < at < len(self.positions):
                return None
        position = self.positions[at]
        # the table is checked without the position's lock: only a stale one needs it, to be rebuilt
        # from one moment's fingers and successors (an answer from the table of a moment ago is one
        # the request could have had a moment earlier)
        table, routing = position.hops, position.routing
        if table.fingers != routing.fingers or table.successors != routing.successors:
            with position.lock:
                table = position.hop_table()
        answer = table.next_hop(k)
        if answer is None:
            return None
        done, peer = answer
        reply = reply_bytes(rid, done, peer)
        # counters the server thread alone writes
        position.steps_in_lane += 1
        position.bytes_in += len(frame)
        position.replies_bytes += len(reply)
        return reply
