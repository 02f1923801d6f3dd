"""ChordNode: one position on the ring — routing, store, records and the requests it answers.

A process holds one position or several (virtual nodes, SIGCOMM'01 §6.2: `node start --vnodes V`);
dht/host.py's ChordHost runs them behind one RPC socket with one thread of each kind. The *server*
thread answers requests from a position's routing table and store under that position's lock and
never makes an outbound call, so two nodes calling each other cannot deadlock. The *maintenance*
thread (dht/maintenance.py) owns the outbound calls: the periodic protocol of ToN'03 Fig. 6,
replication, hand-over, and telling record watchers what changed. Handlers pass it slow work through
a queue.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from dht import wire
from dht.durable import DurableStore
from dht.hop_reply import encode_peer as lane_peer
from dht.hop_table import HopTable
from dht.ids import in_half_open, in_open, key_id, position_endpoint
from dht.membership import Members
from dht.node_config import NodeConfig
from dht.policy import item_refusal, refusal
from dht.prober import Prober
from dht.records import NOT_OWNER, REPLY_BUDGET, Change, RecordTable, namespace
from dht.routing import Peer, RoutingTable
from dht.scaling import split_point
from dht.shared import Jobs, Shared
from dht.store import Store, entry_key_id, split_field_key
from dht.subjects import PREFIX_RECORD
from dht.transport import Refused

log = logging.getLogger(__name__)

MIN_TIMEOUT = 0.25  # seconds the maintenance waits for a peer's reply, at the least


class ChordNode:
    """One ring position. `index` 0 is the process's own endpoint and id; position i > 0 is
    "host:port/i" with the id of that string (dht/ids.py), and keeps its store under
    DIR/position-i with --data-dir."""

    def __init__(self, config: NodeConfig, shared: Shared, index: int = 0) -> None:
        self.config = config
        self.shared = shared
        self.index = index
        self.server = shared.server
        self.setup = shared.setup
        self.stopped = shared.stopped
        self.changes = shared.changes
        self.policy = shared.policy
        self.denials = shared.denials
        self.lock = threading.RLock()
        self.joined = threading.Event()
        self.left = False  # this position has left the ring (its process is leaving)
        self.join_error: str | None = None  # why the node gave up joining (join_timeout passed)
        self.started_ring = False  # this position found no ring to join and began one (its consensus groups too)
        self.jobs = Jobs(shared.jobs, index)
        endpoint = position_endpoint(self.server.endpoint, index)
        nid = config.id if config.id is not None and index == 0 else key_id(endpoint, config.bits)
        self.me = Peer(nid, endpoint)
        self.routing = RoutingTable(self.me, config.bits, config.successors, prs=config.prs)
        self.hops = HopTable(self.routing, lane_peer)  # next_hop's answers: see hop_table()
        self.records = RecordTable(config.bits)
        observer = self.records.observe
        self.data_dir = (None if config.data_dir is None
                         else config.data_dir if index == 0 else Path(config.data_dir) / f"position-{index}")
        self.store = (DurableStore(config.bits, self.data_dir, nid, observer) if self.data_dir
                      else Store(config.bits, observer))
        self.round_trips = None  # set by the host: its calls' round trips (dht/proximity.py)
        self.rounds = 0
        self.successor_changes = 0  # rounds that ended with a different successor (metrics)
        self.links_changed_round = 0  # `rounds` when the successor or predecessor last changed
        self.predecessor_heard = float("-inf")  # when the predecessor last asked for our links (stabilize)
        self.predecessor_every = 1  # and the periods to its next round at most, as it said then
        self.handed_foreign: set[str] = set()  # keys handed over to us that others own (_on_handover)
        # next_hop requests answered by the handler (the server's, and the maintenance thread's own
        # lookups: dht/local_calls.py), under the lock; and by the server's lane (dht/hop_lane.py), which
        # only the server thread writes, without it
        self.steps_handled = 0
        self.steps_in_lane = 0
        self.record_items = 0  # items of `records` requests on records it owns: registrations, renewals, reads
        self.record_writes = 0  # of which changed a record: registrations, unregistrations
        self.bytes_in = 0  # requests to this position
        self.replies_bytes = 0  # its replies
        self.requests_bytes = 0  # its own requests (the maintenance thread's, for it)
        self.requests_sent = 0  # and how many
        self.events_bytes = 0  # record changes published for it (set by the notifier)
        self.events = 0
        self.relay = None  # the relay its process runs (pubsub/relay.py), counted on position 0
        self.neighbours_left: deque[str] = deque(maxlen=16)  # told by `leaving`: `ring watch` says "left"
        # half a period, so that a dead peer costs a round at most half its length (loopback answers in
        # <1 ms), but a quarter second at least: a live peer on a loaded machine can be that slow, and
        # taking it for dead breaks the ring where it stands (its process holds all its positions)
        self.timeout = config.rpc_timeout or max(MIN_TIMEOUT, min(1.0, config.stabilize / 2))
        # the nodes this node has known (dht/membership.py): seeds, and with --data-dir those of its last run
        self.members = Members(self.me.endpoint, config.seeds)
        self.remembered_at_start = self.members.load(self.data_dir) if self.data_dir else 0
        self.prober = Prober(self)
        self._said_error: str | None = None
        self._handlers: dict[str, Callable[[dict], dict]] = {
            "ping": lambda r: {"node_id": wire.encode_id(self.me.id), "bits": self.config.bits},
            "info": lambda r: self.info(r.get("topics", 0)),
            "next_hop": self._on_next_hop,
            "get_links": self._on_get_links,
            "notify": self._on_notify,
            "joined": self._on_joined,
            "put": self._on_put,
            "get": self._on_get,
            "delete": self._on_delete,
            "replicate": self._on_merge,
            "handover": self._on_handover,
            "leaving": self._on_leaving,
            "leave": self._on_leave,
            "records": self._on_records,
            "refresh": self._on_refresh,
            "digest": lambda r: {"same": self.store.arc_digest(r["from"], r["to"]) == r["digest"]},
            "unify": self._on_unify,
        }

    @property
    def endpoint(self) -> str:
        return self.me.endpoint

    # -- request handlers (server thread; no outbound calls) --------------------------------------
    def _handle(self, request: dict) -> dict:
        self._check_ranges(request)
        with self.lock:
            return self._handlers[request["op"]](request)

    def _check_ranges(self, request: dict) -> None:
        """Ids must lie on this ring's circle; the wire layer only knows they are integers."""
        size = 1 << self.config.bits
        if request.get("key_id", 0) >= size:
            raise Refused(f"key_id outside this {self.config.bits}-bit ring")
        if "peer" not in request:
            return
        peers = [request["peer"], request.get("predecessor"), *request.get("successors", ())]
        if any(p is not None and p.id >= size for p in peers):
            raise Refused(f"peer id outside this {self.config.bits}-bit ring")

    def info(self, topics: int = 0) -> dict:
        """The node's state for `node info`, `ring check` and `ring watch`; with topics=N also the names
        of up to N record keys (topics) it owns."""
        with self.lock:
            rt = self.routing
            ids = {k: key_id(k, self.config.bits) for k in self.records.fields}
            owned = [k for k, i in ids.items() if rt.owns(i)]
            return {
                "node_id": wire.encode_id(self.me.id),
                "endpoint": self.me.endpoint,
                "process": self.server.endpoint,  # the process holding this position
                "positions": list(self.shared.positions),  # every position of that process, in index order
                "bind": f"{self.config.bind or self.config.host}:{self.server.port}",
                "bits": self.config.bits,
                "predecessor": wire.encode_peer(rt.predecessor),
                "successors": [wire.encode_peer(s) for s in rt.successors],
                "fingers": [wire.encode_peer(f) for f in rt.fingers],
                "finger_rtt_ms": [self._rtt(f) for f in rt.fingers],
                "pns": self.config.pns,
                "keys": self.store.count(rt.owns),
                "stored": self.store.count(),
                "replicas": self.config.replicas,
                "r": self.config.successors,
                "rounds": self.rounds,
                "links_changed_round": self.links_changed_round,
                "joined": self.joined.is_set(),
                "services": dict(self.config.services),
                "traffic": self.traffic(),
                "records": len(owned),
                "denials": dict(self.denials.count),
                "consensus": self.shared.consensus() if self.shared.consensus is not None else None,
                "lookups_served": self.next_hops_served,
                "load": self.load(len(owned), [ids[k] for k in owned]),
                "neighbours_left": list(self.neighbours_left),
                "remembered": self.members.rows(time.time()),
                "probes": self.prober.probes,
                "probe_bytes": self.prober.bytes_sent,
                "merges": self.prober.merges,
                **({"topics": sorted(k for k in owned if not k.endswith(PREFIX_RECORD))[:topics]} if topics else {}),
            }

    def load(self, records: int, owned_ids: list[int]) -> dict:
        """What this node carries (`chordpub ring load` turns two of these into rates): records owned,
        and counters since start: record items served and the writes among them, lookup steps
        served, bytes in (requests) and out (replies, own requests, record events), and what its relay
        took from publishers; and the id that would split its load in two (`ring autoscale`,
        dht/scaling.py). Called with the lock held."""
        traffic = self.traffic()
        relay = self.relay.stats() if self.relay is not None and self.index == 0 else None
        pred = self.routing.predecessor
        split = split_point(pred.id if pred else None, self.me.id, owned_ids, self.config.bits)
        return {"time": time.time(), "records": records, "record_items": self.record_items,
                "record_writes": self.record_writes, "lookup_steps": self.next_hops_served,
                "bytes_in": self.bytes_in,
                "bytes_out": traffic["replies_bytes"] + traffic["requests_bytes"] + traffic["events_bytes"],
                "relay_messages": None if relay is None else relay["messages"],
                "relay_bytes": None if relay is None else relay["bytes"],
                "split_id": wire.encode_id(split) if split is not None else None}

    def _rtt(self, peer: Peer | None) -> float | None:
        if peer is None or self.round_trips is None:
            return None
        ms = self.round_trips.get(peer.endpoint)
        return None if ms is None else round(ms, 3)

    def traffic(self) -> dict:
        """Bytes this position sent: replies, its own requests (stabilization, replication, lookups), and
        record changes published (counted once: libzmq copies them to each watcher). Records held."""
        return {"replies_bytes": self.replies_bytes, "requests_bytes": self.requests_bytes,
                "requests": self.requests_sent,
                "events_bytes": self.events_bytes, "events": self.events,
                "record_fields": sum(len(f) for f in self.records.fields.values())}

    @property
    def next_hops_served(self) -> int:
        """next_hop requests answered: the lookup steps this node served."""
        return self.steps_handled + self.steps_in_lane

    def _on_next_hop(self, req: dict) -> dict:
        self.steps_handled += 1
        avoid = req.get("avoid")
        if avoid:
            hop = self.routing.next_hop(req["key_id"], avoid)
            answer = None if hop is None else (hop.done, wire.encode_peer(hop.peer))
        else:
            answer = self.hop_table().next_hop(req["key_id"])
        if answer is None:
            raise Refused("no route: every known node is avoided")
        return {"done": answer[0], "peer": answer[1]}

    def hop_table(self) -> HopTable:
        """next_hop's answers as the routing table now stands (dht/hop_table.py). Called with the lock held."""
        if not self.hops.current(self.routing):
            self.hops = HopTable(self.routing, lane_peer)
        return self.hops

    def _on_get_links(self, req: dict) -> dict:
        asker = req.get("peer")
        if asker is not None and asker == self.routing.predecessor:
            self.predecessor_heard = time.monotonic()
            self.predecessor_every = req.get("every", 1)
        refreshed = self._on_refresh(req) if "from" in req and "to" in req else {}
        return {**refreshed, "predecessor": wire.encode_peer(self.routing.predecessor),
                "successors": [wire.encode_peer(s) for s in self.routing.successors]}

    def _on_notify(self, req: dict) -> dict:
        """notify(n') (ToN'03 Fig. 6); from a node between us and our successor, it is a joining node
        telling its successor's old predecessor (us) of itself: we stabilize now, which checks it."""
        peer = req["peer"]
        successor = self.routing.successor
        if successor != self.me and in_open(peer.id, self.me.id, successor.id):
            self.jobs.put(("stabilize", None))
            return {}
        old = self.routing.predecessor
        if self.routing.consider_predecessor(peer):
            # what moves to `peer` leaves only through the hand-over job: no expiry in between drops it
            if old is None:
                self.store.refresh(lambda k: not in_half_open(k, peer.id, self.me.id), self.rounds)
            else:
                self.store.refresh_arc(old.id, peer.id, self.rounds)
            self.jobs.put(("handover", (old, peer)))
        return {}

    def _on_joined(self, req: dict) -> dict:
        """A node that joined tells us of itself (SIGCOMM'01 Fig. 6, update_others): when it now comes
        before the finger we hold for one of our intervals, the fingers are refreshed at once rather than
        at a quiet ring's next cycle. `stale` says so: the joined node then tells our predecessor too."""
        stale = self.routing.comes_before_a_finger(req["peer"])
        if stale:
            self.jobs.put(("fingers", None))
        return {"stale": stale}

    def _check_owner(self, key: str) -> None:
        if not self.routing.owns(key_id(key, self.config.bits)):
            raise Refused(f"not the owner of {key!r}")

    def _write(self, key: str, value: bytes | None, record: bool = False) -> dict:
        """A write by the owner: a new version, replicated to the successors right away."""
        if not record:
            self._check_owner(key)
        version = max(time.time_ns(), self.store.version(key) + 1)
        self.store.write(key, value, version, self.rounds, record=record)
        self.jobs.put(("replicate", None))
        return {"version": version}

    def write_field(self, composite: str, raw: bytes | None) -> int:
        """Store a record field (caller holds the lock and owns the record); returns its version."""
        version = max(time.time_ns(), self.store.version(composite) + 1)
        self.store.write(composite, raw, version, self.rounds, record=True)
        return version

    def _on_records(self, req: dict) -> dict:
        """Items on records this node owns: writes, renewals (O(1): a lease deadline), reads. An item
        on a record owned elsewhere is answered "not the owner" and the others still apply. The reply
        names this node's arc and services when asked ("about"), so a client learns which records it
        owns without lookups (renewals do not ask: they are the bulk of a node's requests). Asked
        "replicated", it also says how many writes it has made and how many its successors hold, so
        a writer can wait until what it wrote would survive this node's crash."""
        now = time.time()
        results, wrote, budget = [], False, [REPLY_BUDGET]
        for item in req["items"]:
            if not self.routing.owns_strictly(key_id(item["k"], self.config.bits)):
                results.append({"ok": False, "err": NOT_OWNER})
                continue
            denied = self._denied(req["principal"], item) if self.policy is not None else None
            if denied is not None:
                results.append({"ok": False, "err": denied})
                continue
            self.record_items += 1
            applied = self.records.apply(item, now)
            if applied.write is not None:
                self.record_writes += 1
                composite, raw = applied.write
                key, name = split_field_key(composite)
                prev = self.records.epoch(key, namespace(name))
                version = self.write_field(composite, raw)
                wrote = True
                if applied.news:
                    self.changes.put(Change(key, name, None if raw is None else item.get("val"),
                                            self.records.epoch(key, namespace(name)) or version, prev,
                                            self.index))
            results.append(self.records.answer(item, applied.reply, budget) if applied.reply["ok"] else applied.reply)
        if wrote:
            self.jobs.put(("replicate", None))
        out: dict = {"results": results}
        if req.get("replicated"):  # this node's writes so far, and how many its successors hold
            out.update(written=self.store.writes, replicated=self.store.replicated)
        if req.get("about"):  # a node alone owns every key: its arc is (me, me]
            pred = self.me if self.routing.alone else self.routing.predecessor
            out.update(arc=[None if pred is None else wire.encode_id(pred.id), wire.encode_id(self.me.id)],
                       services=dict(self.config.services))
        return out

    def _denied(self, principal: str | None, item: dict) -> str | None:
        """Under a policy: why `principal` may not have this `records` item (dht/policy.py
        item_refusal), or None."""
        refused = item_refusal(self.policy.policy, principal, item)  # type: ignore[union-attr]
        if refused is None:
            return None
        what, target, d = refused
        self.denials(principal, target, what, d.rule)
        return refusal(principal, what, target, d.rule)

    def check_policy(self) -> None:
        """Read the policy file again if it changed (the maintenance thread, every round); the events
        socket then lets every watcher subscribe again under it (dht/notifier.py)."""
        if self.policy is None:
            return
        if self.policy.check():
            log.warning("%s changed: registrations and record reads are judged by it from now on",
                        self.policy.path)
        elif self.policy.error and self.policy.error != self._said_error:
            log.error("%s (the policy in force is kept)", self.policy.error)
        self._said_error = self.policy.error

    def _on_refresh(self, req: dict) -> dict:
        lo, hi = req["from"], req["to"]
        return {"refreshed": self.store.refresh_arc(lo, hi, self.rounds)}

    def _on_put(self, req: dict) -> dict:
        return self._write(req["key"], req["value"])

    def _on_delete(self, req: dict) -> dict:
        return self._write(req["key"], None)

    def _on_get(self, req: dict) -> dict:
        value = self.store.get(req["key"])
        return {"found": value is not None, "value": value}

    def _on_merge(self, req: dict) -> dict:
        return {"applied": self.store.merge(req["entries"], self.rounds)}

    def _on_handover(self, req: dict) -> dict:
        """Entries a successor (or a leaving node) gives us. While rings merge, a successor hands its new
        predecessor everything from its old one up, though nodes of the other ring that sit in between
        own part of it: what we do not own goes on to its owner (hand_back, next round; the set holds at most
        the store's keys, and what is handed on leaves it)."""
        reply = self._on_merge(req)
        bits = self.config.bits
        owns = self.routing.owns
        self.handed_foreign.update(e[0] for e in req["entries"] if not owns(entry_key_id(e[0], bits, e[3])))
        return reply

    def _on_leaving(self, req: dict) -> dict:
        """A neighbour leaves gracefully: splice it out (ToN'03 §V-D, voluntary departures)."""
        gone: Peer = req["peer"]
        rt = self.routing
        self.neighbours_left.append(gone.endpoint)
        if rt.predecessor == gone:
            pred = req.get("predecessor")
            rt.predecessor = pred if pred is not None and pred != self.me else None
        if gone in rt.successors:
            rest = [s for s in req.get("successors", []) if s != gone]
            rt.forget(gone.endpoint)
            if rest:
                rt.adopt_successor_list(rest[0], rest[1:])
        else:
            rt.forget(gone.endpoint)
        return {}

    def _on_unify(self, req: dict) -> dict:
        """A node of another ring (or that was): the prober looks our id up through it (dht/prober.py)."""
        return {"queued": self.prober.hint(req["peer"], req["hops"])}

    def _on_leave(self, req: dict) -> dict:
        self.jobs.put(("leave", None))
        return {"leaving": True}
