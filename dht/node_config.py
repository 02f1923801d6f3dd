"""A node process's settings (`chordpub node start`'s options): what they mean, their defaults and
their bounds, checked once before anything starts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dht import wire
from dht.ids import MAX_VNODES, check_bits
from dht.pacing import QUIET_STRETCH
from dht.proximity import DEFAULT_SAMPLES


@dataclass
class NodeConfig:
    host: str = "127.0.0.1"  # the address others reach the node at (its id is the hash of host:port)
    port: int = 0  # 0: a free port chosen at bind time
    bind: str | None = None  # bind here instead of `host` (e.g. 0.0.0.0): dht/address.py
    advertise_port: int | None = None  # others reach the node at this port (NAT, a container's mapping)
    join: str | list[str] | None = None  # seeds: "H:P", "H:P,H:P", or a list; tried in turn (seed_list)
    id: int | None = None  # position 0's id (default: the hash of its endpoint)
    vnodes: int = 1  # ring positions this process holds (virtual nodes), 1..MAX_VNODES
    bits: int = 64
    successors: int = 8
    replicas: int = 3  # copies of each key in all: the owner and its first replicas-1 successors
    stabilize: float = 0.5
    rpc_timeout: float | None = None  # default: derived from the period
    replica_lease_periods: float = 10.0
    refresh_every: int = 2  # rounds between full replica refreshes
    on_lookup: Callable[[object, int], None] | None = field(default=None, repr=False)  # (LookupResult, position id)
    services: dict[str, str] = field(default_factory=dict)  # endpoints of co-located services (a relay)
    data_dir: Path | None = None  # keep the store in DIR/store.sqlite3 (dht/durable.py)
    pns: int = DEFAULT_SAMPLES  # proximity neighbour selection: each finger the nearest of K samples (0: plain)
    prs: bool = False  # a key the successor list covers is answered with its owner (dht/routing.py)
    join_timeout: float | None = None  # give up joining after this many seconds (None: keep trying)
    probe_every: float | None = None  # seconds between probes of remembered members (None: 2 periods; 0: never)
    quiet_stretch: int = QUIET_STRETCH  # a quiet position's rounds up to this many periods apart (dht/pacing.py)
    ports: int = 0  # the events socket's port, and the first of the four ports a node's sockets
    # other than its RPC take (events, relay in, relay out, consensus: what a firewall opens); 0: free ones
    acl: Path | None = None  # a policy file (dht/policy.py): who may register and read which topics

    @property
    def seeds(self) -> list[str]:
        return seed_list(self.join)

    def validate(self) -> None:
        check_bits(self.bits)
        for seed in self.seeds:
            wire.parse_endpoint(seed)
        if not 1 <= self.quiet_stretch <= 8:
            raise ValueError(f"quiet_stretch must be 1..8 periods, got {self.quiet_stretch}")
        if self.probe_every is not None and not 0 <= self.probe_every <= 3600:
            raise ValueError("probe-every must be between 0 (never) and 3600 seconds")
        if not 0 <= self.port < 65536:
            raise ValueError("port must be in 0..65535")
        if self.ports and not 0 < self.ports < 65536 - 3:
            raise ValueError("ports must be in 1..65532 (four consecutive ports from it)")
        if self.advertise_port is not None and not 0 < self.advertise_port < 65536:
            raise ValueError("the advertised port must be in 1..65535")
        if self.id is not None and not 0 <= self.id < (1 << self.bits):
            raise ValueError(f"id must be in 0..2**{self.bits}-1")
        if not 1 <= self.vnodes <= MAX_VNODES:
            raise ValueError(f"vnodes must be in 1..{MAX_VNODES} (ring positions in this process)")
        if self.successors < 1 or self.replicas < 1:
            raise ValueError("successors and replicas must be at least 1")
        if self.replicas - 1 > self.successors:
            raise ValueError("replicas - 1 cannot exceed the successor-list length")
        if not 0 <= self.pns <= 64:
            raise ValueError("pns must be between 0 (plain Chord) and 64 samples")
        if not 0.01 <= self.stabilize <= 3600:
            raise ValueError("stabilize must be between 0.01 and 3600 seconds")


def seed_list(join: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """The seeds of `--join`: comma-separated and/or repeated endpoints, in order, without repeats."""
    items = [join] if isinstance(join, str) else list(join or ())
    out: list[str] = []
    for item in items:
        for part in item.split(","):
            part = part.strip()
            if part and part not in out:
                out.append(part)
    return out
