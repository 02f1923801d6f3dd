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
from dataclasses import dataclass

import msgpack

from dht import wire
from dht.client import DhtClient, DhtError
from dht.ids import key_id

log = logging.getLogger(__name__)

MAX_PARSED = 4096  # publisher entries kept parsed, by their bytes (then forgotten all at once)
_PARSED: dict[bytes, PublisherEntry] = {}

PUB = "pub/"
SUB = "sub/"
GRP = "grp/"  # "grp/<group>/<client id>": a member of a consumer group, with its terms
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
    patterns: bool = False  # it sends pattern subscribers their frames (pubsub/envelope.py): no policy gates it

    def to_bytes(self) -> bytes:
        # the fields by name, not `asdict` (its recursive copy was 60% of a first publish's cost)
        return msgpack.packb({"id": self.id, "endpoint": self.endpoint, "repair": self.repair,
                              "strength": self.strength, "history": self.history, "mode": self.mode,
                              "retain": self.retain, "archive": self.archive, "patterns": self.patterns},
                             use_bin_type=True)

    @classmethod
    def from_bytes(cls, raw: bytes) -> PublisherEntry:
        known = _PARSED.get(raw)  # (a publisher's thousand topics carry the same bytes: parsed once)
        if known is not None:
            return known
        entry = cls._parse(raw)
        if len(_PARSED) >= MAX_PARSED:
            _PARSED.clear()
        _PARSED[raw] = entry
        return entry

    @classmethod
    def _parse(cls, raw: bytes) -> PublisherEntry:
        try:
            d = msgpack.unpackb(raw, raw=False)
            retain = d.get("retain")
            entry = cls(str(d["id"]), d["endpoint"], d["repair"], d.get("strength"), int(d.get("history", 0)),
                        d.get("mode", "direct"), dict(retain) if retain is not None else None,
                        bool(d.get("archive", False)), d.get("patterns") is True)
            wire.plain_endpoint(entry.endpoint)
            wire.plain_endpoint(entry.repair)
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


def member_field(group: str, client_id: str) -> str:
    return f"{GRP}{group}/{client_id}"


def member_value(prefetch: int, ordering: str, ack_wait: float, max_deliver: int, durable: bool) -> bytes:
    return msgpack.packb({"prefetch": prefetch, "ordering": ordering, "ack_wait": ack_wait,
                          "max_deliver": max_deliver, "durable": durable}, use_bin_type=True)


def members_from_fields(fields: dict) -> dict[str, dict[str, dict]]:
    """group -> member id -> its terms, from a record's "grp/" fields (malformed ones skipped)."""
    out: dict[str, dict[str, dict]] = {}
    for name, raw in fields.items():
        if not (isinstance(name, str) and name.startswith(GRP) and isinstance(raw, bytes)):
            continue
        group, _, member = name[len(GRP):].partition("/")
        try:
            terms = msgpack.unpackb(raw, raw=False)
        except Exception:  # noqa: BLE001 - a malformed field: somebody else's bug, skipped
            terms = None
        if group and member and isinstance(terms, dict):
            out.setdefault(group, {})[member] = terms
    return out


def topic_info(client: DhtClient, topic: str) -> dict:
    """`chordpub topic info` (the CLI contract): owner, publishers, subscriber count."""
    found = client.lookup(topic)
    if not found.ok or found.owner is None:
        raise DhtError(f"lookup of topic {topic!r} failed: {found.error}")
    result = client.record_item({"k": topic, "read": PUB, "count": SUB})
    fields = result.get("fields") or {}
    pubs = publishers_from_fields(fields if isinstance(fields, dict) else {})
    grp = client.record_item({"k": topic, "read": GRP}).get("fields") or {}
    groups = members_from_fields(grp if isinstance(grp, dict) else {})
    return {
        "topic": topic,
        "key_id": key_id(topic, client.bits),
        "owner": found.owner.to_dict(),
        "publishers": [{"id": p.id, "endpoint": p.endpoint, "strength": p.strength, "history": p.history,
                        "retain": p.retain, "archive": p.archive, **publisher_figures(client, topic, p)}
                       for p in pubs],
        "subscribers": int(result.get("count") or 0),
        "groups": group_figures(client, topic, pubs, groups) if groups else {},
    }


def publisher_figures(client: DhtClient, topic: str, pub: PublisherEntry) -> dict:
    """What the publisher says of `topic`: its dedup window (pubsub/dedup.py; None when it keeps none, no
    msg id sent yet) and, on an exclusive topic, whether it leads, its epoch and the messages it did
    not send (pubsub/exclusive.py); both None when it does not answer."""
    reply = client.rpc.call(pub.repair, "figures", timeout=client.rpc.timeout, retries=0, topic=topic)
    dedup = reply.get("dedup") if reply.ok else None
    exclusive = reply.get("exclusive") if reply.ok else None
    return {"dedup": dedup if isinstance(dedup, dict) else None,
            "exclusive": exclusive if isinstance(exclusive, dict) else None}


def group_figures(client: DhtClient, topic: str, pubs: list[PublisherEntry], groups: dict[str, dict]) -> dict:
    """Each consumer group of the topic: its members (the record's), and what the publishers say of
    it, summed over them: backlog, in flight, delivered, redelivered, dead-lettered, per member too."""
    out = {name: {"members": sorted(members), "backlog": 0, "delivered": 0, "redelivered": 0, "dead_lettered": 0,
                  "in_flight": 0, "per_member": {m: {"in_flight": 0, "delivered": 0, "redelivered": 0, "acked": 0,
                                                     "joined": 0} for m in sorted(members)}, "publishers": 0}
           for name, members in groups.items()}
    for p in pubs:
        reply = client.rpc.call(p.repair, "groups", timeout=client.rpc.timeout, retries=0, topic=topic)
        stats = reply.body.get("groups") if reply.ok else None
        for name, g in (stats.items() if isinstance(stats, dict) else []):
            if name not in out or not isinstance(g, dict):
                continue
            o = out[name]
            o["publishers"] += 1
            o["backlog"] += int(g.get("backlog") or 0)
            o["dead_lettered"] += int(g.get("dead_lettered") or 0)
            for mid, m in (g.get("members") or {}).items():
                per = o["per_member"].setdefault(mid, {"in_flight": 0, "delivered": 0, "redelivered": 0, "acked": 0,
                                                       "joined": 0})
                for k in ("in_flight", "delivered", "redelivered", "acked"):
                    per[k] += int(m.get(k) or 0)
                per["joined"] += bool(m.get("connected"))  # publishers that dispatch to it now
                o["in_flight"] += int(m.get("in_flight") or 0)
                o["delivered"] += int(m.get("delivered") or 0)
                o["redelivered"] += int(m.get("redelivered") or 0)
    return out
