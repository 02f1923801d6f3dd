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
from collections.abc import Callable

from dht.arcs import arc_end
from dht.client import DhtClient, DhtError
from dht.ids import in_half_open, process_of
from dht.transport import SocketSetup

log = logging.getLogger(__name__)

PLACE_DELAY = 0.5  # seconds the placement thread lets requests gather before it asks the ring
PLACE_RETRY = 1.0  # seconds before asking again where the ring could not say
SERVICE = "consensus"  # the services key under which a node announces its consensus member id
ARCS_SEEN = "\x00arcs"  # the key of `known` under which a pass keeps the owners' arcs it has asked


class Placement:
    """Asks the ring through the node at `via` (its own process's endpoint)."""

    def __init__(self, via: str, replicas: int, setup: SocketSetup | None = None, timeout: float = 1.0) -> None:
        self.replicas = replicas
        self.dht = DhtClient(via, timeout=timeout, retries=0, setup=setup)

    def wanted(self, end: int, known: dict) -> list[str] | None:
        """The member ids that should hold the group whose arc ends at id `end`, or None when the ring
        cannot say now (a lookup failed). `known`: what earlier calls of the same pass learned (each
        process's member id, None for none; and each owner's arc with its answer), filled in as this
        one learns more, so that a pass asks each owner and each process once."""
        arcs = known.setdefault(ARCS_SEEN, [])
        for lo, hi, members in arcs:
            if in_half_open(end, lo, hi):
                return members
        found = self.dht.lookup_id(end)
        if not found.ok or found.owner is None:
            return None
        try:
            owner = self.dht.info(found.owner.endpoint)
        except DhtError:
            return None
        self._learn(owner, known)
        out: list[str] = []
        taken: set[str] = set()
        for endpoint in [owner["endpoint"]] + [s["endpoint"] for s in owner["successors"]]:
            process = process_of(endpoint)
            if process in taken:
                continue
            taken.add(process)
            if process not in known:
                try:
                    self._learn(self.dht.info(endpoint), known)
                except DhtError:
                    return None  # gone, or slow: asked again once the ring has dropped it, or it answers
            member = known.get(process)
            if member is not None:
                out.append(member)
            if len(out) >= self.replicas:
                break
        if owner["predecessor"] is not None:
            arcs.append((owner["predecessor"]["id"], owner["id"], out))
        return out

    @staticmethod
    def _learn(info: dict, known: dict) -> None:
        member = info["services"].get(SERVICE)
        known[process_of(info["endpoint"])] = member if isinstance(member, str) else None

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
