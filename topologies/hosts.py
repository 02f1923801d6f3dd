"""Where an experiment's processes run: the hosts of a Mininet network, or this machine's loopback.

An experiment (topologies/experiment.py) asks its hosts three things: their names, the address a
process on a host listens on, and to start a command there. Mininet's hosts are separate network
namespaces behind emulated links (topologies/mininet_net.py); the local backend is one host,
127.0.0.1, for users without root — no link emulation, every process on loopback, and discovery
nodes on ports the kernel picks (port 0), since they share one address.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Protocol

import networkx as nx

from topologies.graphs import build, describe
from topologies.host_templates import fork_on_host

BACKENDS = ("mininet", "local")
LOCAL_HOST = "local"
LOOPBACK = "127.0.0.1"


class Hosts(Protocol):
    source: str  # the trace rows' source: "mininet" or "live"
    emulation: str

    @property
    def names(self) -> list[str]: ...

    def ip(self, host: str) -> str: ...

    def node_port(self, port: int | None) -> int: ...

    def popen(self, host: str, argv: list[str], stdout: IO | int, stderr: IO | int) -> subprocess.Popen: ...

    def describe(self) -> dict: ...


class MininetHosts:
    source = "mininet"

    def __init__(self, net) -> None:  # noqa: ANN001 - a topologies.mininet_net.Network
        self.net = net
        self.emulation = net.emulation

    @property
    def names(self) -> list[str]:
        g = self.net.graph
        return [self.net.names[v] for v in g.nodes if g.nodes[v]["kind"] == "host"]

    def ip(self, host: str) -> str:
        return self.net.net.get(host).IP()

    def node_port(self, port: int | None) -> int:
        return int(port or 0)

    def popen(self, host: str, argv: list[str], stdout: IO | int, stderr: IO | int) -> subprocess.Popen:
        node = self.net.net.get(host)
        if isinstance(getattr(stdout, "name", None), str) and isinstance(getattr(stderr, "name", None), str):
            # output to files: a chordpub command is forked onto the host (topologies/host_templates.py)
            forked = fork_on_host(node, argv, stdout.name, None if stderr.name == stdout.name else stderr.name)
            if forked is not None:
                return forked
        # mnexec -da: into the host's namespaces; no new session here, or mnexec forks away from us
        return node.popen(argv, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL)

    def describe(self) -> dict:
        return describe(self.net.graph)


class LocalHosts:
    source = "live"
    emulation = "none"

    @property
    def names(self) -> list[str]:
        return [LOCAL_HOST]

    def ip(self, host: str) -> str:
        return LOOPBACK

    def node_port(self, port: int | None) -> int:
        return 0  # one address for every node: the kernel picks free ports

    def popen(self, host: str, argv: list[str], stdout: IO | int, stderr: IO | int) -> subprocess.Popen:
        # a session of its own: a Ctrl-C at the terminal reaches us, and we stop the children in order
        return subprocess.Popen(argv, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL, start_new_session=True)

    def describe(self) -> dict:
        return {"spec": "loopback", "hosts": 1, "switches": 0, "links": 0, "diameter_ms": 0.0}


def graph_for(topo: str, delay_ms: float | None, seed: int | None) -> nx.Graph:
    """The topology with every link's delay set to `delay_ms` (None keeps the spec's)."""
    g = build(topo, seed=seed)
    if delay_ms is not None:
        for *_, d in g.edges(data=True):
            d["delay_ms"] = delay_ms
    return g


@contextmanager
def open_hosts(backend: str, topo: str, delay_ms: float | None, seed: int | None, workdir: Path,
               emulation: str = "auto") -> Iterator[Hosts]:
    """The hosts of one experiment, torn down on the way out (a Mininet network is stopped in finally)."""
    if backend == "local":
        yield LocalHosts()
        return
    from topologies.mininet_net import mininet_network

    with mininet_network(graph_for(topo, delay_ms, seed), workdir=workdir, emulation=emulation, seed=seed) as net:
        yield MininetHosts(net)
