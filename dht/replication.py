"""Replication and hand-over: the part of a position's maintenance that keeps copies of its keys where
they survive it (SIGCOMM'01 §6.4, successor-list replication) and moves keys to their new owners.

Replication is incremental, so that a write costs the owner the entries it changed, not everything it
holds: a write pushes just the entries written since the last push; every `refresh_every` rounds a
one-line `refresh` of the owner's arc keeps the replicas' leases alive (carried by the stabilize call
when the successor is a replica); everything is pushed when the replica set changes, and every
FULL_EVERY rounds to repair anything a lost push missed, to each replica whose digest of the arc
(`digest`, dht/store.py `entries_digest`) is not the owner's: an idle ring in sync sends 16 bytes an
arc, not its entries. The replicas are the first successors of other
processes, one each (`replica_targets`): copies on the positions of the owner's own process would die
with it.

A mixin of dht/maintenance.py's Maintainer, whose node and socket it uses.
"""

from __future__ import annotations

import logging

from dht import wire
from dht.client import iterative_lookup, unreachable
from dht.ids import in_half_open, in_open, process_of
from dht.routing import Peer
from dht.store import EntryTuple, entries_digest, entry_key_id

log = logging.getLogger(__name__)

ENTRY_BATCH_BYTES = 256 * 1024
FULL_EVERY = 20  # rounds between full pushes to the replicas (anti-entropy)


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


class Replication:
    """replicate, handover, hand_back and push, for the Maintainer (which provides node, me, config, rpc,
    routing, dead and lost)."""

    def init_replication(self) -> None:
        self._replicated_to: list[str] = []
        self._hand_back_pending = self.node.store.loaded > 0  # restarted from --data-dir
        self._refreshed: str | None = None  # the replica target this round's stabilize refreshed

    def replicate(self, full: bool, refresh: bool = False) -> None:
        """Push owned entries to the first replicas-1 successors: those written since the last push,
        or all of them when the replica set changed, and when `full` to each replica whose digest of the
        arc differs; `refresh` renews the leases of a replica not sent the whole arc with one message."""
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
            moved = targets != self._replicated_to
            digest = None
            if full or moved:
                node.store.dirty.clear()
                entries = node.store.select(self.routing.owns)
            else:
                entries = node.store.take_dirty(self.routing.owns)
            pred = self.routing.predecessor
            if full and not moved and pred is not None and entries:
                digest = entries_digest((k, ver, v is None) for k, v, ver, _ in entries)
            full = full or moved
        pushed = True
        for endpoint in targets:
            whole = False  # the arc's every entry sent to this replica (which renews its leases too)
            if entries and not (digest is not None and self._holds(endpoint, pred, digest)):
                pushed = self.push(endpoint, "replicate", entries) and pushed
                whole = full
            if refresh and not whole and pred is not None and endpoint != self._refreshed:
                self.rpc.call(endpoint, "refresh", **{"from": wire.encode_id(pred.id),
                                                     "to": wire.encode_id(self.me.id)})
        if pushed:
            with node.lock:
                node.store.replicated = max(node.store.replicated, through)
            self._replicated_to = targets
        else:
            self._replicated_to = []  # the next round pushes everything again

    def _holds(self, endpoint: str, pred: Peer, digest: bytes) -> bool:
        """The replica at `endpoint` holds our arc (pred, me] as we do (any failure: it is pushed)."""
        reply = self.rpc.call(endpoint, "digest", digest=digest, **{"from": wire.encode_id(pred.id),
                                                                   "to": wire.encode_id(self.me.id)})
        return reply.ok and reply.body.get("same") is True

    def handover(self, old: Peer | None, new: Peer) -> None:
        """A new predecessor joined: give it the entries it now owns (key transfer on join).

        While rings merge, the predecessor can change again before this job runs (old -> new -> newer):
        the entries between `old` and the predecessor of now go to the predecessor of now, so that none
        is left with a node that no longer owns it and that nobody else will ask. A push that fails
        leaves them to `hand_back`, which gives every entry we do not own to its owner next round."""
        node = self.node
        with node.lock:
            current = self.routing.predecessor
            if current is None or current == self.me:
                return
            if current != new and old is not None and not in_open(current.id, old.id, self.me.id):
                return  # our arc grew back past `old`: nothing of it is anyone else's
            if old is not None and old != current:
                moving = node.store.select(lambda k: in_half_open(k, old.id, current.id))
            else:
                moving = node.store.select(lambda k: not in_half_open(k, current.id, self.me.id))
        if moving and not self.push(current.endpoint, "handover", moving):
            self._hand_back_pending = True

    def hand_back(self) -> None:
        """After a restart from --data-dir, or after a hand-over gave us entries that others own (rings
        merging): give each entry we do not own to its owner (once the ring has told us our
        predecessor, so that `owns` means something). Merges keep the newest version, so this never
        undoes a write made while we were away."""
        node = self.node
        with node.lock:
            if self.routing.predecessor is None and not self.routing.alone:
                return
            start = self.routing.successor.endpoint
            foreign = node.store.select(lambda k: not self.routing.owns(k))
            if not self._hand_back_pending:  # only what hand-overs gave us, not the replicas we keep
                node.handed_foreign.intersection_update(e[0] for e in foreign)  # (gone, or ours by now)
                foreign = [e for e in foreign if e[0] in node.handed_foreign]
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
        # only what goes to another node leaves the set: an entry whose lookup named us while our own
        # predecessor says otherwise (a ring still settling) stays owed, not to expire as a replica
        handing = {e[0] for entries in by_owner.values() for e in entries}
        if all(self.push(endpoint, "handover", entries) for endpoint, entries in by_owner.items()):
            if self._hand_back_pending:
                log.info("%s handed %d restored entries back to %d owners", self.me.endpoint,
                         sum(map(len, by_owner.values())), len(by_owner))
            self._hand_back_pending = False
            with node.lock:
                node.handed_foreign -= handing
                node.handed_foreign |= {e[0] for e in foreign} - handing

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

    def _refresh_along(self, succ: Peer) -> dict:
        """The replicas' `refresh` for a successor that holds some, when this round refreshes: it goes with
        the stabilize call instead of a message of its own (replicate() then skips that target)."""
        node = self.node
        self._refreshed = None
        if (node.rounds % self.config.refresh_every and not self.paced) or self.config.replicas < 2:
            return {}
        with node.lock:
            pred = self.routing.predecessor
            targets = replica_targets(self.me, self.routing.successors, self.config.replicas - 1)
        if pred is None or succ not in targets:
            return {}
        self._refreshed = succ.endpoint
        return {"from": wire.encode_id(pred.id), "to": wire.encode_id(self.me.id)}


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
