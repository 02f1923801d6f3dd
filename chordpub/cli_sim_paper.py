"""`chordpub sim paper`: the Chord paper's Figs. 8-12, locally or as Spark tasks (sim/paper.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from chordpub.cli_common import clean_errors, fail
from chordpub.cli_sim import JSON, OUT, progress_bar, start_run, write_lookups
from sim import paper


def _parse_figures(text: str) -> list[str]:
    figs = [f.strip() for f in text.split(",") if f.strip()]
    bad = [f for f in figs if f not in paper.FIGURES]
    if bad or not figs:
        fail(f"--figures takes a comma-separated subset of {','.join(paper.FIGURES)}; got {text!r}")
    return figs


def _task(keep_traces: bool):
    """The function each point runs as: traces dropped unless they will be written."""
    def run(point: paper.Point) -> paper.PointResult:
        result = paper.run_point(point)
        if not keep_traces:
            result.trace = None
        return result
    return run


@clean_errors
def paper_cmd(scale: str = typer.Option("small", help="small: minutes on a laptop; paper: the paper's sizes."),
              figures: str = typer.Option(",".join(paper.FIGURES), help="Which figures, e.g. 8,10."),
              engine: str = typer.Option("local", help="local: one process; spark: each point a Spark task."),
              master: str = typer.Option(None, help="Spark master URL for --engine spark (default: SPARK_MASTER, "
                                         "else local[*])."),
              seed: int = typer.Option(0, help="Random seed."),
              check: bool = typer.Option(False, help="Exit 1 when a value is outside its tolerance."),
              out: Path = OUT, as_json: bool = JSON) -> None:
    """Reproduce SIGCOMM'01 Figs. 8-12 and print the paper's values beside ours."""
    if scale not in paper.SCALES:
        fail(f"--scale must be one of {', '.join(paper.SCALES)}, got {scale!r}")
    if engine not in ("local", "spark"):
        fail(f"--engine must be local or spark, got {engine!r}")
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
            mark = {True: "yes", False: "NO", None: ""}[r["within"]]
            typer.echo(f"{r['figure']:>4} {r['x']:>10g}  {r['metric']:<24}{r['ours']:>9.4g}{paper_value:>9}  {mark}")
        typer.echo(f"{len(results)} points in {report['seconds']} s ({engine})"
                   + (f"; traces in {report['run']}" if out else ""))
    if check and not report["within"]:
        raise typer.Exit(1)
