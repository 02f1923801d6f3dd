"""Which process runs on which host: round-robin or seeded random placement, and the course's dht.json.

Pure: no Mininet, no processes. Round-robin gives process i (discovery nodes first, then
publishers, then subscribers) host i mod H, so there is one process per host while hosts last;
random shuffles the hosts with the seed and then deals them out the same way (still balanced).
The CS 6381 experiment generator writes `{"dht": [{"id", "hash", "IP", "port", "host"}...]}`:
`load_dht_json` checks such a file, and `place` then puts exactly those nodes on those hosts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PLACEMENTS = ("roundrobin", "random")
DEFAULT_PORT = 5555


class PlacementError(ValueError):
    """A placement that cannot be made, or a bad dht.json: one clear line for the user."""


@dataclass(frozen=True)
class Slot:
    """One process of the experiment: its role, its name, the host it runs on."""

    role: str  # dht | pub | sub
    name: str  # dht1.., pub1.., sub1..
    host: str  # Mininet host name
    port: int | None = None  # discovery nodes only
    node_id: int | None = None  # from dht.json; None: key_id("ip:port")

    def to_dict(self) -> dict:
        return {"role": self.role, "name": self.name, "host": self.host, "port": self.port,
                "id": None if self.node_id is None else str(self.node_id)}


@dataclass(frozen=True)
class DhtEntry:
    name: str
    node_id: int
    ip: str
    port: int
    host: str


def load_dht_json(path: Path, bits: int) -> list[DhtEntry]:
    """The course's dht.json: every entry's fields present and typed, ids unique and < 2**bits."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise PlacementError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise PlacementError(f"{path} is not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("dht"), list) or not doc["dht"]:
        raise PlacementError(f'{path}: expected {{"dht": [{{"id", "hash", "IP", "port", "host"}}, ...]}}')
    entries: list[DhtEntry] = []
    for i, e in enumerate(doc["dht"]):
        where = f"{path}: dht[{i}]"
        if not isinstance(e, dict) or not {"id", "hash", "IP", "port", "host"} <= e.keys():
            raise PlacementError(f"{where} needs id, hash, IP, port and host")
        try:
            node_id = int(e["hash"])
            port = int(e["port"])
        except (TypeError, ValueError):
            raise PlacementError(f"{where}: hash and port must be integers") from None
        if isinstance(e["hash"], bool) or not 0 <= node_id < 1 << bits:
            raise PlacementError(f"{where}: hash {e['hash']!r} does not fit in {bits} bits (set --bits)")
        if not 1 <= port <= 65535:
            raise PlacementError(f"{where}: port {port} is not 1..65535")
        entries.append(DhtEntry(str(e["id"]), node_id, str(e["IP"]), port, str(e["host"])))
    for attr in ("node_id", "name"):
        values = [getattr(e, attr) for e in entries]
        if len(set(values)) != len(values):
            raise PlacementError(f"{path}: two entries share the same {'hash' if attr == 'node_id' else 'id'}")
    if len({(e.host, e.port) for e in entries}) != len(entries):
        raise PlacementError(f"{path}: two entries share a host and port")
    return entries


def place(hosts: list[str], dht: int, pubs: int, subs: int, how: str = "roundrobin", seed: int | None = None,
          entries: list[DhtEntry] | None = None, port: int = DEFAULT_PORT) -> list[Slot]:
    """Slots for every process. With `entries` the discovery nodes are exactly those (dht is ignored)."""
    if how not in PLACEMENTS:
        raise PlacementError(f"placement must be one of {', '.join(PLACEMENTS)}, got {how!r}")
    if not hosts:
        raise PlacementError("the topology has no hosts")
    if dht < 1 and not entries:
        raise PlacementError("at least one discovery node is needed (--dht)")
    order = list(hosts)
    if how == "random":
        order = [order[i] for i in np.random.default_rng(seed).permutation(len(order))]
    slots: list[Slot] = []
    if entries:
        unknown = sorted({e.host for e in entries} - set(hosts))
        if unknown:
            raise PlacementError(f"dht.json names hosts the topology lacks: {', '.join(unknown)} "
                                 f"(it has {hosts[0]}..{hosts[-1]})")
        slots += [Slot("dht", e.name, e.host, e.port, e.node_id) for e in entries]
    else:
        per_host: dict[str, int] = {}
        for i in range(dht):
            host = order[i % len(order)]
            slots.append(Slot("dht", f"dht{i + 1}", host, port + per_host.get(host, 0)))
            per_host[host] = per_host.get(host, 0) + 1
    start = len(slots)
    for role, count in (("pub", pubs), ("sub", subs)):
        for j in range(count):
            slots.append(Slot(role, f"{role}{j + 1}", order[(start + j) % len(order)]))
        start += count
    return slots
