"""Raft's messages (dht/raft.py) on the wire: a msgpack-ready map each, checked whole on the way in.

What arrives from the network is decoded here before `Raft.step` sees it, so a malformed message
is a `WireError` (an error reply, nothing changed) and never an exception inside the state machine:
every field has its type and bound, and an append's entries must follow each other from the index
after `prev_index`, as the log's consistency check assumes.
"""

from __future__ import annotations

from typing import Any

from dht.raft import (
    MAX_APPEND,
    SNAPSHOT_CHUNK,
    Append,
    AppendReply,
    Entry,
    Message,
    Snapshot,
    SnapshotReply,
    TimeoutNow,
    Vote,
    VoteReply,
)
from dht.wire import MAX_FIELD_CHARS, MAX_VALUE_BYTES, WireError

MAX_TERM = (1 << 63) - 1  # terms, indexes and ticks: msgpack integers, never negative
MAX_MEMBERS = 64  # members of one group's configuration


def encode(msg: Message) -> dict:
    """`msg` as a map of msgpack types."""
    head = {"src": msg.src, "dst": msg.dst, "term": msg.term}
    if isinstance(msg, Vote):
        vote = {"k": "vote", **head, "last_index": msg.last_index, "last_term": msg.last_term, "pre": msg.pre}
        if msg.transfer:
            vote["transfer"] = True
        return vote
    if isinstance(msg, TimeoutNow):
        return {"k": "timeout_now", **head}
    if isinstance(msg, VoteReply):
        reply = {"k": "vote_reply", **head, "granted": msg.granted, "pre": msg.pre}
        if msg.removed:
            reply["removed"] = msg.removed
        return reply
    if isinstance(msg, Append):
        return {"k": "append", **head, "prev_index": msg.prev_index, "prev_term": msg.prev_term,
                "entries": [[e.term, e.index, e.data, None if e.members is None else list(e.members)]
                            for e in msg.entries], "commit": msg.commit, "sent": msg.sent}
    if isinstance(msg, Snapshot):
        return {"k": "snapshot", **head, "index": msg.index, "last_term": msg.last_term, "members": list(msg.members),
                "offset": msg.offset, "data": msg.data, "done": msg.done, "sent": msg.sent}
    if isinstance(msg, SnapshotReply):
        return {"k": "snapshot_reply", **head, "index": msg.index, "offset": msg.offset, "sent": msg.sent}
    return {"k": "append_reply", **head, "success": msg.success, "index": msg.index, "sent": msg.sent}


def decode(body: Any) -> Message:  # noqa: ANN401 - anything the network brings
    """The message `body` encodes, or WireError saying what is wrong with it."""
    if not isinstance(body, dict):
        raise WireError(f"a raft message is a map, got {type(body).__name__}")
    kind = body.get("k")
    head = (_member(body, "src"), _member(body, "dst"), _uint(body, "term"))
    if kind == "vote":
        return Vote(*head, _uint(body, "last_index"), _uint(body, "last_term"), _flag(body, "pre"),
                    _flag(body, "transfer"))
    if kind == "timeout_now":
        return TimeoutNow(*head)
    if kind == "vote_reply":
        return VoteReply(*head, _flag(body, "granted"), _flag(body, "pre"),
                         _uint(body, "removed") if "removed" in body else 0)
    if kind == "append":
        prev = _uint(body, "prev_index")
        return Append(*head, prev, _uint(body, "prev_term"), _entries(body.get("entries"), prev),
                      _uint(body, "commit"), _uint(body, "sent"))
    if kind == "append_reply":
        return AppendReply(*head, _flag(body, "success"), _uint(body, "index"), _uint(body, "sent"))
    if kind == "snapshot":
        data = body.get("data")
        if not isinstance(data, bytes) or len(data) > SNAPSHOT_CHUNK:
            raise WireError(f"a snapshot chunk is at most {SNAPSHOT_CHUNK} bytes")
        return Snapshot(*head, _uint(body, "index"), _uint(body, "last_term"), _members(body.get("members")),
                        _uint(body, "offset"), data, _flag(body, "done"), _uint(body, "sent"))
    if kind == "snapshot_reply":
        return SnapshotReply(*head, _uint(body, "index"), _uint(body, "offset"), _uint(body, "sent"))
    raise WireError(f"unknown raft message kind {kind!r}")


def _uint(body: dict, name: str) -> int:
    value = body.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_TERM:
        raise WireError(f"raft field {name!r} must be an integer in 0..{MAX_TERM}, got {value!r}"[:200])
    return value


def _flag(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise WireError(f"raft field {name!r} must be true or false, got {value!r}"[:200])
    return value


def _member(body: dict | list, name: str | int) -> str:
    value = body[name] if isinstance(body, list) else body.get(name)
    if not isinstance(value, str) or not 0 < len(value) <= MAX_FIELD_CHARS:
        raise WireError(f"a raft member is a string of 1..{MAX_FIELD_CHARS} characters, got {value!r}"[:200])
    return value


def _entries(value: Any, prev_index: int) -> tuple[Entry, ...]:  # noqa: ANN401
    if not isinstance(value, list) or len(value) > MAX_APPEND:
        raise WireError(f"raft entries must be a list of at most {MAX_APPEND}")
    out = []
    for i, raw in enumerate(value):
        if not isinstance(raw, list) or len(raw) != 4:
            raise WireError("a raft entry is [term, index, data, members]")
        term, index = _uint({"term": raw[0]}, "term"), _uint({"index": raw[1]}, "index")
        if index != prev_index + 1 + i:
            raise WireError(f"raft entry {i} has index {index}, not {prev_index + 1 + i}: entries follow each other")
        data, members = raw[2], raw[3]
        if not isinstance(data, bytes) or len(data) > MAX_VALUE_BYTES:
            raise WireError(f"a raft entry's data is at most {MAX_VALUE_BYTES} bytes")
        out.append(Entry(term, index, data, None if members is None else _members(members)))
    return tuple(out)


def _members(members: Any) -> tuple[str, ...]:  # noqa: ANN401
    if not isinstance(members, list) or not 0 < len(members) <= MAX_MEMBERS:
        raise WireError(f"a raft configuration names 1..{MAX_MEMBERS} members")
    out = tuple(_member(members, j) for j in range(len(members)))
    if len(set(out)) != len(out):
        raise WireError("a raft configuration names a member twice")
    return out
