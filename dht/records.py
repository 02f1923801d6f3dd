"""Leased records: a key holding named fields that expire unless renewed. Pure: time is a parameter.

The topic registry (pubsub/) is built on this without the ring knowing what a publisher is: a
publisher is a field its client keeps renewing, and a subscriber learns who publishes by reading the
record and by listening for its changes. Every field is its own entry in the node's Store, under the
composite key ``key + "\\0" + name`` with the key id of `key`, so replication, hand-over, leaving and
`--data-dir` move records field by field, whatever their size (no cap on fields, no record ever
rewritten whole).

What makes an owner cheap:
- a renewal that changes nothing touches one number in `RecordTable.leases`: no Store write, no
  replication, no notification. Leases are not replicated at all: a node that comes to own a record
  (its owner died or left, or it restarted from disk) gives every field a fresh lease of
  TAKEOVER_LEASES times its length: the grace period of a new master (Chubby, OSDI'06 §2.8), long
  enough for a client to notice that its renewals go unanswered, look the record up again through
  a ring that is still healing and renew at the new owner. So a dead client's field outlives its
  client by at most that grace;
- a field's *namespace* is its name up to and including the first "/" ("pub/", "sub/"). Each
  (record, namespace) has an epoch, the newest version written in it (deletions included), so a
  client compares one number per renewal to know whether its view is stale;
- a change (a field set to a new value, deleted or expired) becomes a `Change` carrying the
  namespace's epoch before and after it (so a watcher knows whether it missed one), which the node
  publishes on its events socket as one frame, the msgpack array ``[key + "\\0" + namespace, change]``:
  watchers are ZeroMQ subscriptions to exactly the namespaces they care for (`events_topic` is the
  prefix; msgpack writes a string's length first, so it matches one record and namespace only), and a
  subscriber never receives another subscriber's field. One frame, because a watcher that disconnects
  while a multipart message is half read makes libzmq abort (fq.cpp: `!_more`).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import msgpack

from dht.ids import key_id
from dht.store import SEP, field_key, split_field_key

MAX_TTL = 86_400.0
TAKEOVER_LEASES = 3  # a field a node has just come to own is kept this many of its leases, at first
OPS = ("set", "renew", "del")
NOT_OWNER = "not the owner"
MISSING = "missing"  # renew of a field the owner does not hold: the client sends it whole again
DUE_SLACK = 1024  # stale deadlines (renewed since) the heap of leases may hold beyond one per lease
READ_PAGE = 1000  # fields one item's read returns at most; "more" and "after" say where to go on
REPLY_BUDGET = 512 * 1024  # bytes of fields one reply carries at most (a frame holds 1 MiB)


def namespace(name: str) -> str:
    """"pub/" for "pub/127.0.0.1:5000"; "" for a name without a "/"."""
    i = name.find("/")
    return name[: i + 1] if i >= 0 else ""


def events_topic(key: str, ns: str) -> bytes:
    """The prefix of a change of (key, namespace) on the node's events socket: what a watcher
    subscribes to."""
    return b"\x92" + msgpack.packb(key + SEP + ns)  # an array of two, then the string


def event_frame(key: str, ns: str, body: dict[str, Any]) -> bytes:
    """A change as it goes out on the events socket (`events_topic` is its prefix)."""
    return msgpack.packb([key + SEP + ns, body], use_bin_type=True)


@dataclass(frozen=True, slots=True)
class FieldValue:
    """What the Store keeps for a field: the client's bytes and the lease length it asked for."""

    value: bytes
    ttl: float

    def encode(self) -> bytes:
        return msgpack.packb([self.value, self.ttl], use_bin_type=True)

    @classmethod
    def decode(cls, raw: bytes) -> FieldValue:
        try:
            value, ttl = msgpack.unpackb(raw, raw=False)
            if not isinstance(value, bytes) or isinstance(ttl, bool) or not 0 < float(ttl) <= MAX_TTL:
                raise ValueError
        except Exception:  # any shape error means "not a field"
            raise ValueError("not a record field") from None
        return cls(value, float(ttl))


@dataclass(frozen=True, slots=True)
class Change:
    """One field of one record changed: `value` None means it is gone. `epoch` is its namespace's
    after the change, `prev` before it. A frame of several (`change_message`) spans the first's `prev`
    to the last's `epoch`: a watcher holding an epoch in that span may apply it, one holding an
    older one has missed a change and reads the record whole."""

    key: str
    name: str
    value: bytes | None
    epoch: int
    prev: int = 0
    origin: int = 0  # the position (of a process holding several) that owns the record: whose traffic it is


@dataclass
class Applied:
    """The outcome of one request item: the reply for it, a Store write to make, a change to publish."""

    reply: dict
    write: tuple[str, bytes | None] | None = None  # (composite key, encoded FieldValue or None: delete)
    news: bool = False  # watchers hear of the write (a new or changed value, or a deletion)


class RecordTable:
    """The node's index of the record fields in its Store, and lease deadlines for those it owns.

    The Store calls `observe` for every record entry it applies, merges, loads or drops, so this is
    always the Store's content in decoded form, whoever wrote it (a client, the owner replicating, a
    neighbour handing over)."""

    def __init__(self, bits: int) -> None:
        self.bits = bits
        self.fields: dict[str, dict[str, FieldValue]] = {}
        self.by_ns: dict[tuple[str, str], dict[str, FieldValue]] = {}  # (key, namespace) -> its fields
        self.epochs: dict[str, dict[str, int]] = {}  # key -> namespace -> epoch (a key's go with it at once)
        self.leases: dict[str, float] = {}  # composite key -> wall-clock expiry (owned fields only)
        # the same deadlines as a heap, soonest first, so that a round looks only at what is due: a
        # renewal pushes its new deadline and leaves the old one to be skipped when it comes up
        self._due: list[tuple[float, str]] = []
        self._unleased: set[str] = set()  # fields written since the last look and never leased here
        self._arc: object = None  # the arc `expired` last looked at every field for

    # -- kept in step with the Store ------------------------------------------------------------------
    def observe(self, composite: str, raw: bytes | None, version: int) -> None:
        key, name = split_field_key(composite)
        if version:
            # the namespace changed, even when the entry is older than its epoch: a field handed over
            # from the other side of a healed partition, or written by a node whose clock is behind.
            # Watchers compare epochs for equality, so it must move (dht/prober.py, ring merges).
            of_key = self.epochs.setdefault(key, {})
            ns = namespace(name)
            of_key[ns] = max(version, of_key.get(ns, 0) + 1)
        fields = self.fields.get(key)
        ek = (key, namespace(name))
        if raw is None:
            if fields is not None:
                fields.pop(name, None)
                in_ns = self.by_ns.get(ek)
                if in_ns is not None:
                    in_ns.pop(name, None)
                    if not in_ns:
                        del self.by_ns[ek]
                if not fields:
                    del self.fields[key]
                    self.epochs.pop(key, None)
            self.leases.pop(composite, None)
            self._unleased.discard(composite)
            return
        try:
            fv = FieldValue.decode(raw)
        except ValueError:
            return  # never written by a node of ours; ignored rather than served
        if composite not in self.leases:
            self._unleased.add(composite)
        self.fields.setdefault(key, {})[name] = fv
        self.by_ns.setdefault(ek, {})[name] = fv

    def clear(self) -> None:
        self.fields.clear()
        self.by_ns.clear()
        self.epochs.clear()
        self.leases.clear()
        self._due.clear()
        self._unleased.clear()
        self._arc = None

    def _lease(self, composite: str, expires: float) -> None:
        self.leases[composite] = expires
        heapq.heappush(self._due, (expires, composite))
        if len(self._due) > 2 * len(self.leases) + DUE_SLACK:  # renewals left that many stale deadlines
            self._due = [(e, c) for c, e in self.leases.items()]
            heapq.heapify(self._due)

    # -- reads ------------------------------------------------------------------------------------------
    def _scope(self, key: str, prefix: str) -> dict[str, FieldValue]:
        """The fields `prefix` can select: its namespace's alone when it names one (a record with
        thousands of announcements is not walked to read its few patterns)."""
        ns = namespace(prefix)
        return self.by_ns.get((key, ns), {}) if ns else self.fields.get(key, {})

    def view(self, key: str, prefix: str = "") -> dict[str, bytes]:
        return {n: fv.value for n, fv in self._scope(key, prefix).items() if n.startswith(prefix)}

    def page(self, key: str, prefix: str, after: str, reply: dict, budget: list[int] | None) -> dict[str, bytes]:
        scope = self._scope(key, prefix)
        names = sorted(n for n in scope if n.startswith(prefix) and n > after)
        out: dict[str, bytes] = {}
        for name in names:
            value = scope[name].value
            cost = len(name) + len(value) + 8
            if len(out) >= READ_PAGE or (budget is not None and budget[0] < cost):
                reply.update(more=True, after=max(out) if out else after)
                break
            out[name] = value
            if budget is not None:
                budget[0] -= cost
        return out

    def count(self, key: str, prefix: str = "") -> int:
        fields = self._scope(key, prefix)
        if not prefix or prefix == namespace(prefix):
            return len(fields)
        return sum(1 for n in fields if n.startswith(prefix))

    def epoch(self, key: str, ns: str) -> int:
        return self.epochs.get(key, {}).get(ns, 0)

    # -- the owner's side -------------------------------------------------------------------------------
    def apply(self, item: dict[str, Any], now: float) -> Applied:
        """One item of a `records` request, on a record this node owns (the caller checked)."""
        key, name, op = item["k"], item.get("f"), item.get("op")
        out = Applied({"ok": True})
        if op is not None:
            if name is None:
                return Applied({"ok": False, "err": f"{op} needs a field name"})
            composite = field_key(key, name)
            held = self.fields.get(key, {}).get(name)
            if op == "set":
                fv = FieldValue(item["val"], min(item.get("ttl", 0) or 0, MAX_TTL))
                if fv.ttl <= 0:
                    return Applied({"ok": False, "err": "set needs a ttl"})
                self._lease(composite, now + fv.ttl)
                if held != fv:
                    out.write = (composite, fv.encode())
                    out.news = held is None or held.value != fv.value
            elif op == "renew":
                if held is None:
                    return Applied({"ok": False, "err": MISSING})
                self._lease(composite, now + min(item.get("ttl") or held.ttl, MAX_TTL))
            else:  # del
                self.leases.pop(composite, None)
                if held is not None:
                    out.write = (composite, None)
                    out.news = True
        return out

    def answer(self, item: dict[str, Any], reply: dict, budget: list[int] | None = None) -> dict:
        """Add what the item asks to read ("read": prefix -> fields, "epoch": namespace, "count": prefix,
        "names": prefix -> the field names only), after its write was applied. A read returns the
        fields after the name "after" (if given), in name order, at most READ_PAGE of them and what
        `budget` (bytes left for the reply, shared by its items) allows; when it stops short it says
        "more" and the last name given as "after", where the client reads on."""
        key = item["k"]
        if "read" in item:
            reply["fields"] = self.page(key, item["read"], item.get("after", ""), reply, budget)
            reply["epoch"] = self.epoch(key, namespace(item["read"]))
        if "epoch" in item:
            reply["epoch"] = self.epoch(key, item["epoch"])
        if "count" in item:
            reply["count"] = self.count(key, item["count"])
        if "names" in item:
            reply["names"] = sorted(n for n in self.fields.get(key, {}) if n.startswith(item["names"]))
        return reply

    def expired(self, now: float, owns, arc: object = None) -> list[str]:  # noqa: ANN001 - owns(key_id) -> bool
        """Composite keys of owned fields whose lease has passed. A field owned but never leased here
        (this node has just come to own it) gets a fresh lease instead, TAKEOVER_LEASES long. Leases
        of fields this node no longer owns are forgotten.

        `arc` names what `owns` answers for (the owner's predecessor): while it stays the same, a
        round looks only at the deadlines that are due and at the fields written since the last round,
        not at every field (10,000 topics' fields walked every round were 6-8 % of a loaded node's
        profile samples); when it changes, or without one, every field is looked at."""
        if arc is None or arc != self._arc:
            self._arc = arc
            return self._look_at_all(now, owns)
        for composite in self._unleased:
            key, name = split_field_key(composite)
            fv = self.fields.get(key, {}).get(name)
            if fv is not None and composite not in self.leases and owns(key_id(key, self.bits)):
                self._lease(composite, now + TAKEOVER_LEASES * fv.ttl)
        self._unleased.clear()
        gone: dict[str, float] = {}  # (a deadline pushed twice, by two renewals to the same moment, is one)
        while self._due and self._due[0][0] <= now:
            expires, composite = heapq.heappop(self._due)
            if self.leases.get(composite) == expires:
                gone[composite] = expires
        for composite, expires in gone.items():  # due again next round, unless the caller deletes the field
            heapq.heappush(self._due, (expires, composite))
        return list(gone)

    def _look_at_all(self, now: float, owns) -> list[str]:  # noqa: ANN001
        gone: list[str] = []
        owned_keys: dict[str, bool] = {}
        for key, fields in self.fields.items():
            mine = owned_keys.get(key)
            if mine is None:
                mine = owned_keys[key] = owns(key_id(key, self.bits))
            if not mine:
                continue
            for name, fv in fields.items():
                composite = field_key(key, name)
                expires = self.leases.get(composite)
                if expires is None:
                    self.leases[composite] = now + TAKEOVER_LEASES * fv.ttl
                elif expires <= now:
                    gone.append(composite)
        for composite in [c for c in self.leases if not owned_keys.get(split_field_key(c)[0], False)]:
            del self.leases[composite]
        self._due = [(e, c) for c, e in self.leases.items()]
        heapq.heapify(self._due)
        self._unleased.clear()
        return gone


def change_message(changes: list[Change]) -> dict[str, Any]:
    """The body published for changes of one (record, namespace), in the order they were made:
    {"k", "set", "del", "epoch": after the last, "prev": before the first}."""
    first = changes[0]
    body: dict[str, Any] = {"k": first.key, "set": {}, "del": [], "epoch": max(c.epoch for c in changes),
                            "prev": first.prev}
    for c in changes:  # in order: the last word on a field wins
        if c.value is None:
            body["set"].pop(c.name, None)
            if c.name not in body["del"]:
                body["del"].append(c.name)
        else:
            body["set"][c.name] = c.value
            if c.name in body["del"]:
                body["del"].remove(c.name)
    return body
