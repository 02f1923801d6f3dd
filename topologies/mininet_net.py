"""A topologies/graphs.py graph as a Mininet network, always torn down (mininet's net.py, used as a library).

LinuxBridge switches and no controller (`mn --switch lxbr --controller none`), TCLink links with the
graph's delay, bandwidth and loss. Graph names become Mininet's: hosts h1.., switches s1.., in
the graph's order (Mininet derives interface names and datapath ids from them). Router-level
graphs (waxman, barabasi_albert, transit_stub) have cycles, which Linux bridges without STP would
flood forever, so each router becomes a switch with one host on a zero-delay link, and only the
graph's minimum-delay spanning tree is emulated (host-to-host delays can only grow; `describe`
gives the tree's figures). The network is stopped in `finally`, and `leftovers()` lets tests check
that no bridge, namespace or process remains.

Debian's mininet package installs into the system Python's dist-packages; when our interpreter
cannot import it, `import_mininet` loads that copy (mininet is pure Python; mnexec is a binary).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

from topologies.graphs import hosts

DEBIAN_MININET = Path("/usr/lib/python3/dist-packages/mininet")


class MininetError(RuntimeError):
    """Mininet cannot run here (not root, not installed) or the network failed to start."""


def import_mininet():  # -> the mininet package
    try:
        import mininet
        return mininet
    except ImportError:
        pass
    init = DEBIAN_MININET / "__init__.py"
    if not init.exists():
        raise MininetError("Mininet is not installed (apt-get install mininet; `make test` does it as root)")
    spec = importlib.util.spec_from_file_location("mininet", init, submodule_search_locations=[str(DEBIAN_MININET)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["mininet"] = module
    spec.loader.exec_module(module)
    return module


def check_runnable() -> None:
    if os.geteuid() != 0:
        raise MininetError("Mininet needs root (network namespaces, bridges, tc)")
    for tool in ("mnexec", "ip", "tc"):
        if shutil.which(tool) is None:
            raise MininetError(f"{tool} is not on PATH (install mininet and iproute2)")
    import_mininet()


def netem_available() -> bool:
    """Whether this kernel can delay packets (sch_netem): TCLink's delay and loss need it."""
    probe = "chordpub-netem-probe"
    subprocess.run(["ip", "netns", "add", probe], capture_output=True, check=True)
    try:
        ok = subprocess.run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root", "netem",
                             "delay", "1ms"], capture_output=True).returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ok


def emulated_graph(g: nx.Graph) -> nx.Graph:
    """What Mininet will run: g itself when it has switches, else routers as switches with a host each."""
    if any(kind == "switch" for _, kind in g.nodes(data="kind")):
        return g
    tree = nx.minimum_spanning_tree(g, weight="delay_ms")
    out = nx.Graph(**g.graph)
    for v in tree.nodes:
        out.add_node(("router", v), kind="switch")
        out.add_node(v, kind="host")
        out.add_edge(v, ("router", v), delay_ms=0.0, bw_mbps=1000.0, loss_pct=0.0)
    for a, b, d in tree.edges(data=True):
        out.add_edge(("router", a), ("router", b), **d)
    return out


@dataclass
class Network:
    """A running Mininet network and the mapping from graph nodes to Mininet hosts."""

    net: object
    graph: nx.Graph
    names: dict = field(default_factory=dict)  # graph node -> Mininet name

    def host(self, node):  # -> mininet.node.Host
        return self.net.get(self.names[node])

    def hosts(self) -> list:
        return [self.host(v) for v in hosts(self.graph)]


@contextmanager
def mininet_network(g: nx.Graph) -> Iterator[Network]:
    """Start g on Mininet; stop it however the block ends."""
    check_runnable()
    import_mininet()
    from mininet.link import TCLink
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.nodelib import LinuxBridge

    setLogLevel("error")
    emu = emulated_graph(g)
    shaped = any(d.get("delay_ms") or d.get("loss_pct") for *_, d in emu.edges(data=True))
    if shaped and not netem_available():
        raise MininetError("this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM), so link delay and loss "
                           "cannot be emulated; use delay=0 or a kernel with sch_netem")
    net = Mininet(topo=None, switch=LinuxBridge, controller=None, link=TCLink, build=False,
                  autoSetMacs=True, waitConnected=False)
    names: dict = {}
    for v, kind in emu.nodes(data="kind"):
        if kind == "host":
            names[v] = f"h{sum(1 for n in names.values() if n.startswith('h')) + 1}"
            net.addHost(names[v])
        else:
            names[v] = f"s{sum(1 for n in names.values() if n.startswith('s')) + 1}"
            net.addSwitch(names[v])
    for a, b, d in emu.edges(data=True):
        opts = {"delay": f"{d.get('delay_ms', 0.0):g}ms", "bw": d.get("bw_mbps", 100.0)}
        if d.get("loss_pct"):
            opts["loss"] = d["loss_pct"]
        net.addLink(names[a], names[b], **opts)
    try:
        try:
            net.build()
            net.start()
        except Exception as exc:  # Mininet raises bare Exceptions for setup failures
            raise MininetError(f"Mininet could not start the network: {exc}") from exc
        yield Network(net, emu, names)
    finally:
        net.stop()


def leftovers() -> dict[str, list[str]]:
    """Network namespaces, bridges and mininet helper processes now present (for tests' checks)."""
    bridges = subprocess.run(["ip", "-o", "link", "show", "type", "bridge"], capture_output=True, text=True).stdout
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    procs = subprocess.run(["pgrep", "-af", "mininet:"], capture_output=True, text=True).stdout
    return {"bridges": [line.split(":")[1].strip().split("@")[0] for line in bridges.splitlines() if ":" in line],
            "netns": netns.split(), "processes": procs.splitlines()}
