"""The wire format of the discovery ring: one place for encoding, decoding and validation.

A message is one msgpack map (never pickle) carried as the last ZeroMQ frame:
requests are ``{"v": 1, "op": str, "id": int, ...fields}``, replies ``{"v": 1, "id": int,
"ok": bool, ...result | "err": str}``. Ids above 2**64 - 1 (msgpack's largest integer) travel
as decimal strings. Every request is checked against the schema of its op before any state is
touched; anything malformed becomes a `WireError`, which the server turns into an error reply.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import msgpack

from dht.ids import MAX_VNODES, process_of
from dht.routing import Peer

VERSION = 1
MAX_MESSAGE_BYTES = 1 << 20  # frames above this are refused (and dropped by ZMQ_MAXMSGSIZE)
MAX_KEY_CHARS = 1024
MAX_VALUE_BYTES = 512 * 1024
MAX_FIELD_CHARS = 256
MAX_LIST = 4096
MAX_ENTRIES = 100_000
MAX_HOPS = 4096  # a unify hint's hops left (dht/prober.py)
MAX_PERIODS = 64  # a stabilize's `every`: periods to the asker's next round (dht/pacing.py allows 8)
_UINT64 = (1 << 64) - 1
_ENDPOINT = re.compile(r"^(?P<host>[A-Za-z0-9._-]{1,253}):(?P<port>[0-9]{1,5})(?:/(?P<at>[1-9][0-9]{0,2}))?$")


class WireError(ValueError):
    """A message that does not follow the protocol; its text is sent back as the error reply."""


# -- endpoints ---------------------------------------------------------------------------------
def parse_endpoint(text: str) -> tuple[str, int]:
    """Split "host:port" into (host, port) or raise WireError with a readable reason. A ring position
    of a process holding several ("host:port/index", dht/ids.py) parses to its process's."""
    if not isinstance(text, str):
        raise WireError(f"an endpoint must be a 'host:port' string, got {type(text).__name__}")
    return _parse_endpoint(text)


@functools.lru_cache(maxsize=4096)  # a lookup sees the same few endpoints over and over
def _parse_endpoint(text: str) -> tuple[str, int]:
    m = _ENDPOINT.match(text)
    if not m:
        raise WireError(f"malformed endpoint {text!r}: expected host:port, e.g. 127.0.0.1:5555")
    port = int(m.group("port"))
    if not 0 < port < 65536:
        raise WireError(f"malformed endpoint {text!r}: port must be in 1..65535")
    if m.group("at") is not None and int(m.group("at")) >= MAX_VNODES:
        raise WireError(f"malformed endpoint {text!r}: a position index must be in 1..{MAX_VNODES - 1}")
    return m.group("host"), port


def zmq_address(endpoint: str) -> str:
    """Where to connect for `endpoint`: its process's socket (every position of a process shares it)."""
    host, port = parse_endpoint(endpoint)
    return f"tcp://{host}:{port}"


def plain_endpoint(text: str) -> str:
    """`text` if it is a process's "host:port" (a service's, a client's), else a WireError."""
    parse_endpoint(text)
    if process_of(text) != text:
        raise WireError(f"malformed endpoint {text!r}: expected host:port, e.g. 127.0.0.1:5555")
    return text


# -- ids and peers ----------------------------------------------------------------------------
def encode_id(value: int) -> int | str:
    return value if value <= _UINT64 else str(value)


def decode_id(value: Any, what: str = "id") -> int:
    if isinstance(value, bool):
        raise WireError(f"{what} must be an integer")
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str) and value.isdigit() and len(value) <= 39:
        return int(value)
    raise WireError(f"{what} must be a non-negative integer")


def encode_peer(peer: Peer | None) -> dict | None:
    return None if peer is None else {"id": encode_id(peer.id), "endpoint": peer.endpoint}


def decode_peer(value: Any, what: str = "peer") -> Peer:
    if not isinstance(value, dict):
        raise WireError(f"{what} must be a map with id and endpoint")
    endpoint = value.get("endpoint")
    parse_endpoint(endpoint)
    return Peer(decode_id(value.get("id"), f"{what}.id"), endpoint)


def decode_optional_peer(value: Any, what: str = "peer") -> Peer | None:
    return None if value is None else decode_peer(value, what)


def decode_peers(value: Any, what: str = "peers") -> list[Peer]:
    if not isinstance(value, list) or len(value) > MAX_LIST:
        raise WireError(f"{what} must be a list of at most {MAX_LIST} peers")
    return [decode_peer(v, what) for v in value]


# -- field checkers (each returns the Python value or raises WireError) ---------------------------
def _str(max_len: int) -> Callable[[Any, str], str]:
    def check(value: Any, what: str) -> str:
        if not isinstance(value, str) or len(value) > max_len:
            raise WireError(f"{what} must be a string of at most {max_len} characters")
        return value

    return check


def _key(value: Any, what: str) -> str:
    """A key of the ring: a string without NUL (which joins a record's key to a field's name)."""
    _str(MAX_KEY_CHARS)(value, what)
    if "\x00" in value:
        raise WireError(f"{what} may not contain NUL characters")
    return value


MAX_ITEMS = 4096
RECORD_OPS = ("set", "renew", "del")


def _record_items(value: Any, what: str) -> list[dict]:
    """The items of a `records` request (dht/records.py): each names a record "k" and may write one
    field "f" ("op": set with "val" and "ttl", renew with an optional "ttl", del) and read ("read":
    prefix -> fields and epoch, "epoch": namespace, "count": prefix, "names": prefix -> names)."""
    if not isinstance(value, list) or not 0 < len(value) <= MAX_ITEMS:
        raise WireError(f"{what} must be a list of 1..{MAX_ITEMS} items")
    out = []
    for i, item in enumerate(value):
        where = f"{what}[{i}]"
        if not isinstance(item, dict):
            raise WireError(f"{where} must be a map")
        unknown = set(item) - {"k", "f", "op", "val", "ttl", "read", "after", "epoch", "count", "names"}
        if unknown:
            raise WireError(f"{where}: unknown fields {sorted(map(str, unknown))}")
        clean: dict[str, Any] = {"k": _key(item.get("k"), f"{where}.k")}
        if "f" in item:
            clean["f"] = _str(MAX_FIELD_CHARS)(item["f"], f"{where}.f")
        op = item.get("op")
        if op is not None:
            if op not in RECORD_OPS or "f" not in clean:
                raise WireError(f"{where}.op must be one of {', '.join(RECORD_OPS)}, with a field name")
            clean["op"] = op
            if op == "set":
                clean["val"] = _bytes(item.get("val"), f"{where}.val")
                clean["ttl"] = _ttl(item.get("ttl"), f"{where}.ttl")
            elif op == "renew" and "ttl" in item:
                clean["ttl"] = _ttl(item["ttl"], f"{where}.ttl")
        for name in ("read", "after", "epoch", "count", "names"):
            if name in item:
                clean[name] = _str(MAX_FIELD_CHARS)(item[name], f"{where}.{name}")
        out.append(clean)
    return out


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise WireError(f"{what} must be true or false")
    return value


def _optional_bytes(value: Any, what: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    raise WireError(f"{what} must be bytes or nil")


def _bytes(value: Any, what: str) -> bytes:
    if not isinstance(value, bytes) or len(value) > MAX_VALUE_BYTES:
        raise WireError(f"{what} must be bytes of at most {MAX_VALUE_BYTES}")
    return value


def _endpoints(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_LIST:
        raise WireError(f"{what} must be a list of at most {MAX_LIST} endpoints")
    for v in value:
        parse_endpoint(v)
    return value


def _entries(value: Any, what: str) -> list[tuple[str, bytes | None, int, bool]]:
    """Store entries as [key, value-or-nil (a tombstone), version, is-record]."""
    if not isinstance(value, list) or len(value) > MAX_ENTRIES:
        raise WireError(f"{what} must be a list of at most {MAX_ENTRIES} entries")
    out = []
    for item in value:
        if not isinstance(item, list) or len(item) != 4 or not isinstance(item[3], bool):
            raise WireError(f"each of {what} must be [key, value, version, is_record]")
        key = _str(MAX_KEY_CHARS)(item[0], f"{what}.key")
        val = _optional_bytes(item[1], f"{what}.value")
        version = decode_id(item[2], f"{what}.version")
        out.append((key, val, version, item[3]))
    return out


MAX_NAMES_LISTED = 1000


def _names_wanted(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_NAMES_LISTED:
        raise WireError(f"{what} must be an integer in [0, {MAX_NAMES_LISTED}]")
    return value


def _ttl(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 86_400:
        raise WireError(f"{what} must be a number of seconds in (0, 86400]")
    return float(value)


def _hops(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_HOPS:
        raise WireError(f"{what} must be an integer in [0, {MAX_HOPS}]")
    return value


def _periods(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PERIODS:
        raise WireError(f"{what} must be an integer in [1, {MAX_PERIODS}]")
    return value


def _endpoint(value: Any, what: str) -> str:
    parse_endpoint(value)
    return value


_id = decode_id
_peer = decode_peer
_peers = decode_peers

# field checkers for other sockets' schemas (pubsub's repair and notify endpoints)
string = _str
uint = decode_id
blob = _bytes
boolean = _bool
seconds = _ttl


def optional(check: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    return lambda value, what: None if value is None else check(value, what)


def _position(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < MAX_VNODES:
        raise WireError(f"{what} must be a position index in 1..{MAX_VNODES - 1}")
    return value

# op -> {field: (checker, required)}
SCHEMAS: dict[str, dict[str, tuple[Callable[[Any, str], Any], bool]]] = {
    "ping": {},
    "info": {"topics": (_names_wanted, False)},  # topics: how many owned record keys to list
    "next_hop": {"key_id": (_id, True), "avoid": (_endpoints, False)},
    # stabilize: predecessor and successor list in one round trip; `peer`, the asker, tells a node its
    # predecessor is alive (it then pings it only when it has not asked for a while); `from`/`to`, a
    # `refresh` of the asker's replicas carried along when the successor holds them
    # (`every`: the asker's periods to its next round, at most: dht/pacing.py)
    "get_links": {"peer": (_peer, False), "from": (_id, False), "to": (_id, False), "every": (_periods, False)},
    "notify": {"peer": (_peer, True)},
    # a node that joined tells those whose finger intervals it may now begin (update_others)
    "joined": {"peer": (_peer, True)},
    "put": {"key": (_key, True), "value": (_bytes, True)},
    "get": {"key": (_key, True)},
    "delete": {"key": (_key, True)},
    "replicate": {"entries": (_entries, True)},
    "handover": {"entries": (_entries, True)},
    "leaving": {"peer": (_peer, True), "predecessor": (decode_optional_peer, False),
                "successors": (_peers, False)},
    "leave": {},
    # leased records (dht/records.py): many fields of many records owned by the node, in one request
    "records": {"items": (_record_items, True), "about": (_bool, False), "replicated": (_bool, False)},
    # the owner of the arc (from, to] still holds its entries: replica leases there start again
    "refresh": {"from": (_id, True), "to": (_id, True)},
    # anti-entropy: does the receiver hold the arc (from, to] as the owner does (dht/store.py entries_digest)?
    "digest": {"from": (_id, True), "to": (_id, True), "digest": (_bytes, True)},
    # ring unification (dht/prober.py): `peer` is in another ring than ours, or was; `hops` left to pass on
    "unify": {"peer": (_peer, True), "hops": (_hops, True)},
}
# every op may name the position of the receiving process it is for ("host:port/at"; none: position 0)
AT = "at"
for _schema in SCHEMAS.values():
    _schema[AT] = (_position, False)


def encode(message: dict) -> bytes:
    return msgpack.packb(message, use_bin_type=True)


def decode_map(frame: bytes) -> dict:
    """Decode one frame into a map with string keys and the right protocol version."""
    if not isinstance(frame, bytes | bytearray | memoryview):
        raise WireError("frame must be bytes")
    if len(frame) > MAX_MESSAGE_BYTES:
        raise WireError(f"message of {len(frame)} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit")
    try:
        body = msgpack.unpackb(bytes(frame), raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise WireError(f"undecodable body: {type(exc).__name__}") from None
    if not isinstance(body, dict):
        raise WireError("body must be a msgpack map")
    if body.get("v") != VERSION:
        raise WireError(f"unsupported protocol version {body.get('v')!r} (expected {VERSION})")
    return body


def request_id(body: dict) -> int | None:
    rid = body.get("id")
    return rid if isinstance(rid, int) and not isinstance(rid, bool) else None


Schemas = dict[str, dict[str, tuple[Callable[[Any, str], Any], bool]]]


def decode_request(frame: bytes, schemas: Schemas | None = None) -> dict:
    """A validated request: {"op", "id", field: python value ...}. Raises WireError.

    `schemas` is the ring's protocol by default; other sockets (a subscriber's notify endpoint,
    a publisher's repair endpoint) pass their own, and share this one validator.
    """
    schemas = SCHEMAS if schemas is None else schemas
    body = decode_map(frame)
    rid = request_id(body)
    if rid is None:
        raise WireError("request id must be an integer")
    op = body.get("op")
    if not isinstance(op, str) or op not in schemas:
        raise WireError(f"unknown op {op!r}")
    out: dict[str, Any] = {"op": op, "id": rid}
    for field, (check, required) in schemas[op].items():
        if field not in body:
            if required:
                raise WireError(f"{op}: missing field {field!r}")
            continue
        out[field] = check(body[field], field)
    return out


def encode_request(op: str, rid: int, **fields: Any) -> bytes:
    return encode({"v": VERSION, "op": op, "id": rid, **fields})


RESERVED = frozenset({"v", "id", "ok", "err", "op"})


def encode_reply(rid: int | None, **fields: Any) -> bytes:
    clash = RESERVED.intersection(fields)
    if clash:
        raise ValueError(f"reply fields {sorted(clash)} are reserved by the envelope")
    return encode({"v": VERSION, "id": rid, "ok": True, **fields})


def encode_error(rid: int | None, err: str) -> bytes:
    return encode({"v": VERSION, "id": rid, "ok": False, "err": err})


def decode_reply(frame: bytes) -> dict:
    body = decode_map(frame)
    if not isinstance(body.get("ok"), bool):
        raise WireError("reply without a boolean 'ok'")
    if not body["ok"] and not isinstance(body.get("err"), str):
        raise WireError("error reply without an 'err' string")
    return body
