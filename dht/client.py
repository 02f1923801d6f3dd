"""Talking to the ring from outside: iterative lookup, put/get/delete, info, leave.

The lookup is iterative (SIGCOMM'01 §4.3 describes both styles): the caller asks node after node
for its next hop, so it alone sees the whole path, the hop count and the time taken. When a node
on the path does not answer, the lookup backs up to the previous node and asks it again with the
dead node in `avoid`, which makes it pick the next best finger or successor (ToN'03 §V-B).

Long because it is the ring's one client (lookups, records in bulk and one by one, keys, info,
leave), every method short; the wire checks are dht/wire.py's, the sockets dht/transport.py's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import zmq

from dht import wire
from dht.ids import MAX_BITS, check_bits, key_id
from dht.policy import DENIED
from dht.records import NOT_OWNER
from dht.routing import Peer
from dht.transport import Reply, RpcClient, SocketSetup

PART = wire.MAX_ITEMS  # items per `records` request: more go in several
PART_BYTES = wire.MAX_MESSAGE_BYTES // 2  # encoded items per request: a node drops a message past the limit

AskFn = Callable[[str, int, Collection[str]], Reply]  # (endpoint, key id, avoid) -> next_hop reply


MAX_ENTRY_POINTS = 16
MAX_ENTRY_TRIES = 4


class DhtError(RuntimeError):
    """An operation on the ring that could not be carried out; the text says why."""

    def __init__(self, message: str, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable  # the node did not answer (as opposed to refusing)


@dataclass
class RecordsReply:
    """A node's answer to a `records` request: one result per item, the arc it owns (pred, me] and its
    services (relay endpoints, events socket)."""

    endpoint: str
    results: list[dict]
    arc: tuple[int | None, int] | None  # None when not asked for (about=False)
    services: dict[str, str] | None
    written: int | None = None  # asked "replicated": the node's writes so far (this request's included)
    replicated: int | None = None  # ... and how many of them its successors hold

    @classmethod
    def parse(cls, endpoint: str, body: dict, n_items: int) -> RecordsReply:
        try:
            results = body["results"]
            if not isinstance(results, list) or len(results) != n_items or not all(
                    isinstance(r, dict) for r in results):
                raise ValueError("results")
            arc = services = None
            if "arc" in body:
                lo, hi = body["arc"]
                arc = (None if lo is None else wire.decode_id(lo), wire.decode_id(hi))
                services = body.get("services") or {}
                if not isinstance(services, dict):
                    raise ValueError("services")
                services = {str(k): v for k, v in services.items() if isinstance(v, str)}
            written, replicated = body.get("written"), body.get("replicated")
            if not all(x is None or (isinstance(x, int) and x >= 0) for x in (written, replicated)):
                raise ValueError("written/replicated")
        except (KeyError, TypeError, ValueError) as exc:
            raise DhtError(f"records on {endpoint}: malformed reply ({exc})") from None
        return cls(endpoint, results, arc, services, written, replicated)


def split_items(items: list[dict]) -> list[tuple[int, list[dict]]]:
    """`items` as the parts of several `records` requests, (first index, items) each: at most PART items
    and PART_BYTES encoded bytes a part (4,096 announcements with their publisher entries are 1.1 MB,
    which the node's socket drops unanswered)."""
    if not items:
        return []
    if len(items) <= 64 and len(wire.encode(items)) <= PART_BYTES:
        return [(0, items)]
    out: list[tuple[int, list[dict]]] = []
    start, size = 0, 0
    for i, item in enumerate(items):
        n = len(wire.encode(item))
        if i > start and (i - start >= PART or size + n > PART_BYTES):
            out.append((start, items[start:i]))
            start, size = i, 0
        size += n
    out.append((start, items[start:]))
    return out


def joined(parts: list[RecordsReply]) -> RecordsReply:
    """The replies to one request's items sent in several parts, as one: results in order, the node's
    arc and services from the first part that has them, its counts from the last."""
    first = next((p for p in parts if p.arc is not None), parts[0])
    return RecordsReply(parts[0].endpoint, [r for p in parts for r in p.results], first.arc, first.services,
                        parts[-1].written, parts[-1].replicated)


@dataclass
class LookupResult:
    key_id: int
    ok: bool
    owner: Peer | None = None
    path: list[str] = field(default_factory=list)
    timeouts: int = 0
    ms: float = 0.0
    error: str | None = None

    @property
    def hops(self) -> int:
        """Next-hop messages between nodes: the nodes asked, less the first one."""
        return max(len(self.path) - 1, 0)


def iterative_lookup(k: int, start: str, ask: AskFn, max_steps: int = 256,
                     avoid: Collection[str] = ()) -> LookupResult:
    """Find the owner of id k starting at endpoint `start`, asking each node for its next hop."""
    t0 = time.perf_counter()
    avoided = set(avoid)
    trail: list[str] = []
    timeouts = 0
    current = start
    for _step in range(max_steps):
        reply = ask(current, k, sorted(avoided) if avoided else ())
        if not reply.ok:
            if unreachable(reply):
                timeouts += 1
                avoided.add(current)
                if not trail:
                    return _failed(k, trail, timeouts, t0, f"{current} did not answer")
                current = trail.pop()  # back up and ask the previous node again
                continue
            return _failed(k, trail, timeouts, t0, f"{current}: {reply.err}")
        trail.append(current)
        try:
            peer = wire.decode_peer(reply.get("peer"))
        except wire.WireError as exc:
            return _failed(k, trail, timeouts, t0, f"{current} sent a bad next hop: {exc}")
        if reply.get("done") is True:
            ms = (time.perf_counter() - t0) * 1000.0
            return LookupResult(k, True, peer, trail, timeouts, ms)
        if peer.endpoint == current or peer.endpoint in avoided:
            return _failed(k, trail, timeouts, t0, f"{current} routed to itself or to a dead node")
        current = peer.endpoint
    return _failed(k, trail, timeouts, t0, f"no owner found within {max_steps} steps")


def unreachable(reply: Reply) -> bool:
    """Whether a failed call means the node is gone (as opposed to an error it answered)."""
    return reply.timed_out or (reply.err or "").startswith("send failed")


def _failed(k: int, trail: list[str], timeouts: int, t0: float, error: str) -> LookupResult:
    ms = (time.perf_counter() - t0) * 1000.0
    return LookupResult(k, False, None, trail, timeouts, ms, error)


def contact(rpc: RpcClient, endpoint: str, timeout: float) -> dict:
    """Wait at most `timeout` seconds for `endpoint` to answer a ping (its reply: the node's id and the
    ring's id width); a DhtError saying what was tried, for how long, otherwise. Commands call it first
    so that a dead or wrong peer ends them quickly."""
    reply = rpc.call(endpoint, "ping", timeout=timeout, retries=0)
    if not reply.ok:
        why = ("is a chordpub node running there? A ring started with --curve answers only clients "
               "holding its keys" if reply.timed_out else reply.err)
        raise DhtError(f"no reply from {endpoint} within {timeout:g}s ({why})", unreachable=reply.timed_out)
    return reply.body


class DhtClient:
    """A client of the ring entered through the node at `via` ("host:port")."""

    def __init__(self, via: str, timeout: float = 1.0, retries: int = 1,
                 setup: SocketSetup | None = None, context: zmq.Context | None = None) -> None:
        wire.parse_endpoint(via)
        self.via = via
        self.rpc = RpcClient(timeout=timeout, retries=retries, setup=setup, context=context)
        self._bits: int | None = None
        # where lookups may start: `via` first, then nodes seen answering, for when `via` dies
        self.entry_points: list[str] = [via]

    # -- plumbing -------------------------------------------------------------------------------
    def call(self, endpoint: str, op: str, /, **fields: object) -> dict:
        reply = self.rpc.call(endpoint, op, **fields)
        if not reply.ok:
            raise DhtError(f"{op} on {endpoint} failed: {reply.err}")
        return reply.body

    def _ask(self, endpoint: str, k: int, avoid: Collection[str]) -> Reply:
        if avoid:
            return self.rpc.call(endpoint, "next_hop", key_id=wire.encode_id(k), avoid=list(avoid))
        return self.rpc.call(endpoint, "next_hop", key_id=wire.encode_id(k))

    @property
    def bits(self) -> int:
        if self._bits is None:
            bits = self._first_info().get("bits")
            self._bits = check_bits(bits if isinstance(bits, int) else 64)
        return self._bits

    def learn_width(self, bits: object) -> None:
        """Keep the ring's id width a node named (its `ping` reply does), sparing `bits` an `info`."""
        if self._bits is None and isinstance(bits, int):
            try:
                self._bits = check_bits(bits)
            except ValueError:
                pass  # not a width we can use: `bits` asks, and says so

    # -- operations -----------------------------------------------------------------------------
    def ping(self, endpoint: str | None = None) -> bool:
        return self.rpc.call(endpoint or self.via, "ping").ok

    def _first_info(self) -> dict:
        """info from the first entry point that answers (learning the ring's id width)."""
        for entry in list(self.entry_points):
            try:
                return self.info(entry)
            except DhtError as exc:
                last = exc
        raise last

    def info(self, endpoint: str | None = None, topics: int = 0) -> dict:
        """A node's state in the CLI contract's shape: id, endpoint, predecessor, successors, ...;
        with topics=N also "topics", the names of up to N record keys (topics) the node owns."""
        body = self.call(endpoint or self.via, "info", **({"topics": topics} if topics else {}))
        return info_from_reply(body, endpoint or self.via)

    def lookup(self, key: str, start: str | None = None) -> LookupResult:
        return self.lookup_id(key_id(key, self.bits), start)

    def lookup_id(self, k: int, start: str | None = None, avoid: Collection[str] = ()) -> LookupResult:
        """Iterative lookup from `start`, or from the first entry point that answers. A start that does
        not answer is a failed lookup (`ok` False), never an exception."""
        max_steps = 4 * (self._bits or MAX_BITS) + 16  # a bound on the loop: no call to learn the width
        if start is not None:
            return iterative_lookup(k, start, self._ask, max_steps=max_steps, avoid=avoid)
        found = LookupResult(k, False, error="no entry point")
        for entry in [e for e in self.entry_points if e not in avoid][:MAX_ENTRY_TRIES]:
            found = iterative_lookup(k, entry, self._ask, max_steps=max_steps, avoid=avoid)
            if found.path:  # the entry point answered
                self._learn(entry, found)
                return found
            self.entry_points.remove(entry)
            self.entry_points.append(entry)  # dead or not: try it last from now on
        return found

    def _learn(self, entry: str, found: LookupResult) -> None:
        self.learn_entry_points([entry, *found.path] + ([found.owner.endpoint] if found.owner else []))

    def learn_entry_points(self, endpoints: list[str]) -> None:
        """Nodes a lookup may start at when the entry node is gone, these first (at most
        MAX_ENTRY_POINTS kept): those a lookup passed through, or the entry node's links."""
        merged = list(dict.fromkeys(endpoints + self.entry_points))
        self.entry_points = merged[:MAX_ENTRY_POINTS]

    def _at_owner(self, key: str, op: str, /, attempts: int = 4, **fields: object) -> dict:
        """Run `op` on the key's owner; a dead or not-yet-updated owner sends us round again."""
        avoid: set[str] = set()
        last = "no attempt"
        for _ in range(attempts):
            found = self.lookup_id(key_id(key, self.bits), avoid=avoid)
            if not found.ok:
                if not found.path:  # the entry node itself is gone
                    raise DhtError(f"{op} {key!r}: {found.error}")
                last = found.error or "lookup failed"
                continue
            reply = self.rpc.call(found.owner.endpoint, op, key=key, **fields)
            if reply.ok:
                return reply.body
            last = f"{found.owner.endpoint}: {reply.err}"
            if unreachable(reply):
                avoid.add(found.owner.endpoint)
            else:
                time.sleep(0.05)  # the ring is settling (not the owner yet): back off, then ask again
        raise DhtError(f"{op} {key!r} failed: {last}")

    def put(self, key: str, value: bytes) -> int:
        """Store value under key at its owner (replicated by the owner). Returns the version."""
        return int(self._at_owner(key, "put", value=value)["version"])

    def get(self, key: str) -> bytes | None:
        body = self._at_owner(key, "get")
        return body.get("value") if body.get("found") else None

    def delete(self, key: str) -> None:
        self._at_owner(key, "delete")

    # -- leased records (dht/records.py) --------------------------------------------------------
    def records_at(self, endpoint: str, items: list[dict], timeout: float | None = None,
                   about: bool = False, retries: int | None = None, replicated: bool = False) -> RecordsReply:
        """One `records` request to one node: many items on the records it owns (see dht/wire.py);
        `about` asks for the node's arc and services too, `replicated` for its write counts."""
        extra = {"replicated": True} if replicated else {}
        parts = split_items(items)
        if len(parts) > 1:  # more than one request carries: the rest go in more, one by one
            return joined([self.records_at(endpoint, part, timeout, about, retries, replicated) for _, part in parts])
        reply = self.rpc.call(endpoint, "records", items=items, timeout=timeout, retries=retries, about=about,
                              **extra)
        if not reply.ok:
            raise DhtError(f"records on {endpoint} failed: {reply.err}", unreachable=unreachable(reply))
        return RecordsReply.parse(endpoint, reply.body, len(items))

    def records_at_each(self, requests: dict[str, list[dict]], timeout: float, about: bool = False
                        ) -> dict[str, RecordsReply | DhtError]:
        """One `records` request to each node of `requests` (endpoint -> items), all sent at once, one
        attempt each: the wait is the slowest reply or `timeout`, not the sum of the round trips, so
        one slow node delays only its own answer. `about` as for `records_at`. Each node's reply, or the
        DhtError saying why not."""
        out: dict[tuple[str, int], RecordsReply | DhtError] = {}

        def answer(part: tuple[str, int], n_items: int) -> Callable[[Reply], None]:
            endpoint = part[0]

            def on_reply(reply: Reply) -> None:
                if not reply.ok:
                    out[part] = DhtError(f"records on {endpoint} failed: {reply.err}", unreachable=unreachable(reply))
                    return
                try:
                    out[part] = RecordsReply.parse(endpoint, reply.body, n_items)
                except DhtError as exc:
                    out[part] = exc
            return on_reply

        sent = 0
        starts: dict[str, list[int]] = {}
        for endpoint, items in requests.items():  # more than one request carries go in several
            for i, part in split_items(items):
                starts.setdefault(endpoint, []).append(i)
                self.rpc.send(endpoint, "records", on_reply=answer((endpoint, i), len(part)), timeout=timeout,
                              items=part, about=about)
                sent += 1
        self.rpc.serve_until(lambda: len(out) == sent)
        replies: dict[str, RecordsReply | DhtError] = {}
        for endpoint in requests:
            parts = [out[(endpoint, i)] for i in starts.get(endpoint, [])]
            failed = next((p for p in parts if isinstance(p, DhtError)), None)
            replies[endpoint] = failed if failed is not None else joined(parts)  # type: ignore[arg-type]
        return replies

    def record_item(self, item: dict, attempts: int = 4) -> dict:
        """One item at its record's owner, found by lookup; "not the owner" (a ring still settling)
        sends it round again. Returns the item's result; raises DhtError if it failed, PermissionError if
        a policy refused it."""
        avoid: set[str] = set()
        last = "no attempt"
        key = item["k"]
        for _ in range(attempts):
            found = self.lookup_id(key_id(key, self.bits), avoid=avoid)
            if not found.ok or found.owner is None:
                if not found.path:
                    raise DhtError(f"records {key!r}: {found.error}")
                last = found.error or "lookup failed"
                continue
            try:
                result = self.records_at(found.owner.endpoint, [item]).results[0]
            except DhtError as exc:
                last = str(exc)
                if exc.unreachable:
                    avoid.add(found.owner.endpoint)
                continue
            if result.get("ok"):
                return result
            if str(result.get("err")).startswith(DENIED):
                raise PermissionError(result["err"])  # a policy's answer, not the ring's trouble
            last = f"{found.owner.endpoint}: {result.get('err')}"
            if result.get("err") != NOT_OWNER:
                break
            time.sleep(0.05)  # the ring is settling: back off, then ask again
        raise DhtError(f"records {key!r} failed: {last}")

    def put_field(self, key: str, field: str, value: bytes, ttl: float) -> None:
        """Create, change or renew field `field` of the record at `key` for `ttl` seconds."""
        self.record_item({"k": key, "f": field, "op": "set", "val": value, "ttl": ttl})

    def del_field(self, key: str, field: str) -> None:
        self.record_item({"k": key, "f": field, "op": "del"})

    def get_record(self, key: str, prefix: str = "") -> dict[str, bytes]:
        """The live fields of the record at `key` whose names start with `prefix` ({} if none)."""
        fields = self.record_item({"k": key, "read": prefix}).get("fields") or {}
        if not isinstance(fields, dict) or not all(isinstance(v, bytes) for v in fields.values()):
            raise DhtError(f"records {key!r}: malformed reply")
        return fields

    def count_fields(self, key: str, prefix: str = "") -> int:
        count = self.record_item({"k": key, "count": prefix}).get("count")
        if not isinstance(count, int):
            raise DhtError(f"records {key!r}: malformed reply")
        return count

    def leave(self, endpoint: str | None = None) -> None:
        self.call(endpoint or self.via, "leave")

    def close(self) -> None:
        self.rpc.close()

    def __enter__(self) -> DhtClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def info_from_reply(body: dict, endpoint: str) -> dict:
    """A node's `info` reply in the CLI contract's shape (`DhtClient.info`); DhtError when malformed."""
    try:
        out = {"id": wire.decode_id(body.get("node_id"), "node_id"), "endpoint": body["endpoint"],
               "bits": body.get("bits", 64)}
        pred = wire.decode_optional_peer(body.get("predecessor"), "predecessor")
        out["predecessor"] = pred.to_dict() if pred else None
        out["successors"] = [p.to_dict() for p in wire.decode_peers(body.get("successors", []))]
        out["fingers"] = [None if f is None else wire.decode_peer(f, "finger").to_dict()
                          for f in body.get("fingers", [])]
    except (KeyError, TypeError, wire.WireError) as exc:
        raise DhtError(f"info from {endpoint}: malformed reply ({exc})") from None
    for k in ("keys", "stored", "replicas", "r", "rounds", "links_changed_round", "joined", "records",
              "lookups_served"):
        out[k] = body.get(k)
    names = body.get("topics")
    out["bind"] = body["bind"] if isinstance(body.get("bind"), str) else out["endpoint"]
    # the process holding this ring position, and every position it holds (virtual nodes)
    out["process"] = body["process"] if isinstance(body.get("process"), str) else out["endpoint"]
    positions = body.get("positions")
    out["positions"] = [e for e in positions if isinstance(e, str)] if isinstance(positions, list) and \
        positions else [out["endpoint"]]
    out["topics"] = [t for t in names if isinstance(t, str)] if isinstance(names, list) else []
    left = body.get("neighbours_left")
    out["neighbours_left"] = [e for e in left if isinstance(e, str)] if isinstance(left, list) else []
    remembered = body.get("remembered")
    out["remembered"] = [m for m in remembered if isinstance(m, dict) and isinstance(m.get("endpoint"), str)
                         ] if isinstance(remembered, list) else []
    for k in ("probes", "merges", "probe_bytes"):
        out[k] = body.get(k) if isinstance(body.get(k), int) else 0
    load = body.get("load")  # what it carries (dht/load.py): numbers, or None where it has no relay
    out["load"] = {k: v for k, v in load.items() if isinstance(k, str) and (v is None or (
        isinstance(v, int | float) and not isinstance(v, bool)))} if isinstance(load, dict) else None
    if out["load"] is not None:  # the id that splits its load in two, a string past 64 bits
        try:
            split = load.get("split_id")
            out["load"]["split_id"] = None if split is None else wire.decode_id(split, "split_id")
        except wire.WireError:
            out["load"]["split_id"] = None
    denials = body.get("denials")  # what its policy refused, by operation
    out["denials"] = {k: v for k, v in denials.items() if isinstance(k, str) and isinstance(v, int)
                      } if isinstance(denials, dict) else {}
    out["pns"] = body.get("pns", 0)
    rtts = body.get("finger_rtt_ms")
    if not isinstance(rtts, list) or len(rtts) != len(out["fingers"]):
        rtts = [None] * len(out["fingers"])
    for f, ms in zip(out["fingers"], rtts, strict=True):
        if f is not None:
            f["rtt_ms"] = ms if isinstance(ms, int | float) and not isinstance(ms, bool) else None
    services = body.get("services")
    out["services"] = services if isinstance(services, dict) else {}
    consensus = body.get("consensus")  # its groups: held, led, awake; messages rejected, turns failed
    out["consensus"] = {k: v for k, v in consensus.items() if isinstance(k, str) and isinstance(v, int | str)
                        } if isinstance(consensus, dict) else None
    traffic = body.get("traffic")
    out["traffic"] = traffic if isinstance(traffic, dict) else {}
    return out
