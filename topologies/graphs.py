"""Network topologies as networkx graphs with link delays: data, not emulation (as Mininet's topo.py).

A topology is named by a spec string in Mininet's style, "name,key=value,...", e.g.
"tree,fanout=3,depth=2" or "waxman,n=200,alpha=0.4,beta=0.2". Every graph is connected, every
edge carries `delay_ms`, `bw_mbps` and `loss_pct`, and every node a `kind`: "switch" (forwards only) or "host"
(where a process may run). single/linear/tree are Mininet's shapes, hosts hanging off switches;
waxman, barabasi_albert and transit_stub are router-level Internet models (Waxman 1988;
Barabási-Albert 1999; GT-ITM's transit-stub, Zegura et al. 1996) whose routers are all "host",
so the simulator attaches nodes to them and Mininet puts one host on each. Any spec takes
`delay=MS` (every link the same delay), `bw=MBPS` (default 100), `loss=PCT` (default 0) and `seed=S`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import networkx as nx
import numpy as np


class TopologyError(ValueError):
    """An unknown topology or a bad parameter: one clear line for the user."""


def _single(p: dict, rng: np.random.Generator) -> nx.Graph:
    g = nx.Graph()
    g.add_node("s1", kind="switch")
    for h in range(1, _int(p, "k", 3, 1) + 1):
        g.add_node(f"h{h}", kind="host")
        g.add_edge(f"h{h}", "s1", delay_ms=p["delay"])
    return g


def _linear(p: dict, rng: np.random.Generator) -> nx.Graph:
    k, per = _int(p, "k", 2, 1), _int(p, "n", 1, 1)
    g = nx.Graph()
    for s in range(1, k + 1):
        g.add_node(f"s{s}", kind="switch")
        if s > 1:
            g.add_edge(f"s{s - 1}", f"s{s}", delay_ms=p["delay"])
        for j in range(1, per + 1):
            h = f"h{s}" if per == 1 else f"h{s}s{j}"
            g.add_node(h, kind="host")
            g.add_edge(h, f"s{s}", delay_ms=p["delay"])
    return g


def _tree(p: dict, rng: np.random.Generator) -> nx.Graph:
    depth, fanout = _int(p, "depth", 1, 1), _int(p, "fanout", 2, 1)
    g = nx.Graph()
    counter = {"s": 0, "h": 0}

    def grow(level: int) -> str:
        if level == depth:
            counter["h"] += 1
            name = f"h{counter['h']}"
            g.add_node(name, kind="host")
            return name
        counter["s"] += 1
        name = f"s{counter['s']}"
        g.add_node(name, kind="switch")
        for _ in range(fanout):
            g.add_edge(name, grow(level + 1), delay_ms=p["delay"])
        return name

    grow(0)
    return g


def _waxman(p: dict, rng: np.random.Generator) -> nx.Graph:
    n = _int(p, "n", 100, 2)
    alpha, beta = number_param(p, "alpha", 0.4), number_param(p, "beta", 0.2)
    max_ms = number_param(p, "max_delay", 50.0)
    g = nx.waxman_graph(n, beta=beta, alpha=alpha, seed=_seed(rng))
    _connect(g, rng)
    pos = nx.get_node_attributes(g, "pos")
    for a, b in g.edges:
        (xa, ya), (xb, yb) = pos[a], pos[b]
        span = max(0.1, max_ms * math.hypot(xa - xb, ya - yb) / math.sqrt(2))  # the unit square's diagonal = max
        g.edges[a, b]["delay_ms"] = p["delay"] if p["delay"] is not None else span
    return _routers(g, "r")


def _barabasi_albert(p: dict, rng: np.random.Generator) -> nx.Graph:
    n = _int(p, "n", 100, 2)
    m = _int(p, "m", 2, 1)
    if m >= n:
        raise TopologyError(f"barabasi_albert needs m < n, got m={m}, n={n}")
    g = nx.barabasi_albert_graph(n, m, seed=_seed(rng))
    lo, hi = number_param(p, "min_delay", 1.0), number_param(p, "max_delay", 20.0)
    for e in g.edges:
        g.edges[e]["delay_ms"] = p["delay"] if p["delay"] is not None else float(rng.uniform(lo, hi))
    return _routers(g, "r")


def _transit_stub(p: dict, rng: np.random.Generator) -> nx.Graph:
    """GT-ITM-style: T transit domains of t routers; each transit router has S stubs of s routers."""
    T, t = _int(p, "transits", 2, 1), _int(p, "transit_size", 4, 1)
    S, s = _int(p, "stubs", 2, 0), _int(p, "stub_size", 4, 1)
    d_tt, d_ts, d_ss = (number_param(p, k, v) for k, v in (("tt_delay", 20.0), ("ts_delay", 5.0), ("ss_delay", 2.0)))
    g = nx.Graph()
    transit: list[str] = []
    for d in range(T):
        names = [f"t{d}.{i}" for i in range(t)]
        transit += names
        g.add_nodes_from(names)
        nx.add_cycle(g, names, delay_ms=d_tt) if t > 2 else nx.add_path(g, names, delay_ms=d_tt)
        for name in names:
            for j in range(S):
                stub = [f"{name}.s{j}.{i}" for i in range(s)]
                g.add_nodes_from(stub)
                nx.add_path(g, stub, delay_ms=d_ss)
                if s > 2:
                    g.add_edge(stub[-1], stub[0], delay_ms=d_ss)
                g.add_edge(name, stub[int(rng.integers(s))], delay_ms=d_ts)
    for d in range(1, T):  # domains joined in a chain plus one random extra link each
        g.add_edge(f"t{d - 1}.{int(rng.integers(t))}", f"t{d}.{int(rng.integers(t))}", delay_ms=d_tt)
        if T > 2:
            a, b = rng.choice(T, size=2, replace=False)
            g.add_edge(f"t{a}.{int(rng.integers(t))}", f"t{b}.{int(rng.integers(t))}", delay_ms=d_tt)
    if p["delay"] is not None:
        nx.set_edge_attributes(g, p["delay"], "delay_ms")
    nx.set_node_attributes(g, "host", "kind")
    return g


BUILDERS: dict[str, tuple[Callable[[dict, np.random.Generator], nx.Graph], set[str]]] = {
    "single": (_single, {"k"}),
    "linear": (_linear, {"k", "n"}),
    "tree": (_tree, {"depth", "fanout"}),
    "waxman": (_waxman, {"n", "alpha", "beta", "max_delay"}),
    "barabasi_albert": (_barabasi_albert, {"n", "m", "min_delay", "max_delay"}),
    "transit_stub": (_transit_stub, {"transits", "transit_size", "stubs", "stub_size",
                                     "tt_delay", "ts_delay", "ss_delay"}),
}
POSITIONAL = {"single": ["k"], "linear": ["k", "n"], "tree": ["depth", "fanout"],
              "waxman": ["n"], "barabasi_albert": ["n", "m"], "transit_stub": ["transits"]}


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """"tree,fanout=3,depth=2" -> ("tree", {"fanout": "3", "depth": "2"}); bare values are positional."""
    parts = [s.strip() for s in spec.split(",")] if spec else [""]
    name = parts[0]
    if name not in BUILDERS:
        raise TopologyError(f"unknown topology {name!r}; known: {', '.join(BUILDERS)}")
    allowed = BUILDERS[name][1] | {"delay", "bw", "loss", "seed"}
    params: dict[str, str] = {}
    positional = list(POSITIONAL[name])
    for part in parts[1:]:
        if not part:
            continue
        if "=" in part:
            key, value = (x.strip() for x in part.split("=", 1))
        elif positional:
            key, value = positional.pop(0), part
        else:
            raise TopologyError(f"{name}: unexpected value {part!r} (use key=value)")
        if key not in allowed:
            raise TopologyError(f"{name} takes {', '.join(sorted(allowed))}; not {key!r}")
        params[key] = value
    return name, params


def build(spec: str, seed: int | None = None) -> nx.Graph:
    """The topology named by `spec`: connected, `delay_ms`/`bw_mbps` on edges, `kind` on nodes."""
    name, raw = parse_spec(spec)
    p: dict = dict(raw)
    p["delay"] = parse_delay(raw["delay"]) if "delay" in raw else None
    if "seed" in raw:
        seed = _int(raw, "seed", 0, 0)
    rng = np.random.default_rng(seed)
    default_delay = {"single": 1.0, "linear": 1.0, "tree": 1.0}
    if p["delay"] is None and name in default_delay:
        p["delay"] = default_delay[name]
    g = BUILDERS[name][0](p, rng)
    bw = number_param(raw, "bw", 100.0)
    loss = number_param(raw, "loss", 0.0)
    if loss > 100:
        raise TopologyError(f"loss is a percentage (0..100), got {loss:g}")
    nx.set_edge_attributes(g, bw, "bw_mbps")
    nx.set_edge_attributes(g, loss, "loss_pct")
    g.graph["spec"] = spec
    return g


def hosts(g: nx.Graph) -> list:
    """The nodes a process may be placed on, in a stable order."""
    return [v for v, kind in g.nodes(data="kind") if kind == "host"]


def describe(g: nx.Graph) -> dict:
    """Counts, link delays, and the diameter in hops and in ms (the slowest host-to-host path)."""
    delays = [d for _, _, d in g.edges(data="delay_ms")]
    names = hosts(g)
    diameter_ms = 0.0
    if len(names) > 1:
        wanted = set(names)
        for h in names:
            lengths = nx.single_source_dijkstra_path_length(g, h, weight="delay_ms")
            diameter_ms = max(diameter_ms, max(v for k, v in lengths.items() if k in wanted))
    return {"spec": g.graph.get("spec"), "nodes": g.number_of_nodes(), "links": g.number_of_edges(),
            "hosts": len(names), "switches": g.number_of_nodes() - len(names),
            "delay_ms": {"min": min(delays, default=0.0), "max": max(delays, default=0.0)},
            "diameter_hops": nx.diameter(g) if g.number_of_nodes() > 1 else 0,
            "diameter_ms": round(diameter_ms, 3)}


def draw(g: nx.Graph, path: str) -> None:
    """A PNG of the topology: hosts as circles, switches as squares, links labelled with their delay."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pos = nx.spring_layout(g, seed=1, weight=None)
    fig, ax = plt.subplots(figsize=(8, 6))
    names = hosts(g)
    switches = [v for v in g.nodes if v not in set(names)]
    nx.draw_networkx_edges(g, pos, ax=ax, alpha=0.5)
    nx.draw_networkx_nodes(g, pos, nodelist=names, node_color="tab:blue", node_size=120, ax=ax, label="hosts")
    nx.draw_networkx_nodes(g, pos, nodelist=switches, node_color="tab:orange", node_shape="s", node_size=160,
                           ax=ax, label="switches")
    if g.number_of_nodes() <= 40:
        nx.draw_networkx_labels(g, pos, font_size=7, ax=ax)
        nx.draw_networkx_edge_labels(g, pos, {(a, b): f"{d:g}ms" for a, b, d in g.edges(data="delay_ms")},
                                     font_size=6, ax=ax)
    ax.set_title(g.graph.get("spec", ""))
    ax.legend(loc="best")
    ax.axis("off")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


# -- helpers ---------------------------------------------------------------------------------------
def _routers(g: nx.Graph, prefix: str) -> nx.Graph:
    g = nx.relabel_nodes(g, {v: f"{prefix}{v}" for v in g.nodes})
    nx.set_node_attributes(g, "host", "kind")
    return g


def _connect(g: nx.Graph, rng: np.random.Generator) -> None:
    """Join a random graph's components (Waxman graphs may come out disconnected)."""
    comps = [sorted(c) for c in nx.connected_components(g)]
    for a, b in zip(comps, comps[1:], strict=False):
        g.add_edge(a[int(rng.integers(len(a)))], b[int(rng.integers(len(b)))])


def _seed(rng: np.random.Generator) -> int:
    return int(rng.integers(1 << 31))


def _int(p: dict, key: str, default: int, least: int) -> int:
    if key not in p:
        return default
    try:
        value = int(p[key])
    except ValueError:
        raise TopologyError(f"{key} must be an integer, got {p[key]!r}") from None
    if value < least:
        raise TopologyError(f"{key} must be at least {least}, got {value}")
    return value


def number_param(p: dict, key: str, default: float) -> float:
    """p[key] as a finite number >= 0 (default when absent); TopologyError naming the key otherwise."""
    if key not in p:
        return default
    try:
        value = float(p[key])
    except ValueError:
        raise TopologyError(f"{key} must be a number, got {p[key]!r}") from None
    if not value >= 0 or math.isinf(value):
        raise TopologyError(f"{key} must be a finite number >= 0, got {p[key]!r}")
    return value


def parse_delay(text: str) -> float:
    """"5ms", "5", "0.5ms" -> milliseconds."""
    value = text[:-2] if text.endswith("ms") else text
    return number_param({"delay": value}, "delay", 0.0)
