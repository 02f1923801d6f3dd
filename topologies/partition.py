"""Network partitions on Mininet: a ring spread over two switches, the link between them cut and restored.

`two_sides(a, b)` is the topology (data, as mininet's topo.py keeps it): switch s1 with hosts a1..aA,
switch s2 with hosts b1..bB, one link between the switches. `PartitionedRing` starts one node per host
through the CLI (each joining through the first, as docs/deploy.md does), cuts and restores that link
(Mininet's configLinkStatus: both ends set down, frames dropped, as a failed cable would) and times how
long the sides take to become one ring again, polling `ring check` from inside a host:

    python -m topologies.partition wait VIA --expect N [--timeout S] [--since T] [--keys FILE]

prints {"seconds": float|null, "report": ring check's report} and exits 0 once the ring through VIA is
one consistent ring of N nodes (a split counts as inconsistent: dht/ringcheck.py), 1 on timeout.
`--since` (a wall-clock time.time(), as when the link came back) counts the seconds from then rather
than from the command's own start; with `--keys`, the wait goes on until lookups through VIA also give
every key its true owner in that ring ("owners_seconds": a node whose links were down moments ago may
still step over a neighbour it cannot reach yet, after the walk was already consistent).
    python -m topologies.partition stats VIA

prints the ring's totals of what the prober and the maintenance thread sent: {"nodes", "probes",
"probe_bytes", "requests_bytes"} (benchmarks/partition.py turns two of them into a rate).
Used by tests/mininet/test_partition.py and benchmarks/partition.py.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

from topologies.host_templates import fork_on_host

PORT = 5555


def two_sides(a: int, b: int) -> nx.Graph:
    """Hosts a1..aA on switch s1, b1..bB on switch s2, and the one link s1-s2 a partition cuts."""
    g = nx.Graph(spec=f"two-sides,{a},{b}")
    for s in ("s1", "s2"):
        g.add_node(s, kind="switch")
    for side, n in (("a", a), ("b", b)):
        for i in range(1, n + 1):
            g.add_node(f"{side}{i}", kind="host")
    for side, n, s in (("a", a, "s1"), ("b", b, "s2")):
        for i in range(1, n + 1):
            g.add_edge(f"{side}{i}", s, delay_ms=0.0, bw_mbps=1000.0, loss_pct=0.0)
    g.add_edge("s1", "s2", delay_ms=0.0, bw_mbps=1000.0, loss_pct=0.0)
    return g


def chain(n: int) -> nx.Graph:
    """Hosts h1..hN, each on its own switch, the switches in a line s1-s2-...-sN: cutting the link
    s_i-s_i+1 splits the hosts into h1..hi and hi+1..hN, and cutting several links splits them into
    several groups (a line has no loop, so Linux bridges need no spanning tree)."""
    g = nx.Graph(spec=f"chain,{n}")
    for i in range(1, n + 1):
        g.add_node(f"s{i}", kind="switch")
        g.add_node(f"h{i}", kind="host")
        g.add_edge(f"h{i}", f"s{i}", delay_ms=0.0, bw_mbps=1000.0, loss_pct=0.0)
        if i > 1:
            g.add_edge(f"s{i - 1}", f"s{i}", delay_ms=0.0, bw_mbps=1000.0, loss_pct=0.0)
    return g


@dataclass
class PartitionedRing:
    """A running two-sided network with one node on every host."""

    network: object  # topologies.mininet_net.Network
    workdir: Path
    stabilize: float = 0.5
    procs: list[subprocess.Popen] = field(default_factory=list)
    nodes: dict[tuple[str, int], subprocess.Popen] = field(default_factory=dict)  # (host name, port) -> node

    @property
    def side_a(self) -> list:
        return [self.network.host(v) for v in self.network.graph if str(v).startswith("a")]

    @property
    def side_b(self) -> list:
        return [self.network.host(v) for v in self.network.graph if str(v).startswith("b")]

    @property
    def hosts(self) -> list:
        return [self.network.host(v) for v, d in self.network.graph.nodes(data=True) if d.get("kind") == "host"]

    def endpoint(self, host, port: int = PORT) -> str:  # noqa: ANN001 - a mininet Host
        return f"{host.IP()}:{port}"

    def popen(self, host, *args: str, log: str | None = None, **kw) -> subprocess.Popen:  # noqa: ANN001, ANN003
        """`python ARGS` on `host`, its output to `log` in the work directory (None: pipes); a `chordpub`
        command with a log is forked onto the host (topologies/host_templates.py)."""
        forked = fork_on_host(host, [sys.executable, *args], self.workdir / log) if log and not kw else None
        if forked is not None:
            self.procs.append(forked)
            return forked
        out = open(self.workdir / log, "ab") if log else subprocess.PIPE  # noqa: SIM115 - the child owns it
        try:
            p = host.popen([sys.executable, *args], stdout=out, stderr=subprocess.STDOUT if log else subprocess.PIPE,
                           stdin=subprocess.DEVNULL, **kw)
        finally:
            if log:
                out.close()
        self.procs.append(p)
        return p

    def start_nodes(self, *extra: str) -> None:
        hosts = self.hosts
        first = self.endpoint(hosts[0])
        for i, host in enumerate(hosts):
            self.start_node(host, PORT, first if i else None, *extra)

    def start_node(self, host, port: int, join: str | None, *extra: str) -> None:  # noqa: ANN001
        """A node on `host` listening on `port`, joining through `join` (None: the first node); returns
        once it serves."""
        name = f"{host.name}-{port}"
        ready = self.workdir / f"{name}.ready"
        self.nodes[(host.name, port)] = self.popen(
            host, "-m", "chordpub", "node", "start", "--host", host.IP(), "--port", str(port),
            *(["--join", join] if join else []), "--stabilize", str(self.stabilize), "--ready-file", str(ready),
            *extra, log=f"{name}.log")
        deadline = time.monotonic() + 60
        while not ready.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"node on {host.name} not ready: see {self.workdir / (name + '.log')}")
            time.sleep(0.05)

    def kill_node(self, host, port: int = PORT) -> None:  # noqa: ANN001
        """SIGKILL the node on `host` at `port`, as a crash would."""
        proc = self.nodes.pop((host.name, port))
        proc.kill()
        proc.wait(timeout=10)

    def wait_ring(self, host, expected: int, timeout: float = 60.0, since: float | None = None,  # noqa: ANN001
                  keys: Path | None = None) -> dict:
        """Poll `ring check` from `host` through its own node until one consistent ring of `expected`
        (and, with `keys`, until lookups from there give each key its true owner)."""
        extra = ([] if since is None else ["--since", repr(since)]) + ([] if keys is None else ["--keys", str(keys)])
        p = host.popen([sys.executable, "-m", "topologies.partition", "wait", self.endpoint(host), "--expect",
                        str(expected), "--timeout", str(timeout), *extra], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        out, _ = p.communicate(timeout=timeout + 60)
        return json.loads(out or b"{}")

    def owners(self, host, keys_file: Path) -> list[int | None]:  # noqa: ANN001
        p = host.popen([sys.executable, "-m", "chordpub", "node", "lookups", self.endpoint(host), "--keys",
                        str(keys_file), "--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       stdin=subprocess.DEVNULL)
        out, _ = p.communicate(timeout=120)
        return [r["owner"] for r in json.loads(out)["results"]]

    def stats(self, host) -> dict:  # noqa: ANN001
        p = host.popen([sys.executable, "-m", "topologies.partition", "stats", self.endpoint(host)],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        out, _ = p.communicate(timeout=120)
        return json.loads(out)

    def link(self, up: bool, a: str = "s1", b: str = "s2") -> None:
        """Set the link between switches `a` and `b` up or down."""
        names = self.network.names
        self.network.net.configLinkStatus(names[a], names[b], "up" if up else "down")


@contextmanager
def partitioned_ring(a: int, b: int, workdir: Path, stabilize: float = 0.5,
                     graph: nx.Graph | None = None) -> Iterator[PartitionedRing]:
    """Mininet with `two_sides(a, b)` (or `graph`, e.g. a `chain`) and a node on every host once started;
    everything stopped however the block ends."""
    from dht.processes import stop_processes
    from topologies.mininet_net import mininet_network

    workdir.mkdir(parents=True, exist_ok=True)
    with mininet_network(two_sides(a, b) if graph is None else graph, workdir=workdir / "switches") as net:
        ring = PartitionedRing(net, workdir, stabilize)
        try:
            yield ring
        finally:
            stop_processes(ring.procs, grace=3)


def wait_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m topologies.partition wait")
    ap.add_argument("via")
    ap.add_argument("--expect", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--since", type=float, default=None)
    ap.add_argument("--keys", type=Path, default=None)
    args = ap.parse_args(argv)
    from dht.client import DhtClient
    from dht.ringcheck import check_ring

    keys = args.keys.read_text().split() if args.keys else []
    t0 = time.monotonic()
    offset = 0.0 if args.since is None else time.time() - args.since  # seconds already gone at t0
    out: dict = {"seconds": None, "report": {}}
    with DhtClient(args.via, timeout=0.3, retries=0) as client:
        while time.monotonic() - t0 < args.timeout:
            try:
                report = check_ring(client, expected=args.expect, step_over=False, split_wait=0.3)
            except Exception as exc:  # a node that does not answer yet: keep polling
                report = {"consistent": False, "problems": [str(exc)]}
            out["report"] = report
            if report.get("consistent"):
                if out["seconds"] is None:
                    out["seconds"] = round(time.monotonic() - t0 + offset, 3)
                wrong = wrong_owners(client, keys, [m["id"] for m in report["members"]])
                if not wrong:
                    if keys:
                        out["owners_seconds"] = round(time.monotonic() - t0 + offset, 3)
                    print(json.dumps(out))
                    return 0
                out["wrong_owners"] = wrong
            time.sleep(0.05)
    out["seconds"] = None
    print(json.dumps(out))
    return 1


def wrong_owners(client, keys: list[str], ids: list[int]) -> list[str]:  # noqa: ANN001 - a DhtClient
    """The keys whose lookup does not end at their owner among `ids` (the ring the check walked)."""
    from dht.ids import key_id, owner_of

    ring = sorted(ids)
    wrong = []
    for key in keys:
        found = client.lookup(key)
        if not found.ok or found.owner is None or found.owner.id != owner_of(ring, key_id(key, client.bits)):
            wrong.append(key)
    return wrong


def stats_main(via: str) -> int:
    from dht.client import DhtClient
    from dht.ringcheck import walk

    with DhtClient(via, timeout=1.0) as client:
        infos, _ = walk(client, via)
    totals = {"nodes": len(infos), "probes": 0, "probe_bytes": 0, "requests_bytes": 0}
    for info in infos:
        totals["probes"] += info.get("probes") or 0
        totals["probe_bytes"] += info.get("probe_bytes") or 0
        totals["requests_bytes"] += (info.get("traffic") or {}).get("requests_bytes") or 0
    print(json.dumps(totals))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["wait"]:
        sys.exit(wait_main(sys.argv[2:]))
    if sys.argv[1:2] == ["stats"] and len(sys.argv) == 3:
        sys.exit(stats_main(sys.argv[2]))
    sys.exit("usage: python -m topologies.partition wait VIA --expect N [--timeout S] [--since T] [--keys FILE]"
             " | stats VIA")
