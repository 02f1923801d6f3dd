"""The pure routing state of one Chord node: fingers, successor list, predecessor.

Follows the pseudo-code of Stoica et al., "Chord: A Scalable Peer-to-peer Lookup Protocol
for Internet Applications", IEEE/ACM ToN 2003, Figs. 5 and 6, with the successor lists of
§V-B. No sockets and no clocks: the node (dht/node.py) feeds it what the network said, and
the simulator (sim/) follows the same next-hop rule, so both can be checked against each
other and against a brute-force ring.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from dht.ids import check_bits, distance, finger_start, in_half_open, in_open, process_of


@dataclass(frozen=True)
class Peer:
    """A node as others know it: its id on the circle and its "host:port" endpoint."""

    id: int
    endpoint: str

    def to_dict(self) -> dict:
        return {"id": self.id, "endpoint": self.endpoint}


@dataclass(frozen=True)
class NextHop:
    """The answer to "where is key k?": either the owner (done) or a closer node to ask."""

    done: bool
    peer: Peer


class RoutingTable:
    """Fingers, successor list and predecessor of the node `me` (ToN'03 Fig. 5)."""

    def __init__(self, me: Peer, bits: int = 64, successors: int = 8, prs: bool = False) -> None:
        """`prs`: proximity route selection for the last hop (DHash++'s ending): a key the successor list
        covers is answered with its owner from the list, not with a hop to the owner's predecessor."""
        check_bits(bits)
        self.prs = prs
        if successors < 1:
            raise ValueError("the successor list needs at least one entry")
        self.me = me
        self.bits = bits
        self.r = successors
        self.fingers: list[Peer | None] = [None] * bits
        self.successors: list[Peer] = []
        self.predecessor: Peer | None = None

    # -- views -------------------------------------------------------------------------------
    @property
    def successor(self) -> Peer:
        """The immediate successor; the node itself when it is alone."""
        return self.successors[0] if self.successors else self.me

    @property
    def alone(self) -> bool:
        return self.successor == self.me

    def finger_start(self, i: int) -> int:
        return finger_start(self.me.id, i, self.bits)

    def comes_before_a_finger(self, peer: Peer) -> bool:
        """Whether `peer` lies in one of our finger intervals before the finger held for it: it may be
        the interval's first node now (a node that joined, dht/fingers.py `announce_join`)."""
        if peer == self.me:
            return False
        for i in range(self.bits):
            start, held = self.finger_start(i), self.fingers[i] or self.successor
            if peer.id == start or in_open(peer.id, start, held.id):
                return True
        return False

    def known_peers(self) -> set[Peer]:
        peers = {p for p in self.fingers if p is not None} | set(self.successors)
        if self.predecessor is not None:
            peers.add(self.predecessor)
        peers.discard(self.me)
        return peers

    def owns(self, k: int) -> bool:
        """Whether k is in (predecessor, me]; with no known predecessor the node keeps the key."""
        if self.predecessor is None or self.alone:
            return True
        return in_half_open(k, self.predecessor.id, self.me.id)

    def owns_strictly(self, k: int) -> bool:
        """Whether k is surely ours: in (predecessor, me] with a predecessor known, or we are alone.
        A node that has just lost its predecessor (a slow neighbour's ping timed out) would otherwise
        claim every key until notify() tells it again, within a round; leased records (whose owner
        expires fields and tells watchers) must not be served or expired on such a claim."""
        if self.alone:
            return True
        return self.predecessor is not None and in_half_open(k, self.predecessor.id, self.me.id)

    # -- routing (ToN'03 Fig. 5) -------------------------------------------------------------
    def closest_preceding_node(self, k: int, avoid: Collection[str] = ()) -> Peer:
        """The known node that most closely precedes k (ToN'03 Fig. 5, with §V-B's successor list).

        Fingers are scanned from the farthest down and the first one in (me, k) is taken, as in
        the paper; then the successor list may offer a closer one. Nodes whose endpoint is in
        `avoid` (known or suspected dead) are skipped, so a lookup that met a failure tries the
        next best candidate. Returns `me` when no known node lies in (me, k).
        """
        size = 1 << self.bits
        me = self.me.id
        limit = (k - me) % size or size  # candidates need 0 < distance < limit
        best, best_d = self.me, 0
        for p in reversed(self.fingers):
            if p is not None and p.endpoint not in avoid:
                d = (p.id - me) % size
                if 0 < d < limit:
                    best, best_d = p, d
                    break
        for p in self.successors:
            d = (p.id - me) % size
            if best_d < d < limit and p.endpoint not in avoid:
                best, best_d = p, d
        return best

    def next_hop(self, k: int, avoid: Collection[str] = ()) -> NextHop | None:
        """One step of find_successor(k): the owner if k is in (me, successor], else a closer node.

        The successor is the first successor-list entry not in `avoid`. A node that knows no
        other live node owns everything. Returns None when the successors are all avoided and
        no finger precedes k, so no step can be made.
        """
        succ = next((s for s in self.successors if s.endpoint not in avoid), None)
        if succ is None:
            if not any(p.endpoint not in avoid for p in self._candidates()):
                return NextHop(True, self.me)
            cpn = self.closest_preceding_node(k, avoid)
            return None if cpn == self.me else NextHop(False, cpn)
        if in_half_open(k, self.me.id, succ.id):
            return NextHop(True, succ)
        if self.prs:  # the list runs clockwise from us: the first live entry at or past k owns it
            owner = next((s for s in self.successors if s.endpoint not in avoid and in_half_open(k, self.me.id, s.id)),
                         None)
            if owner is not None:
                return NextHop(True, owner)
        # succ lies in (me, k), so a preceding candidate always exists
        return NextHop(False, self.closest_preceding_node(k, avoid))

    def _candidates(self) -> Iterable[Peer]:
        seen: set[Peer] = set()
        for p in list(self.fingers) + list(self.successors):
            if p is not None and p not in seen and p != self.me:
                seen.add(p)
                yield p

    # -- updates from the network (ToN'03 Fig. 6) ---------------------------------------------
    def adopt_successor_list(self, successor: Peer, its_successors: Iterable[Peer]) -> None:
        """successor list := successor followed by its own list, without duplicates or me (§V-B)."""
        merged: list[Peer] = []
        for p in [successor, *its_successors]:
            if p == self.me:
                break  # the list wrapped around the whole (small) ring
            if p not in merged:
                merged.append(p)
            if len(merged) == self.r:
                break
        self.successors = merged
        if merged:
            self.fingers[0] = merged[0]

    def consider_successor(self, candidate: Peer) -> bool:
        """stabilize: adopt x = successor.predecessor when x is in (me, successor)."""
        if candidate == self.me:
            return False
        if self.alone or in_open(candidate.id, self.me.id, self.successor.id):
            self.successors = [candidate] + [s for s in self.successors if s != candidate][: self.r - 1]
            self.fingers[0] = candidate
            return True
        return False

    def consider_predecessor(self, candidate: Peer) -> bool:
        """notify: adopt candidate as predecessor when none is known or it is in (predecessor, me)."""
        if candidate == self.me:
            return False
        if self.predecessor is None or in_open(candidate.id, self.predecessor.id, self.me.id):
            self.predecessor = candidate
            if self.alone:
                # a lone node learns of a second one: it is also our successor (the two-node ring)
                self.consider_successor(candidate)
            return True
        return False

    def set_finger(self, i: int, peer: Peer) -> list[int]:
        """Set finger i to `peer`, and every later finger that the same node must own.

        If peer = successor(start_i), no node lies in [start_i, peer), so every start_j (j > i)
        in [start_i, peer] has the same successor: one lookup fixes a run of fingers.
        Returns the indexes set.
        """
        set_idx = [i]
        self.fingers[i] = peer
        span = distance(self.me.id, peer.id, self.bits) if peer != self.me else 1 << self.bits
        for j in range(i + 1, self.bits):
            if distance(self.me.id, self.finger_start(j), self.bits) <= span:
                self.fingers[j] = peer
                set_idx.append(j)
            else:
                break
        return set_idx

    def forget(self, endpoint: str) -> bool:
        """Drop every reference to a node found dead. Returns whether anything changed."""
        changed = False
        kept = [s for s in self.successors if s.endpoint != endpoint]
        if len(kept) != len(self.successors):
            self.successors = kept
            changed = True
        for i, f in enumerate(self.fingers):
            if f is not None and f.endpoint == endpoint:
                self.fingers[i] = None
                changed = True
        if self.predecessor is not None and self.predecessor.endpoint == endpoint:
            self.predecessor = None
            changed = True
        if not self.successors:
            fallback = self._fallback_successor()
            if fallback is not None:
                self.successors = [fallback]
        if self.successors:
            self.fingers[0] = self.successors[0]
        return changed

    def forget_process(self, endpoint: str) -> bool:
        """Drop every position of `endpoint`'s process (found dead: a process dies with all its
        positions, dht/ids.py). Returns whether anything changed."""
        process = process_of(endpoint)
        gone = {p.endpoint for p in self.known_peers() if process_of(p.endpoint) == process}
        changed = False
        for e in gone:
            changed = self.forget(e) or changed
        return changed

    def _fallback_successor(self) -> Peer | None:
        """With the whole successor list dead, the nearest finger (or the predecessor) stands in."""
        others = [p for p in self._candidates()]
        if self.predecessor is not None and self.predecessor != self.me:
            others.append(self.predecessor)
        if not others:
            return None
        return min(others, key=lambda p: distance(self.me.id, p.id, self.bits))
