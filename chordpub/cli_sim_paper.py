"""`chordpub sim paper`: the Chord paper's Figs. 8-12, locally or as Spark tasks (sim/paper.py)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from chordpub.cli_common import clean_errors, fail, output_file
from chordpub.cli_sim import JSON, OUT, progress_bar, start_run, write_lookups

if TYPE_CHECKING:
    from sim import paper


def _parse_figures(text: str) -> list[str]:
    from sim import paper

    figs = [f.strip() for f in text.split(",") if f.strip()]
    bad = [f for f in figs if f not in paper.FIGURES]
    if bad or not figs:
        fail(f"--figures takes a comma-separated subset of {','.join(paper.FIGURES)}; got {text!r}")
    return figs


def _task(keep_traces: bool):
    """The function each point runs as: traces dropped unless they will be written."""
    def run(point: paper.Point) -> paper.PointResult:
        from sim import paper

        result = paper.run_point(point)
        if not keep_traces:
            result.trace = None
        return result
    return run


@clean_errors
def paper_cmd(scale: str = typer.Option("small", help="small: minutes on a laptop; paper: the paper's sizes."),
              figures: str = typer.Option("8,9,10,11,12", help="Which figures, e.g. 8,10."),
              engine: str = typer.Option("local", help="local: one process; spark: each point a Spark task."),
              master: str = typer.Option(None, help="Spark master URL for --engine spark (default: SPARK_MASTER, "
                                         "else local[*])."),
              seed: int = typer.Option(0, help="Random seed."),
              check: bool = typer.Option(False, help="Exit 1 when a value is outside its tolerance."),
              out: Path = OUT, as_json: bool = JSON) -> None:
    """Reproduce SIGCOMM'01 Figs. 8-12 and print the paper's values beside ours."""
    from sim import paper

    if scale not in paper.SCALES:
        fail(f"--scale must be one of {', '.join(paper.SCALES)}, got {scale!r}")
    if engine not in ("local", "spark"):
        fail(f"--engine must be local or spark, got {engine!r}")
    if engine == "spark" and (master or os.environ.get("SPARK_MASTER", "")).startswith("sc://"):
        fail("--engine spark runs Python tasks, which a Spark Connect (sc://) master does not take: "
             "give --master a local[*], spark:// or cluster master")
    figs = _parse_figures(figures)
    todo = paper.points(scale, seed, figs)
    task = _task(keep_traces=out is not None)
    t0 = time.perf_counter()
    if engine == "spark":
        from traces.spark import session

        spark = session(master, app_name="chordpub-sim-paper")
        try:
            results = spark.sparkContext.parallelize(todo, len(todo)).map(task).collect()
        finally:
            spark.stop()
    else:
        results = []
        with progress_bar(f"{len(todo)} points of Figs. {','.join(figs)}", len(todo)) as update:
            for i, point in enumerate(todo, 1):
                results.append(task(point))
                update(i)
    rows = paper.compare(results)
    report = {"scale": scale, "engine": engine, "seed": seed, "seconds": round(time.perf_counter() - t0, 2),
              "rows": rows, "within": all(r["within"] is not False for r in rows),
              "points": [{"figure": r.figure, "x": r.x, **r.metrics} for r in results]}
    if out:
        run_dir = start_run(out, {"command": "sim paper", "scale": scale, "figures": figs, "seed": seed})
        for r in results:
            if r.trace is not None:
                name = f"fig{r.figure}-{r.x:g}"
                write_lookups(run_dir, name, f"{out.name}/{name}", r.nodes, r.trace)
        (run_dir / "paper.json").write_text(json.dumps(report, indent=2) + "\n")
        report["run"] = str(run_dir)
    if as_json:
        typer.echo(json.dumps(report))
    else:
        typer.echo(f"{'fig':>4} {'x':>10}  {'metric':<24}{'ours':>9}{'paper':>9}  within")
        for r in rows:
            paper_value = "" if r["paper"] is None else f"{r['paper']:g}"
            mark = {True: "yes", False: "NO", None: "-"}[r["within"]]
            typer.echo(f"{r['figure']:>4} {r['x']:>10g}  {r['metric']:<24}{r['ours']:>9.4g}{paper_value:>9}  {mark}")
        typer.echo("x: the figure's axis (8: keys, 9: virtual nodes, 10: N, 11: failed fraction p, 12: churn rate R "
                   "per s). within: ours inside our tolerance of the paper's value; -: the paper gives no value "
                   "there, ours is shown for the curve.")
        typer.echo(f"{len(results)} points in {report['seconds']} s ({engine})"
                   + (f"; traces in {report['run']}" if out else ""))
    if check and not report["within"]:
        raise typer.Exit(1)


def _int_list(text: str, what: str, least: int) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or any(v < least for v in values):
        fail(f"{what} takes comma-separated integers >= {least}, got {text!r}")
    return values


@clean_errors
def stretch_cmd(nodes: str = typer.Option("1000,3000,10000", help="Ring sizes N, comma-separated."),
                pns: str = typer.Option("0,2,4,8,16", help="PNS samples K, comma-separated (0: plain Chord)."),
                topology: list[str] = typer.Option(None, help="Delay models (repeat the option; default: "
                                                   "transit_stub and lognormal,median=50,sigma=0.5)."),
                lookups: int = typer.Option(20_000, min=100, help="Lookups per point (the same for every K)."),
                iterative: bool = typer.Option(False, "--iterative", help="Stretch of iterative lookups "
                                               "(the live client's) instead of recursive."),
                seed: int = typer.Option(0, help="Random seed."),
                png: Path = typer.Option(None, help="Draw the figure here (stretch p50 against N, one line per K)."),
                as_json: bool = JSON) -> None:
    """Latency stretch against N under proximity neighbour selection, for K samples per finger.

    Stretch = a lookup's latency / the direct latency from its origin to the key's owner (median over
    the lookups); the same ring, keys and origins for every K (Gummadi et al., SIGCOMM'03, §4)."""
    output_file(png, "--png")
    sizes = _int_list(nodes, "--nodes", 2)  # (said before the simulator's imports: a second and more)
    given = tuple(_int_list(pns, "--pns", 0)) if pns else None
    from sim.latency import LatencyError, from_spec
    from sim.proximity import PNS_SAMPLES, STRETCH_TOPOLOGIES, stretch_curve

    samples = given or PNS_SAMPLES
    specs = tuple(topology) if topology else STRETCH_TOPOLOGIES
    for spec in specs:
        try:
            from_spec(spec, 2, seed)
        except LatencyError as exc:
            fail(f"--topology {spec!r}: {exc}")
    t0 = time.perf_counter()
    with progress_bar(f"{len(specs) * len(sizes) * len(samples)} points", len(specs) * len(sizes) * len(samples)) as up:
        rows = stretch_curve(sizes, samples, specs, lookups, seed, iterative, progress=up)
    report = {"routing": "iterative" if iterative else "recursive", "lookups": lookups, "seed": seed,
              "seconds": round(time.perf_counter() - t0, 2), "rows": rows}
    if png:
        _draw_stretch(rows, specs, samples, png, report["routing"])
        report["png"] = str(png)
    if as_json:
        typer.echo(json.dumps(report))
        return
    typer.echo(f"median {report['routing']} stretch, owner reached (owner named); columns are K (PNS samples, "
               "0 = plain Chord)")
    for spec in specs:
        typer.echo(f"{spec}\n{'N':>10}" + "".join(f"{'K=' + str(k):>15}" for k in samples))
        for n in sizes:
            cells = {r["pns"]: r for r in rows if r["topology"] == spec and r["nodes"] == n}
            typer.echo(f"{n:>10,}" + "".join(f"{cells[k]['stretch_reached_p50']:>8.2f} ({cells[k]['stretch_p50']:.2f})"
                                             for k in samples))
    typer.echo(f"{len(rows)} points in {report['seconds']} s" + (f"; figure in {png}" if png else ""))


def _draw_stretch(rows: list[dict], specs: tuple, samples: tuple, png: Path, routing: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(specs), figsize=(5 * len(specs), 3.8), squeeze=False)
    for ax, spec in zip(axes[0], specs, strict=True):
        for k in samples:
            pts = sorted((r["nodes"], r["stretch_reached_p50"]) for r in rows
                         if r["topology"] == spec and r["pns"] == k)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label="plain Chord" if k < 2 else f"PNS({k})")
        ax.set_xscale("log")
        ax.set_xlabel("nodes N")
        ax.set_ylabel(f"median {routing} stretch (owner reached)")
        ax.set_title(spec.split(",")[0])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
