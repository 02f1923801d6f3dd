"""Who should hold an arc's consensus group, as the ring says now (dht/arcs.py says why these): the
process owning the arc's last id, then the next processes on its successor list, `replicas` in all,
each named by the member id its consensus service announces (`info`'s services["consensus"]).

Blocking calls to the ring: run by the consensus service's placement thread (`run_placement`), never
by its loop.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from dht import wire
from dht.arcs import arc_end
from dht.client import DhtClient, DhtError
from dht.ids import in_half_open, process_of
from dht.routing import Peer
from dht.transport import SocketSetup

log = logging.getLogger(__name__)

PLACE_DELAY = 0.5  # seconds the placement thread lets requests gather before it asks the ring
PLACE_RETRY = 1.0  # seconds before asking again where the ring could not say
MEMBER_MEMORY = 300.0  # seconds a process's member id is kept without a move of the ring (a process that
# restarted far from this one, under a new id, is seen within this)
SERVICE = "consensus"  # the services key under which a node announces its consensus member id
ARCS_SEEN = "arcs"  # the key of `known` under which a pass keeps the owners' arcs it has asked


class Placement:
    """Asks the ring through the node at `via` (its own process's endpoint). What a pass learned is kept
    for the next until the ring moves (`forget`): each arc's owner, asked again only whether its
    predecessor still leaves it the arc (one `get_links`, no lookup), and each process's member id (no
    `info`) for MEMBER_MEMORY at most. A quiet 16-node ring's 30-second passes asked 16 lookups and 16
    `info`s (4 KB each) every time: most of what the ring's groups cost it idle, 300 of its 700 bytes a
    second per node."""

    def __init__(self, via: str, replicas: int, setup: SocketSetup | None = None, timeout: float = 1.0) -> None:
        self.replicas = replicas
        self.dht = DhtClient(via, timeout=timeout, retries=0, setup=setup)
        self._members: dict[str, str | None] = {}  # process -> its member id (None: it announces none)
        self._owners: dict[int, Peer] = {}  # arc end -> the position that owned it at the last look
        self._members_at = time.monotonic()
        self._stale = threading.Event()

    def forget(self) -> None:
        """The ring moved (any thread): the next pass asks everything again."""
        self._stale.set()

    def wanted(self, end: int, known: dict) -> list[str] | None:
        """The member ids that should hold the group whose arc ends at id `end`, or None when the ring
        cannot say now (a lookup failed). `known`: what earlier calls of the same pass learned (the
        owners' arcs with their answers), filled in as this one learns more, so that a pass asks each
        owner once."""
        now = time.monotonic()
        if self._stale.is_set() or now - self._members_at > MEMBER_MEMORY:
            if self._stale.is_set():
                self._stale.clear()
                self._owners.clear()
            self._members.clear()
            self._members_at = now
        arcs = known.setdefault(ARCS_SEEN, [])
        for lo, hi, members in arcs:
            if in_half_open(end, lo, hi):
                return members
        found = self._owner_of(end)
        if found is None:
            return None
        owner, predecessor, successors = found
        out: list[str] = []
        taken: set[str] = set()
        for endpoint in [owner.endpoint] + [s.endpoint for s in successors]:
            process = process_of(endpoint)
            if process in taken:
                continue
            taken.add(process)
            if process not in self._members:
                try:
                    self._learn(self.dht.info(endpoint))
                except DhtError:
                    return None  # gone, or slow: asked again once the ring has dropped it, or it answers
            member = self._members.get(process)
            if member is not None:
                out.append(member)
            if len(out) >= self.replicas:
                break
        if predecessor is not None:
            arcs.append((predecessor.id, owner.id, out))
        return out

    def _owner_of(self, end: int) -> tuple[Peer, Peer | None, list[Peer]] | None:
        """The position owning id `end`, its predecessor and its successors: the owner of the last look
        while its predecessor still leaves it `end` (Chord: a node owns (predecessor, itself]), else
        the one a lookup finds."""
        owner = self._owners.get(end)
        if owner is not None:
            links = self._links(owner.endpoint)
            if links is not None and links[0] is not None and in_half_open(end, links[0].id, owner.id):
                return owner, *links
            del self._owners[end]
        found = self.dht.lookup_id(end)
        if not found.ok or found.owner is None:
            return None
        links = self._links(found.owner.endpoint)
        if links is None:
            return None
        self._owners[end] = found.owner
        return found.owner, *links

    def _links(self, endpoint: str) -> tuple[Peer | None, list[Peer]] | None:
        reply = self.dht.rpc.call(endpoint, "get_links")
        if not reply.ok:
            return None
        try:
            return (wire.decode_optional_peer(reply.body.get("predecessor")),
                    wire.decode_peers(reply.body.get("successors", [])))
        except wire.WireError:
            return None

    def _learn(self, info: dict) -> None:
        member = info["services"].get(SERVICE)
        self._members[process_of(info["endpoint"])] = member if isinstance(member, str) else None

    def close(self) -> None:
        self.dht.close()


def run_placement(asked: queue.Queue, locate: Callable[[int, dict], list[str] | None], bits: int,
                  answer: Callable[[tuple], None], stopped: threading.Event) -> None:
    """The consensus service's placement thread: takes arcs from `asked` (None: stop), waits PLACE_DELAY
    for more (a ring that moves moves in bursts: joins), asks the ring once per pass for them all, and
    answers ("wanted", (arc, members)) for each; an arc the ring could not say is asked again
    PLACE_RETRY later (still open in the loop's eyes)."""
    while not stopped.is_set():
        arc = asked.get()
        if arc is None:
            return
        stopped.wait(PLACE_DELAY)
        arcs = [arc]
        while True:
            try:
                more = asked.get_nowait()
            except queue.Empty:
                break
            if more is None:
                return
            arcs.append(more)
        known: dict = {}
        unknown = []
        for a in dict.fromkeys(arcs):
            try:
                members = locate(arc_end(a, bits), known)
            except Exception:  # a ring that cannot be asked now: asked again later
                log.exception("placement of arc %d failed", a)
                members = None
            if members is None:
                unknown.append(a)
            else:
                answer(("wanted", (a, members)))
        if unknown and not stopped.wait(PLACE_RETRY):
            for a in unknown:
                asked.put(a)
