"""The prober of a ChordNode: finds split rings and makes them one (ring unification).

Every `probe_every` seconds the node takes one remembered member that is not in its routing table
(dht/membership.py) and asks it to look up the node's own id. In one ring the owner of id n is n; a
member of another ring names some other node o, the successor of n in its ring. Then, as in the
simple ring unification of Shafaat, Ghodsi and Haridi (IEEE P2P'07, §4), the node takes o as its
successor when o lies closer than its current one (Chord's own rule, ToN'03 Fig. 6 stabilize), tells
o (notify: o may take the node as its predecessor), and starts two chains of `unify` hints: one to o,
so that o's ring zips itself into ours from there, and one to its own former successor, so that ours
zips into o's. A node handed a hint does the same lookup through the node the hint names and passes
the hint on to its successor, until a node finds itself already routed to, or the hint's hops run
out. Stabilization then settles predecessors, successor lists and fingers as after ordinary joins,
and keys move to their new owners by the hand-over every change of predecessor makes.

The chains are an accelerator: each node also probes on its own, so a chain cut short by a failure or
a lost hint delays the merge, it does not prevent it. Cost (docs/architecture.md): when nothing is
split a probe is one lookup, O(log N) next_hop requests, every `probe_every` seconds, and nothing at
all while every remembered member sits in the routing table; a merge costs each node one lookup and
two messages. Probes run on their own thread and socket, one for all the positions of a process
(dht/host.py, which takes them in turn: a process probes once an interval whatever its positions), so
a dead member's timeout never delays stabilization.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable, Collection
from typing import Any

from dht import wire
from dht.client import iterative_lookup
from dht.membership import OTHER_RING, UNREACHABLE, probe_outcome
from dht.routing import Peer
from dht.transport import Reply, RpcClient

log = logging.getLogger(__name__)

PROBE_PERIODS = 2.0  # default probe interval, in stabilization periods
CHAIN_HOPS = 1024  # hops a unify hint may travel: the bound on one chain's length
HINTS = 8  # unify hints waiting to be followed: the bound on a process's queue
SAVE_EVERY = 5.0  # seconds between writes of a changed member list to the data directory


class Prober:
    """One position's probing state; `rpc` and `hints` (the thread's socket and hint queue) are set by
    its process, shared by all its positions."""

    def __init__(self, node: Any) -> None:  # a dht.node.ChordNode
        self.node = node
        self.me: Peer = node.me
        cfg = node.config
        self.every = cfg.probe_every if cfg.probe_every is not None else PROBE_PERIODS * cfg.stabilize
        self.rpc: RpcClient | None = None
        self.hints: queue.Queue[tuple[Prober, Peer, int]] = queue.Queue(maxsize=HINTS)
        self.probes = 0  # probes made (a probe is one lookup)
        self.merges = 0  # probes and hints that found another ring
        self.bytes_sent = 0  # of the probes and hints of this position
        self._last_chain = float("-inf")
        self._last_save = float("-inf")

    def hint(self, peer: Peer, hops: int) -> bool:
        """Queue a unify hint from the server thread (which never calls out); False when the queue is
        full (the node is merging already: the hint's chain ends here, and probes carry on)."""
        try:
            self.hints.put_nowait((self, peer, hops))
            return True
        except queue.Full:
            return False

    def counted(self, step: Callable[[], object]) -> object:
        """Run one step (a probe, a hint) and count the bytes it sent as this position's."""
        before = self.rpc.bytes_sent
        try:
            return step()
        finally:
            self.bytes_sent += self.rpc.bytes_sent - before

    def sync(self) -> set[str]:
        """Remember the routing table's nodes; returns their endpoints."""
        node = self.node
        with node.lock:
            table = node.routing.known_peers()
            node.members.sync(table, time.time())
        return {p.endpoint for p in table}

    def probe(self) -> bool:
        """Probe the member due next, if any; returns whether one was."""
        node = self.node
        in_table = self.sync()
        with node.lock:
            target = node.members.probe_target(in_table, time.time(), self.every)
        if target is None:
            return False
        self.probes += 1
        found = iterative_lookup(self.me.id, target.endpoint, self.ask, max_steps=4 * node.config.bits + 16)
        # no answer at all: unreachable; an answer but a lookup cut short further on: nothing learnt
        with node.lock:
            successor = node.routing.successor
        outcome = (probe_outcome(self.me, False, None) if not found.path
                   else probe_outcome(self.me, True, found.owner, successor) if found.ok else None)
        with node.lock:
            if outcome is not None:
                node.members.probed(target.endpoint, outcome, time.time())
            if found.owner is not None:
                node.members.note(found.owner, time.time())
        if outcome == UNREACHABLE:
            self.rpc.reset(target.endpoint)  # the next probe opens a fresh connection (a healed link)
            log.debug("%s: remembered member %s did not answer", self.me.endpoint, target.endpoint)
        elif outcome == OTHER_RING and found.owner is not None:
            log.warning("%s: remembered member %s is in another ring (it routes our id to %s): merging",
                        self.me.endpoint, target.endpoint, found.owner.endpoint)
            self.merge(found.owner, CHAIN_HOPS, tell_other=True)
        return True

    def follow(self, peer: Peer, hops: int) -> None:
        """A unify hint: look our id up in the ring of `peer`; merge if it routes elsewhere. A chain that
        passed here within a period goes on from here already, so a second one stops."""
        now = time.monotonic()
        if now - self._last_chain < self.node.config.stabilize:
            return
        self._last_chain = now
        found = iterative_lookup(self.me.id, peer.endpoint, self.ask, max_steps=4 * self.node.config.bits + 16)
        with self.node.lock:
            self.node.members.note(peer, time.time())
        if not found.ok or found.owner is None or found.owner == self.me:
            return
        log.info("%s: unify hint via %s: our id routes to %s", self.me.endpoint, peer.endpoint, found.owner.endpoint)
        self.merge(found.owner, hops, tell_other=False)

    def merge(self, owner: Peer, hops: int, tell_other: bool) -> None:
        """Take `owner` (our successor in another ring) as successor if it is closer, tell it, and pass the
        hint on: to our former successor (our ring zips into the other), and, when this node found the
        split itself, to `owner` (the other ring zips into ours)."""
        node = self.node
        self.merges += 1
        with node.lock:
            former = node.routing.successor
            adopted = node.routing.consider_successor(owner)
        if adopted:
            self.rpc.call(owner.endpoint, "notify", peer=wire.encode_peer(self.me))
        if tell_other and hops > 0:
            self.rpc.call(owner.endpoint, "unify", peer=wire.encode_peer(self.me), hops=hops - 1)
        if hops > 0 and former not in (self.me, owner):
            self.rpc.call(former.endpoint, "unify", peer=wire.encode_peer(owner), hops=hops - 1)

    def ask(self, endpoint: str, k: int, avoid: Collection[str]) -> Reply:
        if avoid:
            return self.rpc.call(endpoint, "next_hop", key_id=wire.encode_id(k), avoid=list(avoid))
        return self.rpc.call(endpoint, "next_hop", key_id=wire.encode_id(k))

    def save(self, force: bool = False) -> None:
        """Persist a changed member list (with --data-dir), at most every SAVE_EVERY seconds."""
        node = self.node
        directory = node.data_dir
        if directory is None or not (force or time.monotonic() - self._last_save >= SAVE_EVERY):
            return
        with node.lock:
            if not node.members.changed and not force:
                return
            try:
                node.members.save(directory)
            except OSError as exc:
                log.warning("cannot save remembered members in %s: %s", directory, exc)
        self._last_save = time.monotonic()
