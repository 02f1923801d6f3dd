"""The ring positions of a LocalRing's node processes, for ring tests that must hold whether a process
holds one position or several (virtual nodes: `pytest --vnodes V`, `node start --vnodes V`).

A key's copies are on its owner position and on the first position of each of the next replicas-1
other processes clockwise (dht/replication.py `replica_targets`); with one position a process that is
the owner and its first replicas-1 successors."""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterable
from dataclasses import dataclass

from chordpub.launcher import NodeProcess
from dht.client import DhtClient, info_from_reply
from dht.transport import RpcClient


@dataclass(frozen=True)
class Position:
    id: int
    endpoint: str
    node: NodeProcess  # the process holding it


def positions(nodes: Iterable[NodeProcess]) -> list[Position]:
    """Every position of `nodes`, in ring order (by id)."""
    out = []
    for n in nodes:
        held = n.positions or [{"id": n.id, "endpoint": n.endpoint}]
        out += [Position(int(p["id"]), p["endpoint"], n) for p in held]
    return sorted(out, key=lambda p: p.id)


def ids(nodes: Iterable[NodeProcess]) -> list[int]:
    return [p.id for p in positions(nodes)]


def owner(ring: list[Position], k: int) -> Position:
    """The position owning id k on `ring` (positions in ring order)."""
    return ring[bisect.bisect_left([p.id for p in ring], k) % len(ring)]


def copies(ring: list[Position], k: int, replicas: int) -> list[Position]:
    """The positions holding key id k: its owner and the first position of each of the next replicas-1
    processes (the successor list permitting, as on the live ring)."""
    at = ring.index(owner(ring, k))
    out = [ring[at]]
    taken = {ring[at].node.endpoint}
    for step in range(1, len(ring)):
        if len(out) == replicas:
            break
        p = ring[(at + step) % len(ring)]
        if p.node.endpoint not in taken:
            taken.add(p.node.endpoint)
            out.append(p)
    return out


def survivable_kills(nodes: list[NodeProcess], count: int, rng: random.Random, replicas: int,
                     spare: Iterable[NodeProcess] = ()) -> list[NodeProcess]:
    """`count` processes (none of `spare`) whose deaths leave every arc a copy: with one position a
    process, no two ring neighbours (and so never `replicas` in a row)."""
    ring = positions(nodes)
    keep = {n.endpoint for n in spare}
    pool = [n for n in nodes if n.endpoint not in keep]
    for _ in range(10_000):
        picks = rng.sample(pool, count)
        dead = {n.endpoint for n in picks}
        if all(n.vnodes > 1 for n in nodes):
            ok = all(any(c.node.endpoint not in dead for c in copies(ring, p.id, replicas)) for p in ring)
        else:  # one position each: no two neighbours, as the plain ring tests always chose
            order = [p.node.endpoint for p in ring]
            ok = all(not (a in dead and b in dead) for a, b in zip(order, order[1:] + order[:1], strict=True))
        if ok:
            return picks
    raise AssertionError(f"no {count} processes of {len(nodes)} can die without losing an arc's every copy")


def total(ring_nodes: Iterable[NodeProcess], via: str, field: str = "stored") -> int:
    """A figure of `info` summed over every position of `ring_nodes`."""
    with DhtClient(via) as client:
        return sum(client.info(p.endpoint)[field] for p in positions(ring_nodes))


def infos_of(where: list) -> list[dict]:
    """Each of these positions' `info` (DhtClient.info's shape), asked of all at once over one socket
    (RpcClient.send): asked one after another, or each over a socket of its own on a loaded machine, the
    first would have run rounds more by the time the last answers, and the rounds counted from the kill
    would include them."""
    replies: dict[int, object] = {}
    with RpcClient(timeout=5.0) as rpc:
        for i, p in enumerate(where):
            rpc.send(p.endpoint, "info", on_reply=lambda reply, i=i: replies.__setitem__(i, reply))
        rpc.serve_until(lambda: len(replies) == len(where))
    failed = [where[i].endpoint for i, r in replies.items() if not r.ok]
    assert not failed, f"no info from {failed}"
    return [info_from_reply(replies[i].body, where[i].endpoint) for i in range(len(where))]


def rounds_of(where: list, field: str = "rounds") -> list[int]:
    """The maintenance rounds each of these positions has run so far (or the `field` of its info that
    counts in rounds), asked of all at once (`infos_of`)."""
    return [info[field] for info in infos_of(where)]
