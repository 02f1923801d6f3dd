"""The topic registry, on the ring: who publishes and who subscribes to a topic.

The record at `key_id(topic)`'s owner (replicated like every key) holds one leased field per
publisher ("pub/<id>": endpoint, repair endpoint, strength, offered history) and per subscriber
("sub/<id>"). Each lease lasts three heartbeats and every heartbeat renews it, so a process that
dies vanishes within a lease; a subscriber's notify endpoint is also a watcher of the record, so
the owner tells it at once when a publisher appears or goes.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

import msgpack

from dht import wire
from dht.client import DhtClient
from dht.ids import key_id

log = logging.getLogger(__name__)

PUB = "pub/"
SUB = "sub/"
LEASE_HEARTBEATS = 3


@dataclass(frozen=True)
class PublisherEntry:
    id: str
    endpoint: str  # its PUB socket
    repair: str  # its history/repair ROUTER
    strength: int | None = None  # set on an exclusive topic: only the strongest is delivered
    history: int = 0  # messages it offers to late joiners and for repair
    mode: str = "direct"

    def to_bytes(self) -> bytes:
        return msgpack.packb(asdict(self), use_bin_type=True)

    @classmethod
    def from_bytes(cls, raw: bytes) -> PublisherEntry:
        try:
            d = msgpack.unpackb(raw, raw=False)
            entry = cls(str(d["id"]), d["endpoint"], d["repair"], d.get("strength"), int(d.get("history", 0)),
                        d.get("mode", "direct"))
            wire.parse_endpoint(entry.endpoint)
            wire.parse_endpoint(entry.repair)
        except Exception as exc:  # wrong shape, missing key, bad endpoint (WireError)
            raise ValueError(f"malformed publisher entry: {exc}") from None
        if entry.strength is not None and not isinstance(entry.strength, int):
            raise ValueError("malformed publisher entry: strength")
        return entry


def publishers_from_fields(fields: dict[str, bytes]) -> list[PublisherEntry]:
    """The well-formed publisher entries of a record's fields (a malformed one is skipped)."""
    out = []
    for name, raw in fields.items():
        if name.startswith(PUB) and isinstance(raw, bytes):
            try:
                out.append(PublisherEntry.from_bytes(raw))
            except ValueError as exc:
                log.warning("ignoring %s: %s", name, exc)
    return sorted(out, key=lambda e: e.id)


def leader(publishers: list[PublisherEntry]) -> PublisherEntry | None:
    """On an exclusive topic (some publisher has a strength), the strongest; ties go to the lower id."""
    ranked = [p for p in publishers if p.strength is not None]
    if not ranked:
        return None
    return min(ranked, key=lambda p: (-p.strength, p.id))


class Directory:
    """Registers and finds publishers and subscribers of topics through a DhtClient."""

    def __init__(self, client: DhtClient, heartbeat: float = 1.0) -> None:
        self.client = client
        self.heartbeat = heartbeat
        self.lease = LEASE_HEARTBEATS * heartbeat

    def register_publisher(self, topic: str, entry: PublisherEntry) -> None:
        self.client.put_field(topic, PUB + entry.id, entry.to_bytes(), self.lease)

    def unregister_publisher(self, topic: str, publisher_id: str) -> None:
        self.client.del_field(topic, PUB + publisher_id)

    def register_subscriber(self, topic: str, subscriber_id: str, notify: str) -> None:
        self.client.put_field(topic, SUB + subscriber_id, msgpack.packb({"notify": notify}), self.lease)
        self.client.watch(topic, notify, self.lease)

    def unregister_subscriber(self, topic: str, subscriber_id: str) -> None:
        self.client.del_field(topic, SUB + subscriber_id)

    def publishers(self, topic: str) -> list[PublisherEntry]:
        return publishers_from_fields(self.client.get_record(topic))

    def info(self, topic: str) -> dict:
        """`chordpub topic info` (the CLI contract)."""
        found = self.client.lookup(topic)
        if not found.ok or found.owner is None:
            raise RuntimeError(f"lookup of topic {topic!r} failed: {found.error}")
        fields = self.client.get_record(topic)
        pubs = publishers_from_fields(fields)
        return {
            "topic": topic,
            "key_id": key_id(topic, self.client.bits),
            "owner": found.owner.to_dict(),
            "publishers": [{"id": p.id, "endpoint": p.endpoint, "strength": p.strength, "history": p.history}
                           for p in pubs],
            "subscribers": sum(1 for name in fields if name.startswith(SUB)),
        }
