"""What a ChordNode (one ring position) says to other nodes, run by its process's maintenance thread.

Each `stabilize` period (with a little jitter, as the paper randomizes its timers) a position runs
the protocol of ToN'03 Fig. 6 with successor lists (§V-B): stabilize + notify, check_predecessor,
fix_fingers; then replicates owned keys to its replicas, expires stale replicas and expired record
fields (whose watchers then hear of it). Between rounds the thread takes jobs that request handlers
queue (hand-over to a new predecessor, replication of fresh writes, a graceful leave), because
handlers themselves never call out. dht/host.py runs the thread: one for all the positions of a
process.

Replication (SIGCOMM'01 §6.4, successor-list replication) is incremental, so that a write costs
the owner the entries it changed, not everything it holds: a write pushes just the entries written
since the last push; every `refresh_every` rounds a one-line `refresh` of the owner's arc keeps the
replicas' leases alive; everything is pushed when the replica set changes, and every FULL_EVERY
rounds to repair anything a lost push missed. The replicas are the first successors of other
processes, one each (`replica_targets`): copies on the positions of the owner's own process would
die with it.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable, Collection
from typing import Any, Protocol

from dht import wire
from dht.client import iterative_lookup, unreachable
from dht.ids import in_half_open, in_open, process_of
from dht.proximity import RoundTrips, choose, interval_candidates
from dht.records import Change, namespace
from dht.routing import Peer
from dht.store import EntryTuple, entry_key_id, split_field_key
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

    def write_field(self, composite: str, raw: bytes | None) -> int: ...

log = logging.getLogger(__name__)

ENTRY_BATCH_BYTES = 256 * 1024
QUIET_ROUNDS_BEFORE_INCREMENTAL = 3
FULL_EVERY = 20  # rounds between full pushes to the replicas (anti-entropy)
MISSES_TO_FORGET = 2  # unanswered calls in a row after which a peer whose connection is up is forgotten
MAX_FINGER_GAP = 8  # a quiet ring's rounds between finger refreshes, at most (doubling while nothing changes)
SAMPLES_REUSED = 4  # refreshes of a finger that take its PNS samples from the last list fetched, if its first
# node is the same (the samples' round trips keep coming from every other call)
PREDECESSOR_HEARD = 1.5  # periods within which the predecessor's own get_links proves it alive (its
# rounds are a period apart, with 10% jitter): a dead one is pinged, and found, half a period later at most

AskFn = Callable[[str, int, Collection[str]], Reply]


def replica_targets(me: Peer, successors: list[Peer], count: int) -> list[Peer]:
    """Where copies of `me`'s keys go: the first successor of each of the next `count` processes other
    than `me`'s own (one position each), so that the copies outlive any one process."""
    taken = {process_of(me.endpoint)}
    out: list[Peer] = []
    for s in successors:
        if len(out) >= count:
            break
        process = process_of(s.endpoint)
        if process not in taken:
            taken.add(process)
            out.append(s)
    return out


class Maintainer:
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
        self._replicated_to: list[str] = []
        self._last_links: tuple = ()
        self._quiet_rounds = 0
        self._next_finger = 0
        self._finger_gap = 1  # quiet rounds between finger refreshes (MAX_FINGER_GAP)
        self._finger_wait = 0  # rounds left before the next one
        self._cycle_changed = False  # a finger changed in the current round-robin cycle
        self._samples: dict[int, tuple[Peer, list[Peer], int]] = {}  # level -> (first, samples, uses left)
        self._hand_back_pending = node.store.loaded > 0  # restarted from --data-dir
        self._pred_missed = 0
        self._firsts: dict[int, Peer] = {}  # finger index -> the first node of its interval, last seen
        self._last_successor: Peer | None = None  # for the successor-changes counter
        self._last_neighbours: tuple = ()  # (successor, predecessor) at the end of the last round
        self.me_encoded = wire.encode_peer(self.me)
        self._refreshed: str | None = None  # the replica target this round's stabilize refreshed

    @property
    def routing(self):  # noqa: ANN201 - the node's RoutingTable, always used under node.lock
        return self.node.routing

    def job(self, kind: str, arg: object) -> None:
        """A job a request handler queued: hand entries to a new predecessor, or push fresh writes."""
        if kind == "handover":
            self.handover(*arg)  # type: ignore[misc]
        elif kind == "replicate":
            self.replicate(full=False)

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
        self.replicate(full=node.rounds % FULL_EVERY == 0,
                       refresh=node.rounds % self.config.refresh_every == 0)
        self.expire_records()
        node.check_policy()
        if self._hand_back_pending:
            self.hand_back()
        with node.lock:
            node.store.expire(node.rounds, self.config.replica_lease_periods,
                              self.routing.owns)
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
            links = self.rpc.call(succ.endpoint, "get_links", peer=self.me_encoded, **self._refresh_along(succ))
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
                self.rpc.call(succ.endpoint, "notify", peer=wire.encode_peer(self.me))
            return

    def _refresh_along(self, succ: Peer) -> dict:
        """The replicas' `refresh` for a successor that holds some, when this round refreshes: it goes with
        the stabilize call instead of a message of its own (replicate() then skips that target)."""
        node = self.node
        self._refreshed = None
        if node.rounds % self.config.refresh_every or self.config.replicas < 2:
            return {}
        with node.lock:
            pred = self.routing.predecessor
            targets = replica_targets(self.me, self.routing.successors, self.config.replicas - 1)
        if pred is None or succ not in targets:
            return {}
        self._refreshed = succ.endpoint
        return {"from": wire.encode_id(pred.id), "to": wire.encode_id(self.me.id)}

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
        if pred is None:
            return
        if time.monotonic() - heard < PREDECESSOR_HEARD * self.config.stabilize:
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

    def fix_fingers(self) -> None:
        """fix_fingers() (ToN'03 Fig. 6), adaptive.

        While the ring is changing (a successor, predecessor or finger changed within the last
        few rounds) every finger is refreshed each round, as the paper's simulator does, so a
        ring converges in a handful of periods. Once it is quiet, one run of fingers is refreshed
        per round, round-robin like the paper's `next`, which keeps a steady ring's background
        traffic at about one lookup per node per period. One lookup settles every finger that
        the same node must own. A whole cycle of refreshes that changed nothing doubles the rounds
        between refreshes, up to MAX_FINGER_GAP; any change brings them back to every round. (A
        finger gone stale refers a lookup to a node that precedes the key all the same: it costs
        hops, never a wrong answer; a dead one is forgotten as soon as a call finds it.)
        """
        lock = self.node.lock
        with lock:
            links = (self.routing.predecessor, tuple(self.routing.successors))
        if links != self._last_links:
            self._last_links = links
            self._quiet_rounds = 0
        full = self._quiet_rounds < QUIET_ROUNDS_BEFORE_INCREMENTAL
        if full:
            self._finger_gap, self._finger_wait = 1, 0
        elif self._finger_wait > 0:
            self._finger_wait -= 1
            self._quiet_rounds += 1
            return
        changed = stop = False
        i = 0 if full else self._next_finger
        while i < self.config.bits and not self.node.stopped.is_set():
            with lock:
                start = self.routing.finger_start(i)
                succ = self.routing.successor
            if in_half_open(start, self.me.id, succ.id) or succ == self.me:
                owner = succ
            else:
                found = iterative_lookup(start, self.me.endpoint, self.local_first_ask,
                                         max_steps=2 * self.config.bits)
                if self.config.on_lookup is not None:
                    self.config.on_lookup(found, self.me.id)
                if found.timeouts:  # a peer on the way is dead: the round stays short, the next goes on
                    changed, stop = True, True
                if not found.ok or found.owner is None:
                    i += 1
                    if stop:
                        break
                    continue
                owner = found.owner
            with lock:
                before = self.routing.fingers[i]
                last = self.routing.set_finger(i, owner)[-1]
                previous = before if last == i else self.routing.fingers[last]
            # the ring changed where an interval's first node did (a PNS choice is not a change)
            changed = changed or self._firsts.get(i) != owner
            self._firsts[i] = owner
            if self.config.pns > 1 and owner != self.me:
                self.pick_by_proximity(last, owner, previous, probe=not full)
            i = last + 1
            if stop or (not full and owner != succ):
                break
        self._next_finger = i if i < self.config.bits else 0
        self._quiet_rounds = 0 if changed else self._quiet_rounds + 1
        self._cycle_changed = self._cycle_changed or changed
        if not full and self._next_finger == 0:  # a cycle ends
            quiet = not self._cycle_changed
            self._finger_gap = min(2 * self._finger_gap, MAX_FINGER_GAP) if quiet else 1
            self._cycle_changed = False
        self._finger_wait = self._finger_gap - 1

    def pick_by_proximity(self, level: int, first: Peer, current: Peer | None, probe: bool = True) -> None:
        """Finger `level` := the nearest of up to K nodes of its interval, `first` (the interval's first
        node, just found) and its successors, by this node's round trips (dht/proximity.py). The
        successors come from `get_links`, whose reply also times `first`; a sample never heard from is
        pinged once. Without `probe` (while the ring is changing, when every round must stay short so
        that stabilization keeps its pace) nothing is sent: the current finger is kept if it is still
        in the interval and answering and not clearly farther than `first`."""
        k, bits = self.config.pns, self.config.bits
        rtt = self.round_trips
        rtt.now = self.node.rounds
        if not probe:
            candidates = interval_candidates(self.me.id, level, bits, first, [current] if current else [], 2)
        elif (cached := self._samples.get(level)) is not None and cached[0] == first and cached[2] > 0:
            candidates = cached[1]
            self._samples[level] = (first, candidates, cached[2] - 1)
        else:
            candidates = interval_candidates(self.me.id, level, bits, first, [], k)
            tail = first
            while len(candidates) < k and candidates[-1] == tail:
                links = self.rpc.call(tail.endpoint, "get_links")
                if not links.ok:
                    break
                try:
                    following = wire.decode_peers(links.get("successors", []))
                except wire.WireError:
                    break
                more = interval_candidates(self.me.id, level, bits, candidates[0], candidates[1:] + following, k)
                if len(more) == len(candidates):
                    break
                candidates, tail = more, more[-1]
            self._samples[level] = (first, candidates, SAMPLES_REUSED)
        if probe:
            for p in candidates:
                for _ in range(2):  # a first call to a peer also opens the connection: it is not timed
                    if rtt.get(p.endpoint) is not None or rtt.down(p.endpoint) or self.node.stopped.is_set():
                        break
                    if not self.rpc.call(p.endpoint, "ping").ok:
                        break
        live = [p for p in candidates if not rtt.down(p.endpoint)] or candidates[:1]
        chosen = choose(live, lambda p: rtt.get(p.endpoint), current)
        with self.node.lock:
            self.routing.fingers[level] = chosen

    def local_first_ask(self, endpoint: str, k: int, avoid: Collection[str]) -> Reply:
        """A lookup step: ours from the table, others' by RPC; a peer that times out is forgotten."""
        if endpoint != self.me.endpoint:
            reply = self.remote_ask(endpoint, k, avoid)
            if unreachable(reply) and self.dead(endpoint, reply):
                self.lost(endpoint)
            return reply
        with self.node.lock:
            hop = self.routing.next_hop(k, avoid)
        if hop is None:
            return Reply(False, err="no route")
        return Reply(True, {"done": hop.done, "peer": wire.encode_peer(hop.peer)})

    def remote_ask(self, endpoint: str, k: int, avoid: Collection[str]) -> Reply:
        if avoid:
            return self.rpc.call(endpoint, "next_hop", key_id=wire.encode_id(k), avoid=list(avoid))
        return self.rpc.call(endpoint, "next_hop", key_id=wire.encode_id(k))

    # -- replication and hand-over ----------------------------------------------------------------
    def replicate(self, full: bool, refresh: bool = False) -> None:
        """Push owned entries to the first replicas-1 successors: those written since the last push,
        or all of them when `full` or when the replica set changed; `refresh` renews the replicas'
        leases on the rest with one message."""
        node = self.node
        with node.lock:
            through = node.store.writes  # what the successors hold once the pushes below succeed
            targets = [s.endpoint for s in replica_targets(self.me, self.routing.successors,
                                                            self.config.replicas - 1)]
            if not targets:
                self._replicated_to = targets
                node.store.dirty.clear()
                node.store.replicated = through
                return
            full = full or targets != self._replicated_to
            if full:
                node.store.dirty.clear()
                entries = node.store.select(self.routing.owns)
            else:
                entries = node.store.take_dirty(self.routing.owns)
            pred = self.routing.predecessor
        pushed = True
        for endpoint in targets:
            if entries:
                pushed = self.push(endpoint, "replicate", entries) and pushed
            if refresh and not full and pred is not None and endpoint != self._refreshed:
                self.rpc.call(endpoint, "refresh", **{"from": wire.encode_id(pred.id),
                                                     "to": wire.encode_id(self.me.id)})
        if pushed:
            with node.lock:
                node.store.replicated = max(node.store.replicated, through)
            self._replicated_to = targets
        else:
            self._replicated_to = []  # the next round pushes everything again

    def handover(self, old: Peer | None, new: Peer) -> None:
        """A new predecessor joined: give it the entries it now owns (key transfer on join)."""
        node = self.node
        with node.lock:
            if self.routing.predecessor != new:
                return
            if old is not None and old != new:
                moving = node.store.select(lambda k: in_half_open(k, old.id, new.id))
            else:
                moving = node.store.select(lambda k: not in_half_open(k, new.id, self.me.id))
        if moving:
            self.push(new.endpoint, "handover", moving)

    def hand_back(self) -> None:
        """After a restart from --data-dir: give each entry we no longer own to its owner (once the
        ring has told us our predecessor, so that `owns` means something). Merges keep the newest
        version, so this never undoes a write made while we were away."""
        node = self.node
        with node.lock:
            if self.routing.predecessor is None and not self.routing.alone:
                return
            start = self.routing.successor.endpoint
            foreign = node.store.select(lambda k: not self.routing.owns(k))
        by_owner: dict[str, list[EntryTuple]] = {}
        covered: tuple[int, Peer] | None = None  # (k, successor(k)): no node in [k, owner), so one lookup serves all
        for k, entry in sorted((entry_key_id(e[0], self.config.bits, e[3]), e) for e in foreign):
            if covered is None or not in_half_open(k, covered[0] - 1, covered[1].id):
                found = iterative_lookup(k, start, self.remote_ask, max_steps=4 * self.config.bits + 16)
                if not found.ok or found.owner is None:
                    return  # try again next round
                covered = (k, found.owner)
            if covered[1] != self.me:
                by_owner.setdefault(covered[1].endpoint, []).append(entry)
        if all(self.push(endpoint, "handover", entries) for endpoint, entries in by_owner.items()):
            self._hand_back_pending = False
            log.info("%s handed %d restored entries back to %d owners", self.me.endpoint,
                     sum(map(len, by_owner.values())), len(by_owner))

    def push(self, endpoint: str, op: str, entries: list[EntryTuple]) -> bool:
        ok = True
        for batch in batches(entries):
            reply = self.rpc.call(endpoint, op, entries=[list(e) for e in batch])
            ok = ok and reply.ok
            if unreachable(reply):
                if self.dead(endpoint, reply):
                    self.lost(endpoint)
                return False
        return ok

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
            gone = node.records.expired(now, self.routing.owns_strictly)
            for composite in gone:
                key, name = split_field_key(composite)
                log.info("%s: the lease of %s on %r ran out", self.me.endpoint, name, key)
                prev = node.records.epoch(key, namespace(name))
                version = node.write_field(composite, None)
                node.changes.put(Change(key, name, None, node.records.epoch(key, namespace(name)) or version, prev,
                                        node.index))
        if gone:
            self.replicate(full=False)


def batches(entries: list[EntryTuple]) -> list[list[EntryTuple]]:
    """Split entries so that each message stays well under the wire's size limit."""
    out: list[list[EntryTuple]] = [[]]
    size = 0
    for e in entries:
        esize = len(e[0]) + (len(e[1]) if e[1] else 0) + 16
        if out[-1] and size + esize > ENTRY_BATCH_BYTES:
            out.append([])
            size = 0
        out[-1].append(e)
        size += esize
    return out
