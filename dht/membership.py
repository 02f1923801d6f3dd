"""Remembered members: the nodes this node has known, probed so that split rings find each other.

Chord's stabilization keeps one ring once there is one, but it cannot make one ring of two: a ring cut
by a network partition heals into two rings, each consistent on its own, and Liben-Nowell, Balakrishnan
and Karger (PODC'02) show that such split states are stable. Shafaat, Ghodsi and Haridi ("Handling
network partitions and mergers in structured overlay networks", IEEE P2P'07) keep the nodes a node has
known in a passive list and probe them from time to time; one that answers from another ring starts a
merge. Dynamo and Cassandra give every node the same seeds, so that no start or restart order leaves a
second cluster: seeds are members that are never forgotten.

This module is that list and its decisions, pure: no sockets and no clocks (times are passed in).
`dht/prober.py` probes and merges; the node persists the list in its data directory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from dht.routing import Peer

MAX_MEMBERS = 64  # nodes remembered, seeds included: the bound on this node's passive list
FORGET_AFTER = 7 * 86_400.0  # seconds without a sign of life before a member that is no seed is dropped
FILE = "members.json"

IN_RING = "ring"  # in our routing table, or a probe found it in our ring
OTHER_RING = "other-ring"  # answered, but its ring does not route our id to us
UNREACHABLE = "unreachable"  # did not answer its last probe
UNKNOWN = "unknown"  # not probed since it left our routing table (or a seed never heard from)
STATES = (IN_RING, OTHER_RING, UNREACHABLE, UNKNOWN)
QUIET_DOUBLINGS = 3  # a member found in our ring again and again is probed every 8 intervals at most


@dataclass
class Member:
    """A node this node has known. `id` is None for a seed never heard from."""

    endpoint: str
    id: int | None = None
    seed: bool = False
    state: str = UNKNOWN
    last_seen: float = 0.0  # wall-clock time of its last sign of life (in our table, or answering)
    last_probe: float = 0.0  # wall-clock time it was last probed
    agreed: int = 0  # probes in a row that found it in our ring (each doubles its wait, QUIET_DOUBLINGS)

    def to_row(self, now: float) -> dict:
        return {"endpoint": self.endpoint, "id": self.id, "seed": self.seed, "state": self.state,
                "seen_s_ago": None if not self.last_seen else round(max(0.0, now - self.last_seen), 1)}


def probe_outcome(me: Peer, answered: bool, owner: Peer | None, successor: Peer | None = None) -> str:
    """What a probe says of a member: asked to look up our own id in its ring, a member of our ring
    finds us (the owner of id n is n itself); a member of another ring finds some other node. Finding
    our own successor means our ring has not taken us in yet (we joined moments ago and our
    predecessor has not stabilized): the same ring, and nothing a merge could add."""
    if not answered:
        return UNREACHABLE
    return IN_RING if owner == me or (owner is not None and owner == successor) else OTHER_RING


class Members:
    """The bounded passive list of one node (MAX_MEMBERS entries)."""

    def __init__(self, me: str, seeds: Iterable[str] = (), limit: int = MAX_MEMBERS) -> None:
        self.me = me
        self.limit = limit
        self._members: dict[str, Member] = {}
        for endpoint in seeds:
            if endpoint != me and len(self._members) < limit:
                self._members[endpoint] = Member(endpoint, seed=True)
        self.changed = False  # the set of endpoints changed since the last save

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, endpoint: str) -> bool:
        return endpoint in self._members

    def get(self, endpoint: str) -> Member | None:
        return self._members.get(endpoint)

    def endpoints(self) -> list[str]:
        """Seeds first, then the others, most recently seen first: the order in which to try joining."""
        return [m.endpoint for m in sorted(self._members.values(), key=lambda m: (not m.seed, -m.last_seen))]

    def sync(self, table: Iterable[Peer], now: float) -> None:
        """The routing table's nodes are in our ring now; a member that was but has left the table is
        unknown until probed (it may have died, left, or only been replaced by a closer node)."""
        in_table = set()
        for peer in table:
            if peer.endpoint == self.me:
                continue
            in_table.add(peer.endpoint)
            m = self._remember(peer.endpoint, now)
            if m is None:
                continue
            m.id, m.state, m.last_seen = peer.id, IN_RING, now
        for m in self._members.values():
            if m.state == IN_RING and m.endpoint not in in_table and m.last_probe < m.last_seen:
                m.state = UNKNOWN

    def note(self, peer: Peer, now: float) -> None:
        """A node we heard of answering (a probe's finding, a merge hint's sender)."""
        if peer.endpoint == self.me:
            return
        m = self._remember(peer.endpoint, now)
        if m is not None:
            m.id, m.last_seen = peer.id, now

    def probe_target(self, in_table: set[str], now: float, every: float = 0.0) -> Member | None:
        """The member to probe next: one not in our routing table (those are known to be in our ring),
        the one probed longest ago (never probed first, seeds before others). A member that the last
        probes found in our ring waits `every` seconds (the probe interval) times 2^k before the next,
        for k >= 1 such probes in a row up to QUIET_DOUBLINGS: a quiet ring stops asking what it knows, while
        a member unreachable or in another ring (a partition, a restarted seed) is asked at full pace."""
        self._forget_old(now)
        candidates = [m for m in self._members.values() if m.endpoint not in in_table
                      and (not m.agreed or now >= m.last_probe + every * (1 << min(m.agreed, QUIET_DOUBLINGS)))]
        if not candidates:
            return None
        return min(candidates, key=lambda m: (m.last_probe, not m.seed))

    def probed(self, endpoint: str, outcome: str, now: float, peer_id: int | None = None) -> None:
        m = self._members.get(endpoint)
        if m is None:
            return
        m.state, m.last_probe = outcome, now
        m.agreed = m.agreed + 1 if outcome == IN_RING else 0
        if outcome != UNREACHABLE:
            m.last_seen = now
            if peer_id is not None:
                m.id = peer_id

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATES, 0)
        for m in self._members.values():
            out[m.state] += 1
        return out

    def rows(self, now: float) -> list[dict]:
        return [m.to_row(now) for m in sorted(self._members.values(), key=lambda m: m.endpoint)]

    # -- bounds ---------------------------------------------------------------------------------
    def _remember(self, endpoint: str, now: float) -> Member | None:
        m = self._members.get(endpoint)
        if m is not None:
            return m
        if len(self._members) >= self.limit and not self._evict():
            return None
        m = self._members[endpoint] = Member(endpoint, last_seen=now)
        self.changed = True
        return m

    def _evict(self) -> bool:
        """Make room by dropping the member that is no seed and was seen longest ago."""
        others = [m for m in self._members.values() if not m.seed]
        if not others:
            return False
        del self._members[min(others, key=lambda m: m.last_seen).endpoint]
        self.changed = True
        return True

    def _forget_old(self, now: float) -> None:
        old = [e for e, m in self._members.items()
               if not m.seed and m.state == UNREACHABLE and m.last_seen and now - m.last_seen > FORGET_AFTER]
        for e in old:
            del self._members[e]
            self.changed = True

    # -- persistence (the node's --data-dir) ------------------------------------------------------
    def save(self, directory: Path) -> None:
        """Write the list to DIR/members.json (atomically: a crash leaves the old or the new file)."""
        rows = [asdict(m) for m in self._members.values()]
        tmp = Path(directory) / f"{FILE}.tmp"
        tmp.write_text(json.dumps({"me": self.me, "members": rows}))
        os.replace(tmp, Path(directory) / FILE)
        self.changed = False

    def load(self, directory: Path) -> int:
        """Add the members saved by an earlier run of this node (same endpoint); returns how many. A
        missing, unreadable or foreign file adds nothing: the list is a hint, never a reason to fail."""
        try:
            saved = json.loads((Path(directory) / FILE).read_text())
            rows = saved["members"] if saved.get("me") == self.me else []
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return 0
        added = 0
        for row in rows:
            try:
                m = Member(str(row["endpoint"]), None if row.get("id") is None else int(row["id"]),
                           bool(row.get("seed")), UNKNOWN, float(row.get("last_seen") or 0.0), 0.0)
            except (KeyError, TypeError, ValueError):
                continue
            if m.endpoint == self.me or m.endpoint in self._members:
                continue
            if len(self._members) >= self.limit and not self._evict():
                break
            m.seed = False  # seeds are what the command line says this time
            self._members[m.endpoint] = m
            added += 1
        return added
