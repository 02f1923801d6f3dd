"""Proximity neighbour selection in the simulator, and the latency stretch it is judged by.

Chord's finger i of node n may be any node of [n + 2^i, n + 2^(i+1)) without changing the lookup's
hop bound, so a node can take the nearest of a few (Gummadi et al., "The impact of DHT routing
geometry on resilience and proximity", SIGCOMM'03, §4: proximity neighbour selection; Dabek et al.,
"Designing a DHT for low latency and high throughput", NSDI'04, §4.2, with 16 samples). The live
node (dht/proximity.py) samples the interval's first node and its successors, up to K, and keeps
the one with the lowest measured round trip; the simulator takes the same K candidates and the
lowest model delay (sim/kernels.py's pns_pick), so both pick the same finger on the same network.

Stretch is what PNS buys: a lookup's latency over the direct latency from origin to owner, in two
definitions. "Owner named" stops the lookup's clock when a node names the owner (the latency `sim
lookups` reports); "owner reached" adds the last step to the owner itself (recursive: the hop from
the node that named it; iterative: the origin's round trip to it), which PNS cannot shorten, so it is
the fair figure against plain Chord and the one targets use. Two ways of routing:
- recursive (each node forwards to the next, the papers' setting): the path's hop delays over the
  one-way delay origin -> owner;
- iterative (the live client's: the origin asks every node itself): the round trips from the origin
  to each node asked, over one round trip origin -> owner.
Lookups whose origin and owner share a place (zero direct delay) have no stretch and are left out.
The last hops of a lookup cross intervals of one or two nodes, where PNS has nothing to choose from,
so each costs a random pair's delay: stretch falls with K towards about 2, not to 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.latency import LatencyModel, from_spec, kernel_params, position_delay
from sim.lookup import LookupBatch, lookups
from sim.ring import FingerTable, Ring, finger_table, random_ring

PNS_SAMPLES = (0, 2, 4, 8, 16)  # the K values of the stretch figure (0: plain Chord)
STRETCH_TOPOLOGIES = ("transit_stub", "lognormal,median=50,sigma=0.5")


def pns_fingers(ring: Ring, k: int, model: LatencyModel) -> FingerTable:
    """The ring's fingers chosen by proximity among k samples (k < 2: plain Chord's)."""
    return finger_table(ring, pns=k, delay=kernel_params(model, ring.real))


def stretch(ring: Ring, batch: LookupBatch, model: LatencyModel, iterative: bool = False,
            reached: bool = False) -> np.ndarray:
    """Each successful lookup's latency stretch (NaN where origin and owner share a place or it failed):
    until the owner is named, or with `reached` until it is reached (see the module's docstring)."""
    delay = position_delay(model, ring.real)
    ok = batch.ok
    owners = np.where(ok, batch.owners, 0)
    direct = delay(batch.origins, owners) * (2.0 if iterative else 1.0)
    latency = batch.latency_ms
    if reached:
        if iterative:
            latency = latency + direct  # the origin's own round trip to the owner
        else:
            if batch.last is None:
                raise ValueError("the owner-reached stretch needs each lookup's last node (batch.last)")
            latency = latency + delay(np.where(ok, batch.last, 0), owners)
    out = np.full(len(batch), np.nan)
    good = ok & (direct > 0)
    out[good] = latency[good] / direct[good]
    return out


def stretch_summary(values: np.ndarray, prefix: str = "stretch") -> dict:
    """{prefix}_mean, _p50, _p99 over the lookups that have one, and how many had none (_excluded)."""
    have = values[~np.isnan(values)]
    if not have.size:
        return {f"{prefix}_mean": None, f"{prefix}_p50": None, f"{prefix}_p99": None,
                f"{prefix}_excluded": len(values)}
    p50, p99 = np.percentile(have, [50, 99])
    return {f"{prefix}_mean": float(have.mean()), f"{prefix}_p50": float(p50), f"{prefix}_p99": float(p99),
            f"{prefix}_excluded": int(len(values) - have.size)}


@dataclass
class Comparison:
    """The same ring, keys and origins routed with plain fingers and with PNS fingers."""

    plain: LookupBatch
    pns: LookupBatch
    plain_stretch: np.ndarray
    pns_stretch: np.ndarray

    def summary(self) -> dict:
        ps, qs = stretch_summary(self.plain_stretch), stretch_summary(self.pns_stretch)
        plain_p50, pns_p50 = np.percentile(self.plain.latency_ms, 50), np.percentile(self.pns.latency_ms, 50)
        return {**qs, "plain_stretch_mean": ps["stretch_mean"], "plain_stretch_p50": ps["stretch_p50"],
                "plain_stretch_p99": ps["stretch_p99"], "plain_latency_p50_ms": float(plain_p50),
                "pns_latency_p50_ms": float(pns_p50),
                "latency_p50_reduction": float(1 - pns_p50 / plain_p50) if plain_p50 > 0 else 0.0}


def compare(ring: Ring, model: LatencyModel, k: int, count: int, seed: int | None = None,
            keys: np.ndarray | None = None, origins: np.ndarray | None = None,
            iterative: bool = False) -> Comparison:
    """Route the same lookups over plain Chord fingers and over PNS(k) fingers of one ring."""
    plain = lookups(ring, count, seed=seed, keys=keys, origins=origins, latency=model, iterative=iterative)
    pns = lookups(ring, count, keys=plain.keys, origins=plain.origins, latency=model, iterative=iterative,
                  fingers=pns_fingers(ring, k, model))
    return Comparison(plain, pns, stretch(ring, plain, model, iterative), stretch(ring, pns, model, iterative))


def stretch_curve(nodes: list[int], samples: tuple[int, ...] = PNS_SAMPLES,
                  topologies: tuple[str, ...] = STRETCH_TOPOLOGIES, lookup_count: int = 20_000,
                  seed: int = 0, iterative: bool = False, progress=None, prs: bool = False) -> list[dict]:
    """Median and mean stretch against N for each K and delay model: the PNS figure's rows ("prs":
    false); with `prs`, each K's lookups again with proximity route selection for the last hop, the
    same keys from the same nodes ("prs": true)."""
    rows = []
    done = 0
    for spec in topologies:
        for n in nodes:
            ring = random_ring(n, seed=seed + n)
            model = from_spec(spec, n, seed)
            first = lookups(ring, lookup_count, seed=seed + n + 1, latency=model, iterative=iterative)
            for k in samples:
                fingers = None if k < 2 else pns_fingers(ring, k, model)
                for last_hop in (False, True) if prs else (False,):
                    batch = first if fingers is None and not last_hop else lookups(
                        ring, lookup_count, keys=first.keys, origins=first.origins, latency=model,
                        iterative=iterative, fingers=fingers, prs=last_hop)
                    s = {**stretch_summary(stretch(ring, batch, model, iterative)),
                         **stretch_summary(stretch(ring, batch, model, iterative, reached=True), "stretch_reached")}
                    rows.append({"topology": spec, "nodes": n, "pns": k, "prs": last_hop,
                                 "mean_hops": float(batch.hops.mean()),
                                 "latency_p50_ms": float(np.percentile(batch.latency_ms, 50)), **s})
                done += 1
                if progress:
                    progress(done)
    return rows


def predict_live(graph, node_hosts: list, node_ids: list[int], origin_ids: list[int], key_ids: list[int],
                 k: int, bits: int = 64, successors: int = 8, prs: bool = False) -> dict:
    """What the simulator predicts for a live ring: nodes `node_ids` on the hosts `node_hosts` of
    `graph` (the network the processes run on, link delays in ms), iterative lookups of `key_ids`
    from the nodes `origin_ids`, with plain fingers and with PNS(k). Returns both latencies' p50 and
    the fraction PNS takes off, the figure to hold the live run to; with `prs`, also PNS(k) with
    proximity route selection for the last hop ("prs_p50_ms", "prs_reduction": off plain Chord's)."""
    from sim.latency import TopologyLatency, shortest_delays
    from sim.ring import ring_from_ids
    from topologies.graphs import hosts

    ring = ring_from_ids(node_ids, bits, successors=successors)  # real node i = node_ids[i]
    names = hosts(graph)
    attach = np.array([names.index(h) for h in node_hosts], dtype=np.int64)
    model = TopologyLatency(graph, attach, shortest_delays(graph, names), names)
    position = {int(ring.ids[p]): p for p in range(ring.size)}
    origins = np.array([position[o] for o in origin_ids], dtype=np.int64)
    keys = np.array(key_ids, dtype=np.uint64)
    plain = lookups(ring, len(keys), keys=keys, origins=origins, latency=model, iterative=True)
    pns = lookups(ring, len(keys), keys=keys, origins=origins, latency=model, iterative=True,
                  fingers=pns_fingers(ring, k, model))
    p0, p1 = float(np.percentile(plain.latency_ms, 50)), float(np.percentile(pns.latency_ms, 50))
    ft = pns_fingers(ring, k, model)
    extra = {}
    if prs:
        last = lookups(ring, len(keys), keys=keys, origins=origins, latency=model, iterative=True, fingers=ft,
                       prs=True)
        p2 = float(np.percentile(last.latency_ms, 50))
        extra = {"prs_p50_ms": p2, "prs_reduction": 1 - p2 / p0 if p0 > 0 else 0.0,
                 "prs_mean_hops": float(last.hops.mean())}
    order = np.argsort(ring.real)  # position of each real node, i.e. of node_ids[i]
    chosen = {node_ids[i]: {j: int(ring.ids[ft.table[j - ft.base, order[i]]]) for j in range(ft.base, bits)}
              for i in range(len(node_ids))}
    return {"fingers": chosen, "plain_p50_ms": p0, "pns_p50_ms": p1, "reduction": 1 - p1 / p0 if p0 > 0 else 0.0,
            "plain_mean_hops": float(plain.hops.mean()), "pns_mean_hops": float(pns.hops.mean()),
            "owners": [int(ring.ids[o]) for o in plain.owners], **extra}
