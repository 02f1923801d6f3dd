"""A topologies/graphs.py graph as a Mininet network, always torn down (mininet's net.py, used as a library).

LinuxBridge switches and no controller (`mn --switch lxbr --controller none`), TCLink links with the graph's
delay, bandwidth and loss. On a kernel without sch_netem (TCLink's delay and loss need it),
`topologies.delay_switch` replaces the bridges and delays and drops frames itself, while TCLink keeps the
bandwidth (htb); `choose_emulation` decides, and the Network says which was used. Graph names become
Mininet's: hosts h1.., switches s1.., in the graph's order (Mininet derives interface names and datapath ids
from them). Router-level graphs (waxman, barabasi_albert, transit_stub) have cycles, which Linux bridges
without STP would flood forever, so each router becomes a switch with one host on a zero-delay link, and only
the graph's minimum-delay spanning tree is emulated (host-to-host delays can only grow; `describe` gives the
tree's figures). The network is stopped in `finally`, and `leftovers()` lets tests check that no bridge,
namespace or process remains.

Debian's mininet package installs into the system Python's dist-packages; when our interpreter
cannot import it, `import_mininet` loads that copy (mininet is pure Python; mnexec is a binary).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import networkx as nx

from topologies.delay_switch import Port as DelayPort
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
    emulation: str = "none"  # how link delay and loss are emulated: none | netem | userspace

    def host(self, node):  # -> mininet.node.Host
        return self.net.get(self.names[node])

    def hosts(self) -> list:
        return [self.host(v) for v in hosts(self.graph)]


EMULATIONS = ("auto", "netem", "userspace")


def choose_emulation(g: nx.Graph, wanted: str = "auto") -> str:
    """How link delay and loss are emulated: "none" (no link has any), "netem" (TCLink, the kernel's
    sch_netem) or "userspace" (topologies.delay_switch in place of the bridges). "auto" prefers netem."""
    if wanted not in EMULATIONS:
        raise MininetError(f"emulation must be one of {', '.join(EMULATIONS)}, got {wanted!r}")
    shaped = any(d.get("delay_ms") or d.get("loss_pct") for *_, d in g.edges(data=True))
    if wanted == "userspace":
        return "userspace"
    if not shaped:
        return "none"
    if netem_available():
        return "netem"
    if wanted == "netem":
        raise MininetError("this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM), so TCLink cannot delay or "
                           "drop packets; use --emulation userspace (or auto)")
    return "userspace"


@contextmanager
def mininet_network(g: nx.Graph, workdir: Path | None = None, emulation: str = "auto",
                    seed: int | None = None) -> Iterator[Network]:
    """Start g on Mininet; stop it however the block ends. Switch logs go to `workdir` (a temporary
    directory by default); `seed` seeds the userspace switches' loss draws."""
    check_runnable()
    from mininet.link import TCLink
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.nodelib import LinuxBridge

    setLogLevel("critical")  # tc warnings (htb quantum) are not failures
    emu = emulated_graph(g)
    how = choose_emulation(emu, emulation)
    with tempfile.TemporaryDirectory(prefix="chordpub-mn-") as scratch:
        logs = Path(workdir) if workdir is not None else Path(scratch)
        logs.mkdir(parents=True, exist_ok=True)
        switch = LinuxBridge
        if how == "userspace":
            switch = partial(delay_switch_class(), workdir=logs, seed=seed)
        net = Mininet(topo=None, switch=switch, controller=None, link=TCLink, build=False,
                      autoSetMacs=True, waitConnected=False)
        try:
            names = _add_nodes(net, emu)
            for a, b, d in emu.edges(data=True):
                opts: dict = {"bw": d.get("bw_mbps", 100.0)}
                if how == "netem":
                    opts["delay"] = f"{d.get('delay_ms', 0.0):g}ms"
                    if d.get("loss_pct"):
                        opts["loss"] = d["loss_pct"]
                link = net.addLink(names[a], names[b], **opts)
                if how == "userspace":
                    for intf, peer in ((link.intf1, b), (link.intf2, a)):
                        if hasattr(intf.node, "link_ports"):
                            intf.node.link_ports[intf.name] = DelayPort(
                                intf.name, float(d.get("delay_ms") or 0.0), float(d.get("loss_pct") or 0.0),
                                emu.nodes[peer].get("kind") == "host")
            try:
                net.build()
                net.start()
            except MininetError:
                raise
            except Exception as exc:  # Mininet raises bare Exceptions for setup failures
                raise MininetError(f"Mininet could not start the network: {exc}") from exc
            yield Network(net, emu, names, how)
        finally:
            net.stop()


def _add_nodes(net, emu: nx.Graph) -> dict:  # noqa: ANN001 - a mininet.net.Mininet
    names: dict = {}
    counts = {"h": 0, "s": 0}
    for v, kind in emu.nodes(data="kind"):
        prefix = "h" if kind == "host" else "s"
        counts[prefix] += 1
        names[v] = f"{prefix}{counts[prefix]}"
        (net.addHost if prefix == "h" else net.addSwitch)(names[v])
    return names


def delay_switch_class() -> type:
    """Mininet's face of topologies.delay_switch: a Switch whose start runs one forwarding process."""
    from mininet.node import Switch

    class DelaySwitch(Switch):
        def __init__(self, name: str, workdir: Path, seed: int | None = None, **params) -> None:
            Switch.__init__(self, name, **params)
            self.link_ports: dict[str, DelayPort] = {}
            self.workdir, self.seed, self.proc = workdir, seed, None

        def connected(self) -> bool:
            return self.proc is not None and self.proc.poll() is None

        def start(self, _controllers) -> None:  # noqa: ANN001
            ports = [self.link_ports[i.name] for i in self.intfList() if i.name in self.link_ports]
            for p in ports:
                self.cmd("ip link set dev", p.name, "up")
            ready = self.workdir / f"{self.name}.ready"
            ready.unlink(missing_ok=True)
            cmd = [sys.executable, "-m", "topologies.delay_switch", "--ready-file", str(ready),
                   *[f"--port={p.spec()}" for p in ports]]
            if self.seed is not None:
                cmd += ["--seed", str(self.seed + int(self.name[1:]))]
            with open(self.workdir / f"{self.name}.log", "ab") as log:
                self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                             start_new_session=True)
            deadline = time.monotonic() + 15
            while not ready.exists():
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    tail = (self.workdir / f"{self.name}.log").read_text(errors="replace").strip()[-300:]
                    raise MininetError(f"switch {self.name} did not start: {tail or 'no output'}")
                time.sleep(0.02)

        def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 - Mininet's name
            if self.proc is not None and self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=5)
            super().stop(deleteIntfs)

    return DelaySwitch


def leftovers() -> dict[str, list[str]]:
    """Network namespaces, bridges, host/switch interfaces, and the processes a network leaves
    running (mininet shells, delay switches, chordpub processes inside another network namespace)."""
    bridges = subprocess.run(["ip", "-o", "link", "show", "type", "bridge"], capture_output=True, text=True).stdout
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    procs = subprocess.run(["pgrep", "-af", r"mininet:|-m topologies\.delay_switch|-m chordpub"],
                           capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    ports = [m.group(1) for m in re.finditer(r"^\d+: ([sh]\d+-eth\d+)[@:]", links, re.M)]
    return {"bridges": [line.split(":")[1].strip().split("@")[0] for line in bridges.splitlines() if ":" in line],
            "netns": netns.split(), "interfaces": ports,
            "processes": [line for line in procs.splitlines() if _ours(line)]}


def _ours(pgrep_line: str) -> bool:
    """A chordpub process counts only inside a Mininet host (another network namespace), so that
    rings on loopback started by anything else never look like leftovers."""
    if "-m chordpub" not in pgrep_line:
        return True
    try:
        return os.readlink(f"/proc/{pgrep_line.split()[0]}/ns/net") != os.readlink("/proc/self/ns/net")
    except OSError:
        return False  # it has exited meanwhile
