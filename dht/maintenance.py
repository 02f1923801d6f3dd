"""What a ChordNode (one ring position) says to other nodes, run by its process's maintenance thread.

Each `stabilize` period (with a little jitter, as the paper randomizes its timers) a position runs
the protocol of ToN'03 Fig. 6 with successor lists (§V-B): stabilize + notify, check_predecessor,
fix_fingers; then replicates owned keys to its replicas, expires stale replicas and expired record
fields (whose watchers then hear of it). Between rounds the thread takes jobs that request handlers
queue (hand-over to a new predecessor, replication of fresh writes, a graceful leave), because
handlers themselves never call out. dht/host.py runs the thread: one for all the positions of a
process.

Fingers are kept by dht/fingers.py, copies and hand-overs by dht/replication.py (mixins of the
Maintainer below); this module keeps the ring's pointers (join, stabilize, notify, check_predecessor),
the leased records' expiry and the graceful leave.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable, Collection
from typing import Any, Protocol

from dht import wire
from dht.client import iterative_lookup, unreachable
from dht.fingers import ANNOUNCE_ROUND, FingerMaintenance
from dht.ids import in_open, process_of
from dht.proximity import RoundTrips
from dht.records import Change, namespace
from dht.replication import FULL_EVERY, Replication
from dht.routing import Peer
from dht.store import split_field_key
from dht.transport import Reply, RpcClient


class MaintainedNode(Protocol):
    """What the maintenance thread uses of its node (dht/node.py's ChordNode), named here so that the
    two modules do not import each other."""

    config: Any  # NodeConfig
    me: Peer
    index: int  # the position within its process
    left: bool  # it has left the ring (its process is leaving)
    data_dir: Any  # Path | None: where this position keeps its store
    routing: Any  # RoutingTable, used under `lock`
    store: Any  # Store
    records: Any  # RecordTable
    lock: Any  # threading.RLock
    jobs: queue.Queue
    changes: queue.Queue
    stopped: Any  # threading.Event
    joined: Any  # threading.Event
    server: Any  # RpcServer
    setup: Any  # SocketSetup | None
    timeout: float
    rounds: int
    requests_bytes: int
    round_trips: Any  # dht/proximity.py RoundTrips, shared by the positions of a process
    members: Any  # dht/membership.py Members, used under `lock`
    remembered_at_start: int  # members loaded from the data directory
    predecessor_heard: float  # monotonic time the predecessor last asked for our links
    handed_foreign: set  # keys a hand-over gave us that others own: hand_back gives them on

    def write_field(self, composite: str, raw: bytes | None) -> int: ...

log = logging.getLogger(__name__)

LAPSES_NAMED = 3  # fields named in the log line of a round's lapsed leases
MISSES_TO_FORGET = 2  # unanswered calls in a row after which a peer whose connection is up is forgotten
PREDECESSOR_HEARD = 1.5  # times the periods to its next round (it says, `every`) within which the
# predecessor's own get_links proves it alive (10% jitter; dht/pacing.py). A killed one closes the
# connection we hold to it (`watch`), which makes us suspect it and ping it at once.

AskFn = Callable[[str, int, Collection[str]], Reply]


class Maintainer(FingerMaintenance, Replication):
    """One position's protocol state; `rpc` and `round_trips` are its process's maintenance thread's,
    shared by all its positions (one socket, and round trips kept per peer process)."""

    def __init__(self, node: MaintainedNode, rpc: RpcClient, round_trips: RoundTrips) -> None:
        self.node = node
        self.config = node.config
        self.me = node.me
        self.rpc = rpc
        self.round_trips = round_trips  # every call's round trip: PNS chooses fingers by them
        node.round_trips = round_trips
        # a peer found dead: this position forgets every position of its process (a process dies whole);
        # the others of ours, if they call it within the same round, are told at once (dht/local_calls.py)
        self.lost: Callable[[str], None] = self.forget_process
        self.init_fingers()
        self.init_replication()
        self._pred_missed = 0
        self.paced = False  # its rounds are further apart than a period (dht/pacing.py): refresh every round
        self.next_round_periods = 1  # periods to its next round at most, if this one changes nothing
        self.suspect = False  # a connection of the process closed: ping the predecessor however lately heard
        self._last_successor: Peer | None = None  # for the successor-changes counter
        self._last_neighbours: tuple = ()  # (successor, predecessor) at the end of the last round
        self.me_encoded = wire.encode_peer(self.me)

    @property
    def routing(self):  # noqa: ANN201 - the node's RoutingTable, always used under node.lock
        return self.node.routing

    def job(self, kind: str, arg: object) -> None:
        """A job a request handler queued: hand entries to a new predecessor, push fresh writes, or
        stabilize now (a joining node told us of itself)."""
        if kind == "handover":
            self.handover(*arg)  # type: ignore[misc]
        elif kind == "replicate":
            self.replicate(full=False)
        elif kind == "stabilize":  # a node named itself as our successor: see whether it is
            self.stabilize()
        elif kind == "fingers":  # a node joined that begins one of our finger intervals
            self.refresh_fingers()

    def expire_entries(self) -> list[str]:
        """Drop the replicas whose owner stopped refreshing them. What a hand-over or hand-back still owes
        its owner is no replica: it stays until given, or a merge that moves many arcs at once loses the
        keys of the arcs whose hand-over had not run yet."""
        routing, node = self.routing, self.node
        pred = routing.predecessor
        me = routing.me.id
        # the arc `owns` means: (me, me], every key, alone, with no predecessor known, or handing back
        arc = (me, me) if self._hand_back_pending or pred is None or routing.alone else (pred.id, me)
        owns = (lambda _k: True) if self._hand_back_pending else routing.owns
        return node.store.expire(node.rounds, self.config.replica_lease_periods, owns, owed=node.handed_foreign,
                                 arc=arc)

    # -- the protocol -----------------------------------------------------------------------------
    def join(self, via: list[str] | None = None) -> None:
        """join(n'): successor := n'.find_successor(n) (ToN'03 Fig. 6), through the seeds of `--join` in
        turn, then the members this node remembers from its data directory (dht/membership.py). A
        process's later positions join through its first (`via`), which is in the ring by then.

        A new ring is started only when none of them answers, and only by a node that may do so: one
        named among the seeds (every node of a deployment may be given the same list), or one that
        remembers members (a restart). Such a node keeps them remembered and probes them, so the rings
        merge once they answer (dht/prober.py). A node given only others' endpoints keeps trying until
        `join_timeout` passes, then gives up: it was told to join a ring that is not there.
        """
        node = self.node
        seeds = self.config.seeds if via is None else via
        with node.lock:
            candidates = [e for e in seeds if e != self.me.endpoint]
            candidates += [e for e in node.members.endpoints() if e not in candidates]
        may_start = via is None and (not seeds or self.me.endpoint in seeds or node.remembered_at_start > 0)
        if not candidates:
            node.started_ring = True
            node.joined.set()
            return
        deadline = None if self.config.join_timeout is None else time.monotonic() + self.config.join_timeout
        while not node.stopped.is_set():
            errors = []
            getattr(self.rpc, "new_cycle", lambda: None)()  # each attempt asks every candidate afresh
            for endpoint in candidates:
                # avoiding our own endpoint: a ring that has not yet noticed our restart may still route
                # our id to us; what we want is the next live node
                found = iterative_lookup(self.me.id, endpoint, self.remote_ask, max_steps=4 * self.config.bits + 16,
                                         avoid=(self.me.endpoint,))
                if found.ok and found.owner is not None and found.owner != self.me:
                    with node.lock:
                        self.routing.adopt_successor_list(found.owner, [])
                    self.stabilize()
                    node.joined.set()
                    log.info("%s joined via %s; successor %s", self.me.endpoint, endpoint, found.owner.endpoint)
                    return
                errors.append(f"{endpoint}: {found.error or 'routed to ourselves'}")
                if node.stopped.is_set():
                    return
            with node.lock:
                joined_by_others = not self.routing.alone  # a node that joined through us meanwhile
            if joined_by_others or may_start:
                node.started_ring = True  # the ring began here (others that joined meanwhile joined it)
                node.joined.set()
                if not joined_by_others:
                    log.warning("%s: none of %s answered: starting a new ring; they stay remembered and "
                                "are probed, so the rings merge when they answer", self.me.endpoint,
                                ", ".join(candidates))
                return
            if deadline is not None and time.monotonic() + self.config.stabilize > deadline:
                node.join_error = (f"could not join the ring via {', '.join(candidates)} within "
                                   f"{self.config.join_timeout:g}s ({'; '.join(errors)})")
                node.stopped.set()
                return
            log.debug("join failed (%s); retrying", "; ".join(errors))
            node.stopped.wait(self.config.stabilize)

    def round(self) -> None:
        self.ring_round()
        self.rest_round()

    def ring_round(self) -> None:
        """The part of a round that keeps the ring one loop (ToN'03 Fig. 6): a process of several
        positions runs it for every position due before any of `rest_round`, whose lookups may wait
        on dead peers."""
        self.stabilize()
        self.check_predecessor()

    def rest_round(self) -> None:
        """Fingers, replication, expiry: the rest of a round."""
        node = self.node
        self.fix_fingers()
        if node.rounds == ANNOUNCE_ROUND and not node.started_ring:
            self.announce_join()
        self.replicate(full=node.rounds % FULL_EVERY == 0,
                       refresh=self.paced or node.rounds % self.config.refresh_every == 0)
        self.expire_records()
        node.check_policy()
        if self._hand_back_pending or node.handed_foreign:
            self.hand_back()
        with node.lock:
            self.expire_entries()
            node.rounds += 1
            successor = self.routing.successor
            if successor != self._last_successor:
                node.successor_changes += self._last_successor is not None
                self._last_successor = successor
            links = (successor, self.routing.predecessor)
            if links != self._last_neighbours:
                node.links_changed_round = node.rounds
                self._last_neighbours = links

    def stabilize(self) -> None:
        """stabilize(): verify the successor, adopt a closer one, refresh the list, notify it."""
        lock = self.node.lock
        for _ in range(self.config.successors + 1):
            with lock:
                if self.routing.alone:
                    return
                succ = self.routing.successor
            self.fresh_if_down(succ.endpoint)
            known_silent = process_of(succ.endpoint) in getattr(self.rpc, "silent", ())
            links = self.rpc.call(succ.endpoint, "get_links", peer=self.me_encoded, every=self.next_round_periods,
                                  **self._refresh_along(succ))
            if self._refreshed == succ.endpoint and "refreshed" not in links.body:
                self._refreshed = None  # not taken along (no reply, or a node that does not know how)
            if not links.ok:
                if unreachable(links) and self.dead(succ.endpoint, links):
                    if not known_silent:
                        log.info("%s: successor %s is unreachable", self.me.endpoint, succ.endpoint)
                    self.lost(succ.endpoint)
                    continue
                return  # an error it answered, or one slow answer: asked again next round
            try:
                x = wire.decode_optional_peer(links.get("predecessor"))
                its = wire.decode_peers(links.get("successors", []))
            except wire.WireError as exc:
                log.warning("bad get_links reply from %s: %s", succ.endpoint, exc)
                return
            with lock:
                if x is not None and x != self.me and in_open(x.id, self.me.id, succ.id) and \
                        process_of(x.endpoint) not in getattr(self.rpc, "silent", ()):  # not one just found dead
                    self.routing.consider_successor(x)
                    continue  # verify the closer successor and take its list
                self.routing.adopt_successor_list(succ, its)
            if x != self.me:  # the successor already knows us as its predecessor otherwise
                self.rpc.call(succ.endpoint, "notify", peer=self.me_encoded)
                if x is not None and not self.round_trips.down(x.endpoint):
                    # its predecessor until now learns of us at once, not at its next (paced) round
                    self.rpc.call(x.endpoint, "notify", peer=self.me_encoded)
            return

    def dead(self, endpoint: str, reply: Reply) -> bool:
        """Whether a peer that did not answer is to be forgotten: its process is gone (its connection
        closed or refused), or it missed MISSES_TO_FORGET calls in a row. A live but busy peer (a loaded
        machine, a node answering thousands of renewals) misses one now and then; forgetting it on the
        first would tear the ring where it stands, while a dead process says so at once."""
        return reply.gone or self.round_trips.misses(endpoint) >= MISSES_TO_FORGET

    def forget_process(self, endpoint: str) -> None:
        with self.node.lock:
            self.routing.forget_process(endpoint)

    def fresh_if_down(self, endpoint: str) -> None:
        """A peer that did not answer lately gets a new connection before it is asked again: one
        begun while a partition cut it off may still be waiting on a lost SYN (up to the connect
        timeout) when the link heals and another node names the peer alive again."""
        self.round_trips.now = self.node.rounds
        if self.round_trips.down(endpoint):
            self.rpc.reset(endpoint)

    def check_predecessor(self) -> None:
        """check_predecessor() (ToN'03 Fig. 6), forgetting it after two missed pings in a row, or at
        once when its process is gone: the predecessor decides what this node owns, and one slow
        answer from a busy neighbour is not a death worth a round of hand-overs. A predecessor that
        asked for our links within the last PREDECESSOR_HEARD periods (its stabilize does, every
        round) is alive without a ping: an idle ring's check costs nothing."""
        with self.node.lock:
            pred = self.routing.predecessor
            heard = self.node.predecessor_heard
        suspect, self.suspect = self.suspect, False
        if pred is None:
            return
        self.rpc.watch(pred.endpoint)  # its death closes this connection: we suspect it at once
        suspect = suspect or self.rpc.connection_lost(pred.endpoint)  # (or it died before we connected)
        quiet_for = PREDECESSOR_HEARD * self.node.predecessor_every * self.config.stabilize
        if not suspect and time.monotonic() - heard < quiet_for:
            self._pred_missed = 0
            return
        self.fresh_if_down(pred.endpoint)
        reply = self.rpc.call(pred.endpoint, "ping")
        if not unreachable(reply):
            self._pred_missed = 0
            return
        self._pred_missed += 1
        if reply.gone or self._pred_missed >= 2:
            self._pred_missed = 0
            self.lost(pred.endpoint)

    def leave(self) -> None:
        """Graceful leave: entries to the successor, then splice ourselves out (the process stops once
        every position has left)."""
        node = self.node
        with node.lock:
            succ, pred = self.routing.successor, self.routing.predecessor
            succs = list(self.routing.successors)
            entries = node.store.select(lambda _k: True)
        if succ != self.me:
            if self.push(succ.endpoint, "handover", entries):
                with node.lock:
                    node.store.clear()  # all handed over: a restart from --data-dir starts empty
            self.rpc.call(succ.endpoint, "leaving", peer=wire.encode_peer(self.me),
                          predecessor=wire.encode_peer(pred))
        if pred is not None and pred != self.me:
            self.rpc.call(pred.endpoint, "leaving", peer=wire.encode_peer(self.me),
                          successors=[wire.encode_peer(s) for s in succs])
        node.left = True
        log.info("%s left the ring", self.me.endpoint)

    # -- leased records ----------------------------------------------------------------------------
    def expire_records(self) -> None:
        """The owner deletes fields whose lease has passed, and their watchers hear of it. A lease is
        judged at the last moment the server had nothing waiting, not at the clock: a node too busy
        to read its queue must not expire the fields whose renewals sit in it."""
        node = self.node
        now = min(time.time(), node.server.caught_up())
        with node.lock:
            pred = self.routing.predecessor
            gone = node.records.expired(now, self.routing.owns_strictly,
                                        arc=(self.routing.alone, pred.id if pred is not None else None))
            if gone:  # one line a round: a client gone with thousands of fields is one event, not thousands
                named = ", ".join(f"{n} on {k!r}" for k, n in map(split_field_key, gone[:LAPSES_NAMED]))
                more = f" and {len(gone) - LAPSES_NAMED} more" if len(gone) > LAPSES_NAMED else ""
                log.info("%s: the lease of %s%s ran out", self.me.endpoint, named, more)
            for composite in gone:
                key, name = split_field_key(composite)
                prev = node.records.epoch(key, namespace(name))
                version = node.write_field(composite, None)
                node.changes.put(Change(key, name, None, node.records.epoch(key, namespace(name)) or version, prev,
                                        node.index))
        if gone:
            self.replicate(full=False)
