"""`chordpub sim`: the vectorized simulator (sim/) from the command line, its traces as Parquet.

Thin, like the rest of the CLI: parse, call sim/, print one JSON object with --json, write a run
directory with --out (RUN/manifest.json, RUN/lookups/*.parquet in traces/schema.py's schema).
Progress bars go to stderr and only when it is a terminal.
"""

from __future__ import annotations

import json
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from chordpub.cli_common import clean_errors
from sim.limits import check_churn, check_failures, check_ring

if TYPE_CHECKING:
    import numpy as np

    from sim.lookup import LookupTrace

sim_app = typer.Typer(help="The large-ring simulator: lookups, load, failures, churn, the Chord paper's figures.",
                      no_args_is_help=True)

SEED = typer.Option(None, help="Random seed (the same seed gives the same run).")
OUT = typer.Option(None, help="Write a run directory here: manifest.json and Parquet traces.")
JSON = typer.Option(False, "--json", help="Print one JSON object.")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


@contextmanager
def progress_bar(label: str, total: float) -> Iterator:
    """A rich progress bar on stderr (a no-op when stderr is not a terminal); yields update(done)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TimeElapsedColumn, TimeRemainingColumn

    console = Console(stderr=True)
    with Progress("[progress.description]{task.description}", BarColumn(), "{task.percentage:>3.0f}%",
                  TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=True,
                  disable=not console.is_terminal) as bar:
        task = bar.add_task(label, total=total)
        yield lambda done: bar.update(task, completed=done)


def write_lookups(run_dir: Path, name: str, run: str, nodes: int, trace: LookupTrace) -> int:
    """One Parquet file of lookups in the trace schema; ids as decimal strings, NaN latency as null."""
    import numpy as np
    import pyarrow as pa

    from traces.writer import ParquetWriter

    n = len(trace)
    owner = pa.array(trace.owner, mask=~trace.ok).cast(pa.string())
    latency = pa.array(trace.latency_ms, mask=np.isnan(trace.latency_ms))
    with ParquetWriter(run_dir / "lookups" / f"{name}.parquet", "lookups") as w:
        w.write_columns({"run": pa.array([run] * n, pa.string()), "source": pa.array(["sim"] * n, pa.string()),
                         "nodes": np.full(n, nodes, dtype=np.int64), "key_id": trace.key_id,
                         "origin": trace.origin, "owner": owner, "hops": trace.hops.astype(np.int64),
                         "timeouts": trace.timeouts.astype(np.int64), "latency_ms": latency,
                         "ok": trace.ok, "ts": trace.ts})
    return n


def start_run(out: Path, config: dict) -> Path:
    from traces.writer import make_run_dir

    return make_run_dir(out.parent, out.name, config)


def emit(obj: dict, as_json: bool, lines: list[str]) -> None:
    typer.echo(json.dumps(obj) if as_json else "\n".join(lines))


def _hops_summary(hops: np.ndarray) -> dict:
    import numpy as np
    p1, p50, p99 = np.percentile(hops, [1, 50, 99]) if len(hops) else (0, 0, 0)
    return {"mean_hops": float(hops.mean()) if len(hops) else 0.0, "p1_hops": float(p1), "p50_hops": float(p50),
            "p99_hops": float(p99)}


@sim_app.command("lookups")
@clean_errors
def lookups_cmd(nodes: int = typer.Option(..., help="Real nodes in the ring."),
                lookups: int = typer.Option(None, min=1, help="Lookups of random keys from random nodes "
                                            "(required)."),
                bits: int = typer.Option(64, help="Id bits (at most 64 in the simulator)."),
                virtual: int = typer.Option(1, help="Virtual nodes per real node."),
                successors: int = typer.Option(8, min=1, help="Successor-list length r."),
                topology: str = typer.Option(None, help="Hop-delay model: a topology spec (waxman,n=200 ...), "
                                             "constant,ms=X or lognormal,median=M,sigma=S (the default)."),
                pns: int = typer.Option(0, min=0, help="Proximity neighbour selection: each finger is the nearest "
                                        "of up to K nodes of its interval (0: plain Chord). The same lookups are "
                                        "also routed without it, for comparison."),
                iterative: bool = typer.Option(False, "--iterative", help="Latency as the live client sees it: "
                                               "round trips from the origin to each node asked (default: "
                                               "recursive, each node forwards to the next)."),
                prs: bool = typer.Option(False, "--prs", help="Proximity route selection for the last hop: a "
                                         "node whose successor list holds the owner names it at once. The same "
                                         "lookups are also routed without it, for comparison."),
                seed: int = SEED, out: Path = OUT, as_json: bool = JSON) -> None:
    """Build a converged ring and route lookups on it: hops, latency, stretch, speed, memory.

    Stretch is the lookup's latency over the direct latency from origin to owner; lookups on all
    cores (compiled: the first run on a machine compiles for a few seconds, `jit_s`).
    """
    if nodes < 1:  # said before a missing --lookups: the value the user did give is the one that is wrong
        raise ValueError(f"a ring needs at least one node, got --nodes {nodes}")
    if lookups is None:  # both said before the simulator's imports (numba, networkx: a second)
        raise ValueError("--lookups is required: how many lookups to route")
    check_ring(nodes, bits, virtual)
    import numpy as np

    from sim.latency import LatencyError, from_spec
    from sim.lookup import lookups as run_lookups
    from sim.lookup import trace_of
    from sim.proximity import pns_fingers, stretch, stretch_summary
    from sim.ring import finger_table, random_ring

    try:
        model = from_spec(topology, nodes, seed)
    except LatencyError as exc:
        raise ValueError(f"--topology: {exc}") from None
    t0 = time.perf_counter()
    ring = random_ring(nodes, bits, seed=seed, virtual=virtual, successors=successors)
    plain = finger_table(ring)
    build_s = time.perf_counter() - t0
    tj = time.perf_counter()
    run_lookups(ring, 1, seed=0, fingers=plain, latency=model, iterative=iterative)  # load the compiled loops
    jit_s = time.perf_counter() - tj
    fingers, pns_s = plain, 0.0
    if pns > 1:
        tp = time.perf_counter()
        fingers = pns_fingers(ring, pns, model)
        pns_s = time.perf_counter() - tp
    t1 = time.perf_counter()
    with progress_bar(f"{lookups:,} lookups on {nodes:,} nodes", lookups) as update:
        batch = run_lookups(ring, lookups, seed=None if seed is None else seed + 1, fingers=fingers,
                            latency=model, iterative=iterative, prs=prs, progress=update)
    lookup_s = time.perf_counter() - t1
    lat = np.percentile(batch.latency_ms, [50, 99])
    result = {"nodes": nodes, "lookups": lookups, **_hops_summary(batch.hops), "build_s": round(build_s, 4),
              "lookup_s": round(lookup_s, 4), "jit_s": round(jit_s, 3), "peak_rss_mb": round(peak_rss_mb(), 1),
              "virtual": virtual, "bits": bits, "successors": successors,
              "lookups_per_s": round(lookups / lookup_s), "latency_p50_ms": float(lat[0]),
              "latency_p99_ms": float(lat[1]), "topology": topology or "lognormal,median=50,sigma=0.5",
              "pns": pns, "prs": prs, "routing": "iterative" if iterative else "recursive",
              **stretch_summary(stretch(ring, batch, model, iterative)),
              **stretch_summary(stretch(ring, batch, model, iterative, reached=True), "stretch_reached")}
    if pns > 1:
        base = run_lookups(ring, lookups, keys=batch.keys, origins=batch.origins, fingers=plain, latency=model,
                           iterative=iterative)
        plain_stretch = {**stretch_summary(stretch(ring, base, model, iterative)),
                         **stretch_summary(stretch(ring, base, model, iterative, reached=True), "stretch_reached")}
        plain_p50 = float(np.percentile(base.latency_ms, 50))
        result.update({"pns_build_s": round(pns_s, 4), "plain_mean_hops": float(base.hops.mean()),
                       "plain_latency_p50_ms": plain_p50,
                       **{f"plain_{k}": v for k, v in plain_stretch.items() if not k.endswith("_excluded")},
                       "latency_p50_reduction": 1 - float(lat[0]) / plain_p50 if plain_p50 > 0 else 0.0})
    if prs:
        alone = run_lookups(ring, lookups, keys=batch.keys, origins=batch.origins, fingers=fingers, latency=model,
                            iterative=iterative)
        without = {**stretch_summary(stretch(ring, alone, model, iterative)),
                   **stretch_summary(stretch(ring, alone, model, iterative, reached=True), "stretch_reached")}
        result.update({"without_prs_mean_hops": float(alone.hops.mean()),
                       **{f"without_prs_{k}": v for k, v in without.items() if not k.endswith("_excluded")}})
    if out:
        run_dir = start_run(out, {"command": "sim lookups", **{k: result[k] for k in
                                  ("nodes", "lookups", "virtual", "bits", "successors", "topology", "pns",
                                   "prs", "routing")}, "seed": seed})
        write_lookups(run_dir, "sim", out.name, nodes, trace_of(ring, batch))
        result["run"] = str(run_dir)
    lines = [f"{nodes:,} nodes, {lookups:,} lookups: mean {result['mean_hops']:.3f} hops "
             f"(p1 {result['p1_hops']:g}, p50 {result['p50_hops']:g}, p99 {result['p99_hops']:g}); "
             f"latency p50 {lat[0]:.1f} ms, p99 {lat[1]:.1f} ms; stretch p50 {_fmt(result['stretch_p50'])} "
             f"(owner named), {_fmt(result['stretch_reached_p50'])} (owner reached)",
             f"build {build_s:.2f} s, lookups {lookup_s:.2f} s ({result['lookups_per_s']:,}/s), "
             f"peak RSS {result['peak_rss_mb']:.0f} MB" + (f"; traces in {result['run']}" if out else "")]
    if pns > 1:
        lines.append(f"PNS({pns}) vs plain Chord on the same lookups: stretch p50 owner reached "
                     f"{_fmt(result['stretch_reached_p50'])} vs {_fmt(result['plain_stretch_reached_p50'])}, owner "
                     f"named {_fmt(result['stretch_p50'])} vs {_fmt(result['plain_stretch_p50'])}, "
                     f"latency p50 {lat[0]:.1f} vs {result['plain_latency_p50_ms']:.1f} ms "
                     f"({result['latency_p50_reduction']:.0%} lower)")
    if prs:
        without = f"PNS({pns}) alone" if pns > 1 else "plain Chord"
        lines.append(f"with PRS vs {without} on the same lookups: stretch p50 owner reached "
                     f"{_fmt(result['stretch_reached_p50'])} vs {_fmt(result['without_prs_stretch_reached_p50'])}, "
                     f"owner named {_fmt(result['stretch_p50'])} vs {_fmt(result['without_prs_stretch_p50'])}; "
                     f"mean hops {result['mean_hops']:.3f} vs {result['without_prs_mean_hops']:.3f}")
    emit(result, as_json, lines)


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


@sim_app.command("load")
@clean_errors
def load_cmd(nodes: int = typer.Option(..., help="Real nodes."),
             keys: int = typer.Option(..., min=0, help="Keys stored."),
             virtual: int = typer.Option(1, help="Virtual nodes per real node."),
             trials: int = typer.Option(1, min=1, help="Independent rings, their nodes pooled."),
             bits: int = typer.Option(64, help="Id bits."),
             seed: int = SEED, out: Path = OUT, as_json: bool = JSON) -> None:
    """Keys per real node (SIGCOMM'01 Figs. 8-9): mean and percentiles."""
    import numpy as np

    from sim.load import load

    res = load(nodes, keys, virtual, seed=seed, bits=bits, trials=trials)
    s = res.summary()
    if out:
        from traces.writer import ParquetWriter

        run_dir = start_run(out, {"command": "sim load", "nodes": nodes, "keys": keys, "virtual": virtual,
                                  "trials": trials, "seed": seed})
        (run_dir / "load").mkdir(exist_ok=True)
        count = len(res.counts)
        with ParquetWriter(run_dir / "load" / "keys_per_node.parquet", "load") as w:
            w.write_columns({"run": [out.name] * count, "source": ["sim"] * count,
                             "node": np.arange(count, dtype=np.int64),
                             "virtual": np.full(count, virtual, dtype=np.int64),
                             "keys": res.counts.astype(np.int64)})
        s["run"] = str(run_dir)
    emit(s, as_json, [f"{nodes:,} nodes x {virtual} virtual, {keys:,} keys: mean {s['mean']:.1f} keys/node, "
                      f"p1 {s['p1']:g}, p50 {s['p50']:g}, p99 {s['p99']:g} "
                      f"({s['p99'] / max(s['mean'], 1e-9):.2f}x mean), "
                      f"max {s['max']}"])


@sim_app.command("failures")
@clean_errors
def failures_cmd(nodes: int = typer.Option(..., help="Real nodes."), keys: int = typer.Option(..., help="Keys stored."),
                 fail: float = typer.Option(..., help="Fraction of nodes that fail at once, in [0, 1)."),
                 replicas: int = typer.Option(1, help="Copies of each key (owner + successors); 1 is the paper's."),
                 successors: int = typer.Option(8, help="Successor-list length r."),
                 lookups: int = typer.Option(None, help="Lookups of stored keys (default min(keys, 100000))."),
                 seed: int = SEED, out: Path = OUT, as_json: bool = JSON) -> None:
    """Fail a fraction of the nodes at once; measure lookups before and after the ring stabilizes."""
    check_failures(nodes, keys, fail, replicas, successors)
    check_ring(nodes, 64)
    from sim.failures import simultaneous_failures

    res = simultaneous_failures(nodes, keys, fail, replicas, successors, lookups, seed=seed)
    s = res.summary()
    if out:
        run_dir = start_run(out, {"command": "sim failures", "nodes": nodes, "keys": keys, "fail": fail,
                                  "replicas": replicas, "successors": successors, "seed": seed})
        write_lookups(run_dir, "sim", out.name, nodes - round(fail * nodes), res.trace)
        s["run"] = str(run_dir)
    b = s["before"]
    emit(s, as_json, [f"{fail:.0%} of {nodes:,} nodes failed, R={replicas}: keys lost {s['keys_lost']:.2%}",
                      f"  before stabilizing: failed {b['failed_lookups']:.2%}, mean hops {b['mean_hops']:.2f}, "
                      f"timeouts {b['mean_timeouts']:.2f}",
                      f"  after stabilizing:  failed {s['failed_lookups']:.2%}, mean hops {s['mean_hops']:.2f}"])


@sim_app.command("churn")
@clean_errors
def churn_cmd(nodes: int = typer.Option(500, help="Nodes at the start (joins and failures keep it near)."),
              rate: float = typer.Option(..., help="Joins per second, and failures per second (R)."),
              stabilize: float = typer.Option(30.0, help="Mean seconds between a node's stabilizations."),
              duration: float = typer.Option(3600.0, help="Simulated seconds."),
              successors: int = typer.Option(8, help="Successor-list length r."),
              lookup_rate: float = typer.Option(1.0, help="Lookups per simulated second."),
              seed: int = SEED, out: Path = OUT, as_json: bool = JSON) -> None:
    """Continuous churn as in SIGCOMM'01 §6.5: failed lookups (not retried), hops, timeouts."""
    check_churn(nodes, rate, stabilize, duration, lookup_rate)
    from sim.churn import continuous_churn

    with progress_bar(f"churn R={rate}/s for {duration:g} simulated s", 1.0) as update:
        res = continuous_churn(nodes, rate, stabilize, duration, successors, lookup_rate, seed=seed, progress=update)
    s = res.summary()
    if out:
        setup = {k: s[k] for k in ("nodes", "rate", "stabilize", "duration")}
        run_dir = start_run(out, {"command": "sim churn", **setup,
                                  "successors": successors, "lookup_rate": lookup_rate, "seed": seed})
        write_lookups(run_dir, "sim", out.name, nodes, res.trace)
        s["run"] = str(run_dir)
    emit(s, as_json, [f"R={rate}/s, stabilize every {stabilize:g} s, {res.lookups} lookups: failed "
                      f"{s['failed_lookups']:.2%} (with retries {s['failed_with_retries']:.2%}), mean hops "
                      f"{s['mean_hops']:.2f}, timeouts {s['mean_timeouts']:.3f}; "
                      f"{res.joins} joins, {res.failures} failures"])

