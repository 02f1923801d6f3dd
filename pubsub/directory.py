"""The topic registry, on the ring: who publishes and who subscribes to a topic.

The record at `key_id(topic)`'s owner (dht/records.py; replicated like every key) holds one leased
field per publishing client ("pub/<id>": PUB endpoint, service endpoint for history and repair,
strength, offered history, mode) and per subscribing client ("sub/<mode>/<id>"). Each lease lasts three
heartbeats and every heartbeat renews it (pubsub/registrar.py, one request per owner node for all
of a client's topics), so a client that dies vanishes within a lease. Subscribers watch the "pub/"
namespace of the record on the owner's events socket and never see each other.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

import msgpack

from dht import wire
from dht.client import DhtClient, DhtError
from dht.ids import key_id

log = logging.getLogger(__name__)

PUB = "pub/"
SUB = "sub/"
LEASE_HEARTBEATS = 3


def subscriber_field(mode: str, client_id: str) -> str:
    """A subscriber's field: by mode, so that an owner counts a publisher's subscribers in one step."""
    return f"{SUB}{mode}/{client_id}"


@dataclass(frozen=True)
class PublisherEntry:
    id: str
    endpoint: str  # its PUB socket
    repair: str  # its history/repair ROUTER
    strength: int | None = None  # set on an exclusive topic: only the strongest is delivered
    history: int = 0  # messages it offers to late joiners and for repair
    mode: str = "direct"
    retain: dict | None = None  # its retention bounds (messages, seconds, bytes)
    archive: bool = False  # the topic's owner keeps a copy of its messages

    def to_bytes(self) -> bytes:
        return msgpack.packb(asdict(self), use_bin_type=True)

    @classmethod
    def from_bytes(cls, raw: bytes) -> PublisherEntry:
        try:
            d = msgpack.unpackb(raw, raw=False)
            retain = d.get("retain")
            entry = cls(str(d["id"]), d["endpoint"], d["repair"], d.get("strength"), int(d.get("history", 0)),
                        d.get("mode", "direct"), dict(retain) if retain is not None else None,
                        bool(d.get("archive", False)))
            wire.parse_endpoint(entry.endpoint)
            wire.parse_endpoint(entry.repair)
        except Exception as exc:  # wrong shape, missing key, bad endpoint (WireError)
            raise ValueError(f"malformed publisher entry: {exc}") from None
        if entry.strength is not None and (not isinstance(entry.strength, int) or isinstance(entry.strength, bool)):
            raise ValueError("malformed publisher entry: strength")
        if entry.mode not in ("direct", "relay") or entry.history < 0:
            raise ValueError("malformed publisher entry: mode or history")
        return entry


def publishers_from_fields(fields: dict[str, bytes]) -> list[PublisherEntry]:
    """The well-formed publisher entries of a record's fields (a malformed one is skipped)."""
    out = []
    for name, raw in fields.items():
        if name.startswith(PUB) and isinstance(raw, bytes):
            try:
                entry = PublisherEntry.from_bytes(raw)
            except ValueError as exc:
                log.warning("ignoring %s: %s", name, exc)
                continue
            if entry.id == name[len(PUB):]:
                out.append(entry)
            else:
                log.warning("ignoring %s: it names publisher %s", name, entry.id)
    return sorted(out, key=lambda e: e.id)


def leader(publishers: list[PublisherEntry]) -> PublisherEntry | None:
    """On an exclusive topic (some publisher has a strength), the strongest; ties go to the lower id."""
    ranked = [p for p in publishers if p.strength is not None]
    if not ranked:
        return None
    return min(ranked, key=lambda p: (-p.strength, p.id))


def topic_info(client: DhtClient, topic: str) -> dict:
    """`chordpub topic info` (the CLI contract): owner, publishers, subscriber count."""
    found = client.lookup(topic)
    if not found.ok or found.owner is None:
        raise DhtError(f"lookup of topic {topic!r} failed: {found.error}")
    result = client.record_item({"k": topic, "read": PUB, "count": SUB})
    fields = result.get("fields") or {}
    pubs = publishers_from_fields(fields if isinstance(fields, dict) else {})
    return {
        "topic": topic,
        "key_id": key_id(topic, client.bits),
        "owner": found.owner.to_dict(),
        "publishers": [{"id": p.id, "endpoint": p.endpoint, "strength": p.strength, "history": p.history,
                        "retain": p.retain, "archive": p.archive} for p in pubs],
        "subscribers": int(result.get("count") or 0),
    }
