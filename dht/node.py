"""ChordNode: routing + store + transport + the maintenance loop.

Two threads. The *server* thread answers requests from the routing table and the store under a
lock and never makes an outbound call, so two nodes calling each other cannot deadlock. The
*maintenance* thread owns the outbound RPC client and runs, each `stabilize` period (with a
little jitter, as the paper randomizes its timers), the protocol of ToN'03 Fig. 6 with successor
lists (§V-B): stabilize + notify, check_predecessor, fix_fingers, then re-replication of owned
keys to the first R-1 successors and expiry of stale replicas. Handlers hand slow work (hand-over
to a new predecessor, replication of a fresh write, a graceful leave) to that thread via a queue.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from dht import wire
from dht.client import iterative_lookup, unreachable
from dht.ids import check_bits, in_half_open, in_open, key_id, node_id
from dht.routing import Peer, RoutingTable
from dht.store import EntryTuple, Store
from dht.transport import Refused, Reply, RpcClient, RpcServer, SocketSetup

log = logging.getLogger(__name__)

ENTRY_BATCH_BYTES = 256 * 1024
QUIET_ROUNDS_BEFORE_INCREMENTAL = 3


@dataclass
class NodeConfig:
    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port chosen at bind time
    join: str | None = None
    id: int | None = None
    bits: int = 64
    successors: int = 8
    replicas: int = 3  # copies of each key in all: the owner and its first replicas-1 successors
    stabilize: float = 0.5
    rpc_timeout: float | None = None  # default: derived from the period
    replica_lease_periods: float = 10.0
    refresh_every: int = 2  # rounds between full replica refreshes
    on_lookup: Callable[[object], None] | None = field(default=None, repr=False)

    def validate(self) -> None:
        check_bits(self.bits)
        if self.join is not None:
            wire.parse_endpoint(self.join)
        if not 0 <= self.port < 65536:
            raise ValueError("port must be in 0..65535")
        if self.id is not None and not 0 <= self.id < (1 << self.bits):
            raise ValueError(f"id must be in 0..2**{self.bits}-1")
        if self.successors < 1 or self.replicas < 1:
            raise ValueError("successors and replicas must be at least 1")
        if self.replicas - 1 > self.successors:
            raise ValueError("replicas - 1 cannot exceed the successor-list length")
        if not 0.01 <= self.stabilize <= 3600:
            raise ValueError("stabilize must be between 0.01 and 3600 seconds")


class ChordNode:
    def __init__(self, config: NodeConfig, setup: SocketSetup | None = None) -> None:
        config.validate()
        self.config = config
        self.setup = setup
        self.lock = threading.RLock()
        self.stopped = threading.Event()
        self.joined = threading.Event()
        self.jobs: queue.Queue[tuple[str, object]] = queue.Queue()
        self.server = RpcServer(config.host, config.port, self._handle, setup=setup)
        nid = config.id if config.id is not None else node_id(config.host, self.server.port, config.bits)
        self.me = Peer(nid, self.server.endpoint)
        self.routing = RoutingTable(self.me, config.bits, config.successors)
        self.store = Store(config.bits)
        self.rounds = 0
        # half a period: a dead peer costs a round at most half its length (loopback answers in <1 ms)
        self.timeout = config.rpc_timeout or max(0.05, min(1.0, config.stabilize / 2))
        self._threads: list[threading.Thread] = []
        self._replicated_to: list[str] = []
        self._last_links: tuple = ()
        self._quiet_rounds = 0
        self._next_finger = 0
        self._ask: Callable[[str, int, Collection[str]], Reply] | None = None  # set by _maintain
        self._handlers: dict[str, Callable[[dict], dict]] = {
            "ping": lambda r: {"node_id": wire.encode_id(self.me.id)},
            "info": lambda r: self.info(),
            "next_hop": self._on_next_hop,
            "get_links": self._on_get_links,
            "notify": self._on_notify,
            "put": self._on_put,
            "get": self._on_get,
            "delete": self._on_delete,
            "replicate": self._on_merge,
            "handover": self._on_merge,
            "leaving": self._on_leaving,
            "leave": self._on_leave,
        }

    @property
    def endpoint(self) -> str:
        return self.me.endpoint

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> ChordNode:
        for name, target in (("server", self._serve), ("maintenance", self._maintain)):
            t = threading.Thread(target=target, name=f"chord-{name}-{self.server.port}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self.stopped.set()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=5)

    def leave(self) -> None:
        """Graceful leave: runs in the maintenance thread, which then stops the node."""
        self.jobs.put(("leave", None))

    def wait(self, timeout: float | None = None) -> bool:
        return self.stopped.wait(timeout)

    def _serve(self) -> None:
        try:
            self.server.serve(self.stopped)
        finally:
            self.server.close()

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

    def info(self) -> dict:
        with self.lock:
            rt = self.routing
            return {
                "node_id": wire.encode_id(self.me.id),
                "endpoint": self.me.endpoint,
                "bits": self.config.bits,
                "predecessor": wire.encode_peer(rt.predecessor),
                "successors": [wire.encode_peer(s) for s in rt.successors],
                "fingers": [wire.encode_peer(f) for f in rt.fingers],
                "keys": self.store.count(rt.owns),
                "stored": self.store.count(),
                "replicas": self.config.replicas,
                "r": self.config.successors,
                "rounds": self.rounds,
                "joined": self.joined.is_set(),
            }

    def _on_next_hop(self, req: dict) -> dict:
        hop = self.routing.next_hop(req["key_id"], req.get("avoid", ()))
        if hop is None:
            raise Refused("no route: every known node is avoided")
        return {"done": hop.done, "peer": wire.encode_peer(hop.peer)}

    def _on_get_links(self, req: dict) -> dict:
        return {"predecessor": wire.encode_peer(self.routing.predecessor),
                "successors": [wire.encode_peer(s) for s in self.routing.successors]}

    def _on_notify(self, req: dict) -> dict:
        old = self.routing.predecessor
        if self.routing.consider_predecessor(req["peer"]):
            self.jobs.put(("handover", (old, req["peer"])))
        return {}

    def _write(self, key: str, value: bytes | None) -> dict:
        kid = key_id(key, self.config.bits)
        if not self.routing.owns(kid):
            raise Refused(f"not the owner of {key!r}")
        version = max(time.time_ns(), self.store.version(key) + 1)
        self.store.write(key, value, version, time.monotonic())
        self.jobs.put(("replicate", None))
        return {"version": version}

    def _on_put(self, req: dict) -> dict:
        return self._write(req["key"], req["value"])

    def _on_delete(self, req: dict) -> dict:
        return self._write(req["key"], None)

    def _on_get(self, req: dict) -> dict:
        value = self.store.get(req["key"])
        return {"found": value is not None, "value": value}

    def _on_merge(self, req: dict) -> dict:
        return {"applied": self.store.merge(req["entries"], time.monotonic())}

    def _on_leaving(self, req: dict) -> dict:
        """A neighbour leaves gracefully: splice it out (ToN'03 §V-D, voluntary departures)."""
        gone: Peer = req["peer"]
        rt = self.routing
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

    def _on_leave(self, req: dict) -> dict:
        self.jobs.put(("leave", None))
        return {"leaving": True}

    # -- maintenance (its own thread, owns the outbound client) -----------------------------------
    def _maintain(self) -> None:
        rpc = RpcClient(timeout=self.timeout, retries=0, setup=self.setup)
        self._ask = self._local_first_ask(rpc)
        try:
            self._join(rpc)
            next_round = time.monotonic()
            while not self.stopped.is_set():
                wait = next_round - time.monotonic()
                try:
                    kind, arg = self.jobs.get(timeout=max(wait, 0.0)) if wait > 0 else self.jobs.get_nowait()
                except queue.Empty:
                    kind, arg = "round", None
                try:
                    if kind == "leave":
                        self._leave(rpc)
                        return
                    if kind == "handover":
                        self._handover(rpc, *arg)
                    elif kind == "replicate":
                        self._replicate(rpc, force=True)
                    elif time.monotonic() >= next_round:
                        self._round(rpc)
                        next_round = time.monotonic() + self.config.stabilize * random.uniform(0.9, 1.1)
                except Exception:  # a maintenance bug must not silently stop the node healing
                    log.exception("maintenance step %s failed", kind)
        finally:
            rpc.close()

    def _join(self, rpc: RpcClient) -> None:
        """join(n'): successor := n'.find_successor(me) (ToN'03 Fig. 6); retried until it works."""
        if self.config.join is None or self.config.join == self.me.endpoint:
            self.joined.set()
            return
        while not self.stopped.is_set():
            found = iterative_lookup(self.me.id, self.config.join, self._remote_ask(rpc),
                                     max_steps=4 * self.config.bits + 16)
            if found.ok and found.owner is not None:
                with self.lock:
                    if found.owner != self.me:
                        self.routing.adopt_successor_list(found.owner, [])
                self._stabilize(rpc)
                self.joined.set()
                log.info("%s joined via %s; successor %s", self.me.endpoint, self.config.join,
                         found.owner.endpoint)
                return
            log.warning("join via %s failed (%s); retrying", self.config.join, found.error)
            self.stopped.wait(self.config.stabilize)

    def _round(self, rpc: RpcClient) -> None:
        self._stabilize(rpc)
        self._check_predecessor(rpc)
        self._fix_fingers(rpc)
        self._replicate(rpc, force=self.rounds % self.config.refresh_every == 0)
        with self.lock:
            self.store.expire(time.monotonic(), self.config.replica_lease_periods * self.config.stabilize,
                              self.routing.owns)
            self.rounds += 1

    def _stabilize(self, rpc: RpcClient) -> None:
        """stabilize(): verify the successor, adopt a closer one, refresh the list, notify it."""
        for _ in range(self.config.successors + 1):
            with self.lock:
                if self.routing.alone:
                    return
                succ = self.routing.successor
            links = rpc.call(succ.endpoint, "get_links")
            if not links.ok:
                if unreachable(links):
                    log.info("%s: successor %s is unreachable", self.me.endpoint, succ.endpoint)
                    with self.lock:
                        self.routing.forget(succ.endpoint)
                    continue
                return
            try:
                x = wire.decode_optional_peer(links.get("predecessor"))
                its = wire.decode_peers(links.get("successors", []))
            except wire.WireError as exc:
                log.warning("bad get_links reply from %s: %s", succ.endpoint, exc)
                return
            with self.lock:
                if x is not None and x != self.me and in_open(x.id, self.me.id, succ.id):
                    self.routing.consider_successor(x)
                    continue  # verify the closer successor and take its list
                self.routing.adopt_successor_list(succ, its)
            if x != self.me:  # the successor already knows us as its predecessor otherwise
                rpc.call(succ.endpoint, "notify", peer=wire.encode_peer(self.me))
            return

    def _check_predecessor(self, rpc: RpcClient) -> None:
        with self.lock:
            pred = self.routing.predecessor
        if pred is None:
            return
        reply = rpc.call(pred.endpoint, "ping")
        if unreachable(reply):
            with self.lock:
                self.routing.forget(pred.endpoint)

    def _fix_fingers(self, rpc: RpcClient) -> None:
        """fix_fingers() (ToN'03 Fig. 6), adaptive.

        While the ring is changing (a successor, predecessor or finger changed within the last
        few rounds) every finger is refreshed each round, as the paper's simulator does, so a
        ring converges in a handful of periods. Once it is quiet, one run of fingers is refreshed
        per round, round-robin like the paper's `next`, which keeps a steady ring's background
        traffic at about one lookup per node per period. One lookup settles every finger that
        the same node must own.
        """
        with self.lock:
            links = (self.routing.predecessor, tuple(self.routing.successors))
        if links != self._last_links:
            self._last_links = links
            self._quiet_rounds = 0
        full = self._quiet_rounds < QUIET_ROUNDS_BEFORE_INCREMENTAL
        changed = False
        i = 0 if full else self._next_finger
        while i < self.config.bits and not self.stopped.is_set():
            with self.lock:
                start = self.routing.finger_start(i)
                succ = self.routing.successor
            if in_half_open(start, self.me.id, succ.id) or succ == self.me:
                owner = succ
            else:
                assert self._ask is not None
                found = iterative_lookup(start, self.me.endpoint, self._ask, max_steps=2 * self.config.bits)
                if self.config.on_lookup is not None:
                    self.config.on_lookup(found)
                if not found.ok or found.owner is None:
                    i += 1
                    continue
                owner = found.owner
            with self.lock:
                changed = changed or self.routing.fingers[i] != owner
                i = self.routing.set_finger(i, owner)[-1] + 1
            if not full and owner != succ:
                break
        self._next_finger = i if i < self.config.bits else 0
        self._quiet_rounds = 0 if changed else self._quiet_rounds + 1

    def _local_first_ask(self, rpc: RpcClient) -> Callable[[str, int, Collection[str]], Reply]:
        """Answer our own step from the table; a peer that times out is forgotten at once."""
        remote = self._remote_ask(rpc)

        def ask(endpoint: str, k: int, avoid: Collection[str]) -> Reply:
            if endpoint != self.me.endpoint:
                reply = remote(endpoint, k, avoid)
                if unreachable(reply):
                    with self.lock:
                        self.routing.forget(endpoint)
                return reply
            with self.lock:
                hop = self.routing.next_hop(k, avoid)
            if hop is None:
                return Reply(False, err="no route")
            return Reply(True, {"done": hop.done, "peer": wire.encode_peer(hop.peer)})

        return ask

    @staticmethod
    def _remote_ask(rpc: RpcClient) -> Callable[[str, int, Collection[str]], Reply]:
        def ask(endpoint: str, k: int, avoid: Collection[str]) -> Reply:
            if avoid:
                return rpc.call(endpoint, "next_hop", key_id=wire.encode_id(k), avoid=list(avoid))
            return rpc.call(endpoint, "next_hop", key_id=wire.encode_id(k))

        return ask

    # -- replication and hand-over ----------------------------------------------------------------
    def _replicate(self, rpc: RpcClient, force: bool) -> None:
        """Push owned entries to the first replicas-1 successors when they change, or to refresh."""
        with self.lock:
            targets = [s.endpoint for s in self.routing.successors[: self.config.replicas - 1]]
            if not targets or (not force and targets == self._replicated_to):
                self._replicated_to = targets
                return
            owned = self.store.select(self.routing.owns)
        if owned:
            for endpoint in targets:
                self._push(rpc, endpoint, "replicate", owned)
        self._replicated_to = targets

    def _handover(self, rpc: RpcClient, old: Peer | None, new: Peer) -> None:
        """A new predecessor joined: give it the entries it now owns (ToN'03 §IV-E, key transfer)."""
        with self.lock:
            if self.routing.predecessor != new:
                return
            if old is not None and old != new:
                moving = self.store.select(lambda k: in_half_open(k, old.id, new.id))
            else:
                moving = self.store.select(lambda k: not in_half_open(k, new.id, self.me.id))
        if moving:
            self._push(rpc, new.endpoint, "handover", moving)

    def _push(self, rpc: RpcClient, endpoint: str, op: str, entries: list[EntryTuple]) -> bool:
        ok = True
        for batch in _batches(entries):
            reply = rpc.call(endpoint, op, entries=[list(e) for e in batch])
            ok = ok and reply.ok
            if unreachable(reply):
                with self.lock:
                    self.routing.forget(endpoint)
                return False
        return ok

    def _leave(self, rpc: RpcClient) -> None:
        """Graceful leave: entries to the successor, then splice ourselves out, then stop."""
        with self.lock:
            succ, pred = self.routing.successor, self.routing.predecessor
            succs = list(self.routing.successors)
            entries = self.store.select(lambda _k: True)
        if succ != self.me:
            self._push(rpc, succ.endpoint, "handover", entries)
            rpc.call(succ.endpoint, "leaving", peer=wire.encode_peer(self.me),
                     predecessor=wire.encode_peer(pred))
        if pred is not None and pred != self.me:
            rpc.call(pred.endpoint, "leaving", peer=wire.encode_peer(self.me),
                     successors=[wire.encode_peer(s) for s in succs])
        log.info("%s left the ring", self.me.endpoint)
        self.stopped.set()


def _batches(entries: list[EntryTuple]) -> list[list[EntryTuple]]:
    """Split entries so that each message stays well under the wire's size limit."""
    batches: list[list[EntryTuple]] = [[]]
    size = 0
    for e in entries:
        esize = len(e[0]) + (len(e[1]) if e[1] else 0) + 16
        if batches[-1] and size + esize > ENTRY_BATCH_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(e)
        size += esize
    return batches
