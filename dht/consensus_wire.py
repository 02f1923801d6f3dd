"""The consensus socket's requests (dht/consensus_service.py), checked before anything is touched:
peers' "raft" batches, clients' "cmd", and "state". docs/contracts.md has them whole."""

from __future__ import annotations

from typing import Any

from dht import wire
from dht.arcs import ARCS

MAX_MESSAGES = 4096  # Raft messages in one "raft" request at most


def _member(value: Any, what: str) -> str:  # noqa: ANN401 - anything the network brings
    if not isinstance(value, str) or not 0 < len(value) <= wire.MAX_FIELD_CHARS or "#" not in value:
        raise wire.WireError(f"{what} must be a member id host:port#incarnation")
    return value


def arc_field(value: Any, what: str) -> int:  # noqa: ANN401
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < ARCS:
        raise wire.WireError(f"{what} must be an arc in 0..{ARCS - 1}")
    return value


def _list(value: Any, what: str) -> list:  # noqa: ANN401
    if not isinstance(value, list) or len(value) > MAX_MESSAGES:
        raise wire.WireError(f"{what} must be a list of at most {MAX_MESSAGES}")
    return value


def _map(value: Any, what: str) -> dict:  # noqa: ANN401
    if not isinstance(value, dict):
        raise wire.WireError(f"{what} must be a map")
    return value


SCHEMAS: wire.Schemas = {
    "raft": {"src": (_member, True), "g": (_member, True), "m": (_list, True), "q": (_list, False)},
    "cmd": {"arc": (arc_field, True), "cmd": (_map, True)},
    "state": {},
}


def endpoint_of(member: str) -> str:
    """The consensus endpoint ("host:port") of member id "host:port#incarnation"."""
    return member.partition("#")[0]


def batches(items: list, limit: int) -> list[list]:
    """A peer's messages in requests under `limit` bytes each (a frame over the wire's 1 MiB is dropped):
    an append carries up to 256 KiB of entries, a snapshot chunk 256 KiB."""
    out: list[list] = [[]]
    size = 0
    for item in items:
        body = item[1]
        n = 200 + sum(len(e[2]) + 64 for e in body.get("entries", ())) + len(body.get("data", b""))
        if out[-1] and size + n > limit:
            out.append([])
            size = 0
        out[-1].append(item)
        size += n
    return out
