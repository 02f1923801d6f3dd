"""Per-hop delay models for simulated lookups: a lookup's latency is the sum of its hops' delays.

The paper (SIGCOMM'01 §6) counts hops; latency needs a network under the ring. Three models, all
symmetric and fixed for a run, so the same two nodes are always the same distance apart:
- "constant,ms=X": every hop costs X ms;
- "lognormal,median=M,sigma=S" (the default, median 50 ms, sigma 0.5): a per-pair delay drawn once
  from a lognormal, by hashing the pair onto 2^16 equiprobable quantiles, so it needs no N x N table;
- any topologies/graphs.py spec (waxman, transit_stub, tree, ...): each real node is attached to a
  uniformly chosen host of the graph and a hop costs the shortest-path delay between the two hosts,
  precomputed with Dijkstra for up to MAX_HOSTS hosts.
Virtual nodes of one real node share its place, so a hop between them costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from topologies.graphs import TopologyError, build, hosts, number_param

DEFAULT_SPEC = "lognormal,median=50,sigma=0.5"
MODEL_KEYS = {"constant": ("ms",), "lognormal": ("median", "sigma")}
MAX_HOSTS = 8000
QUANTILE_BITS = 16
QUANTILES = 1 << QUANTILE_BITS  # an 8000 x 8000 float32 delay table is 256 MB


class LatencyError(ValueError):
    """A latency spec that cannot be built."""


@dataclass
class ConstantLatency:
    ms: float = 50.0

    def delay(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.where(a == b, 0.0, self.ms)


@dataclass
class LognormalLatency:
    """Per-pair lognormal delays: the pair's hash picks one of 2^16 equiprobable quantiles."""

    median_ms: float = 50.0
    sigma: float = 0.5
    seed: int = 0
    quantiles: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        from scipy.special import ndtri

        z = ndtri((np.arange(QUANTILES) + 0.5) / QUANTILES)
        self.quantiles = self.median_ms * np.exp(self.sigma * z)

    def delay(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        lo, hi = np.minimum(a, b).astype(np.uint64), np.maximum(a, b).astype(np.uint64)
        h = _mix(lo * np.uint64(0x9E3779B97F4A7C15) ^ hi ^ np.uint64(self.seed))
        out = self.quantiles[h >> np.uint64(64 - QUANTILE_BITS)]
        out[a == b] = 0.0
        return out


@dataclass
class TopologyLatency:
    graph: nx.Graph
    attach: np.ndarray  # host index of each real node
    table: np.ndarray = field(repr=False)  # (hosts, hosts) float32 shortest-path delays in ms
    host_names: list = field(default_factory=list)

    def delay(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.table[self.attach[a], self.attach[b]].astype(np.float64)


LatencyModel = ConstantLatency | LognormalLatency | TopologyLatency


def shortest_delays(g: nx.Graph, names: list) -> np.ndarray:
    """All-pairs shortest-path delay (ms, summing `delay_ms`) between the given nodes of g."""
    from scipy.sparse.csgraph import dijkstra

    order = list(g.nodes)
    index = {v: i for i, v in enumerate(order)}
    adjacency = nx.to_scipy_sparse_array(g, nodelist=order, weight="delay_ms", format="csr")
    rows = [index[v] for v in names]
    dist = dijkstra(adjacency, directed=False, indices=rows)
    return dist[:, rows].astype(np.float32)


def topology_latency(g: nx.Graph, real_nodes: int, seed: int | None = None) -> TopologyLatency:
    names = hosts(g)
    if not names:
        raise LatencyError(f"topology {g.graph.get('spec')!r} has no hosts to attach nodes to")
    if len(names) > MAX_HOSTS:
        raise LatencyError(f"{len(names)} hosts: the delay table is precomputed for at most {MAX_HOSTS}")
    if any(d is None or d < 0 for _, _, d in g.edges(data="delay_ms")):
        raise LatencyError("every link needs a delay_ms >= 0")
    if not nx.is_connected(g):
        raise LatencyError("the topology is not connected")
    attach = np.random.default_rng(seed).integers(0, len(names), size=real_nodes)
    return TopologyLatency(g, attach, shortest_delays(g, names), names)


def from_spec(spec: str | None, real_nodes: int, seed: int | None = None) -> LatencyModel:
    """The model named by a --topology spec (None: the lognormal default)."""
    spec = spec or DEFAULT_SPEC
    name, _, rest = spec.partition(",")
    params: dict[str, str] = {}
    if name in MODEL_KEYS:
        for part in filter(None, (p.strip() for p in rest.split(","))):
            key, eq, value = part.partition("=")
            if not eq or key not in MODEL_KEYS[name]:
                raise LatencyError(f"{name} takes {', '.join(f'{k}=N' for k in MODEL_KEYS[name])}; not {part!r}")
            params[key] = value
    try:
        if name == "constant":
            return ConstantLatency(_number(params, "ms", 50.0))
        if name == "lognormal":
            return LognormalLatency(_number(params, "median", 50.0), _number(params, "sigma", 0.5),
                                    int(seed or 0) & 0xFFFFFFFF)
        return topology_latency(build(spec, seed), real_nodes, seed)
    except TopologyError as exc:
        raise LatencyError(str(exc)) from None


DelayParams = tuple  # the packed form sim/kernels.py's hop_delay reads

_NO_TABLE = np.zeros((1, 1), dtype=np.float32)
_NO_INDEX = np.zeros(1, dtype=np.int64)
_NO_QUANTILES = np.zeros(1, dtype=np.float64)


def kernel_params(model: LatencyModel | None, real: np.ndarray) -> DelayParams:
    """`model` packed for the compiled loops: (mode, ms, quantiles, seed, attach, table, real, mapped).

    `real` maps ring positions to real nodes (virtual nodes share their real node's place); it is
    skipped when it is the identity."""
    from sim import kernels

    real = np.ascontiguousarray(real, dtype=np.int64)
    mapped = not (len(real) and real[0] == 0 and real[-1] == len(real) - 1
                  and np.array_equal(real, np.arange(len(real))))
    mode, ms, quantiles, seed, attach, table = kernels.NO_DELAY, 0.0, _NO_QUANTILES, 0, _NO_INDEX, _NO_TABLE
    if isinstance(model, ConstantLatency):
        mode, ms = kernels.CONSTANT, float(model.ms)
    elif isinstance(model, LognormalLatency):
        mode, quantiles, seed = kernels.LOGNORMAL, model.quantiles.astype(np.float64), model.seed
    elif isinstance(model, TopologyLatency):
        mode = kernels.TABLE
        attach = np.ascontiguousarray(model.attach, dtype=np.int64)
        table = np.ascontiguousarray(model.table, dtype=np.float32)
    return (np.int64(mode), np.float64(ms), quantiles, np.uint64(seed), attach, table,
            real if mapped else _NO_INDEX, mapped)


def position_delay(model: LatencyModel, real: np.ndarray):
    """A hop-delay function over ring positions (virtual nodes map to their real node)."""
    if np.array_equal(real, np.arange(len(real))):
        return model.delay  # one position per node: no mapping to pay for on every hop

    def delay(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return model.delay(real[a], real[b])
    return delay


def _number(params: dict, key: str, default: float) -> float:
    """A non-negative number parameter, checked as topology parameters are."""
    try:
        return number_param(params, key, default)
    except TopologyError as exc:
        raise LatencyError(str(exc)) from None


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a well-spread 64-bit hash."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))

