"""fix_fingers with proximity neighbour selection: the part of a position's maintenance that keeps its
finger table (ToN'03 Fig. 6 `fix_fingers`; Gummadi et al., SIGCOMM'03 §4, and Dabek et al., NSDI'04
§4.2, for the choice among an interval's nodes by measured round trips, dht/proximity.py).

A mixin of dht/maintenance.py's Maintainer, whose node, socket and round trips it uses.
"""

from __future__ import annotations

from collections.abc import Collection

from dht import wire
from dht.client import iterative_lookup, unreachable
from dht.ids import in_half_open
from dht.proximity import choose, interval_candidates
from dht.routing import Peer
from dht.transport import Reply

QUIET_ROUNDS_BEFORE_INCREMENTAL = 3
MAX_FINGER_GAP = 8  # a quiet ring's rounds between finger refreshes, at most (doubling while nothing changes)
FINGER_CYCLE = 16  # periods within which a quiet position refreshes every finger, at most: the gap is cut
# to fit its cycle's runs (a finger made stale by a join far away waited a whole cycle: 6 runs 8 periods
# apart took 48 periods after 16 joins spread out by a loaded machine)
ANNOUNCE_ROUND = 3  # the round in which a position that joined tells the nodes whose finger intervals it
# may now begin (a period or two after its join: its neighbours point at it by then, so lookups find it)
ANNOUNCE_CHAIN = 4  # predecessors told in turn after the first whose finger went stale, at most
SAMPLES_REUSED = 4  # refreshes of a finger that take its PNS samples from the last list fetched, if its first
# node is the same (the samples' round trips keep coming from every other call)


class FingerMaintenance:
    """fix_fingers and the PNS choice, for the Maintainer (which provides node, me, config, rpc,
    round_trips, routing, dead and lost)."""

    def init_fingers(self) -> None:
        self._last_links: tuple = ()
        self._quiet_rounds = 0
        self._next_finger = 0
        self._finger_gap = 1  # quiet periods between finger refreshes (MAX_FINGER_GAP)
        self.round_periods = 1  # periods between this position's rounds now (dht/pacing.py)
        self._finger_wait = 0  # rounds left before the next one
        self._cycle_changed = False  # a finger changed in the current round-robin cycle
        self._cycle_runs = 0  # refreshes (one run of fingers each) in the current cycle
        self._gap_limit = MAX_FINGER_GAP  # the longest gap this position's cycle allows (FINGER_CYCLE)
        self._cycle_periods = 0  # periods since the current cycle began
        self._samples: dict[int, tuple[Peer, list[Peer], int]] = {}  # level -> (first, samples, uses left)
        self._firsts: dict[int, Peer] = {}  # finger index -> the first node of its interval, last seen

    def fix_fingers(self) -> None:
        """fix_fingers() (ToN'03 Fig. 6), adaptive.

        While the ring is changing (a successor, predecessor or finger changed within the last
        few rounds) every finger is refreshed each round, as the paper's simulator does, so a
        ring converges in a handful of periods. Once it is quiet, one run of fingers is refreshed
        per round, round-robin like the paper's `next`, which keeps a steady ring's background
        traffic at about one lookup per node per period. One lookup settles every finger that
        the same node must own. A whole cycle of refreshes that changed nothing doubles the rounds
        between refreshes, up to MAX_FINGER_GAP and so that a cycle takes FINGER_CYCLE periods at most;
        any change brings them back to every round. (A
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
        self._cycle_periods += self.round_periods
        if full:
            self._finger_gap, self._finger_wait = 1, 0
        elif self._finger_wait > 0:
            self._finger_wait -= self.round_periods  # the gap is in periods, however far apart rounds are
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
        self._cycle_runs += not full
        if not full and self._next_finger == 0:  # a cycle ends
            quiet = not self._cycle_changed
            self._gap_limit = min(MAX_FINGER_GAP, max(1, FINGER_CYCLE // self._cycle_runs))
            self._finger_gap = min(2 * self._finger_gap, self._gap_limit) if quiet else 1
            self._cycle_changed = False
            self._cycle_runs = 0
        if full or self._next_finger == 0:
            self._cycle_periods = 0
        self._finger_wait = self._gap_left_in_cycle() - 1

    def refresh_fingers(self) -> None:
        """Every finger now, as while the ring changes (a node joined that begins one of their intervals)."""
        self._quiet_rounds = 0
        self._finger_wait = 0
        self.fix_fingers()

    def announce_join(self) -> None:
        """update_others() (SIGCOMM'01 Fig. 6): a joined node tells the nodes whose fingers it may now be.

        For each i whose reach 2**i passes its predecessor, the last node p at or before id - 2**i has
        finger i start at or before us, so we may now be that interval's first node; p refreshes its
        fingers if so, and we tell its predecessor in turn (the paper's recursion, ANNOUNCE_CHAIN at
        most); for the reaches within our own arc that node is the predecessor. Without this a quiet ring, whose
        rounds are stretched and whose finger cycles are long (dht/pacing.py), would route past us for
        a whole cycle of the node's refreshes. O(log N) lookups, once per join."""
        bits = self.config.bits
        size = 1 << bits
        with self.node.lock:
            pred = self.routing.predecessor
        if pred is None or pred == self.me:
            return
        gap = (self.me.id - pred.id) % size
        told = {self.me}
        for i in reversed(range(bits)):
            if self.node.stopped.is_set():
                return
            if 1 << i < gap:  # a reach within our own arc: the last node at or before id - 2**i is the predecessor
                p: Peer | None = pred
            else:
                first_after = (self.me.id - (1 << i) + 1) % size
                found = iterative_lookup(first_after, self.me.endpoint, self.local_first_ask, max_steps=2 * bits)
                p = self._predecessor_of(found.owner) if found.ok and found.owner is not None else None
            for _ in range(ANNOUNCE_CHAIN):
                if p is None or p in told:
                    break
                told.add(p)
                reply = self.rpc.call(p.endpoint, "joined", peer=self.me_encoded)
                if not reply.ok or not reply.get("stale"):
                    break
                p = self._predecessor_of(p)

    def _predecessor_of(self, peer: Peer) -> Peer | None:
        links = self.rpc.call(peer.endpoint, "get_links")
        try:
            return wire.decode_optional_peer(links.get("predecessor")) if links.ok else None
        except wire.WireError:
            return None

    def _gap_left_in_cycle(self) -> int:
        """The gap before the next refresh: the doubled one, cut so that the runs this cycle has left fit
        in what is left of its FINGER_CYCLE periods (the last cycle's runs set the gap; a ring grown since
        has more of them, and a finger made stale by a join far away waited 22 periods)."""
        if self._finger_gap == 1:
            return 1
        with self.node.lock:
            succ, ahead = self.routing.successor, self.routing.fingers[self._next_finger:]
        runs_left = len({f for f in ahead if f is not None and f != succ}) or 1
        return max(1, min(self._finger_gap, (FINGER_CYCLE - self._cycle_periods) // runs_left))

    @property
    def fingers_settled(self) -> bool:
        """Whole cycles of refreshes have changed nothing, so often that they are as far apart as they
        go (MAX_FINGER_GAP, or less to fit FINGER_CYCLE): until then the ring around the fingers is still
        moving, and a position's rounds stay a period apart (dht/pacing.py)."""
        return self._quiet_rounds >= QUIET_ROUNDS_BEFORE_INCREMENTAL and self._finger_gap >= self._gap_limit

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
