"""`chordpub study run|report`: a grid of experiment points in one command, one Spark report over them."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import typer

from chordpub.cli_common import (
    clean_errors,
    fail,
    log_file_option,
    log_level_option,
    output_file,
    setup_logging,
)

study_app = typer.Typer(help="Studies: sweeps over publishers, subscribers, modes, topologies... run in one "
                        "command (resumable), aggregated by Spark, drawn.", no_args_is_help=True)

LIST = "Comma-separated values: every one is a point of the grid."


def _values(text: str | None) -> list[str] | None:
    if text is None:
        return None
    values = [v.strip() for v in text.split(",")]
    if not all(values):
        fail(f"{text!r}: an empty value in the list")
    return values


@study_app.command("run")
@clean_errors
def run(
    study_file: Path = typer.Argument(None, help="A TOML study file (settings and axes; see studies/). Options "
                                      "given here override its values."),
    backend: str = typer.Option(None, help="mininet (emulated hosts and links; root) | local (loopback "
                                "processes, no link emulation). Default mininet."),
    pubs: str = typer.Option(None, help=f"Publishers per point. {LIST}"),
    subs: str = typer.Option(None, help=f"Subscribers per point. {LIST}"),
    mode: str = typer.Option(None, help=f"direct | relay. {LIST}"),
    topo: list[str] = typer.Option(None, help="Topology spec (repeat the option for several: specs contain "
                                   "commas). 'single' is sized to each point, one host per process."),
    delay: str = typer.Option(None, help=f"Link delay, e.g. 5ms (mininet). {LIST}"),
    topics: str = typer.Option(None, help=f"Topics. {LIST}"),
    topics_per_pub: str = typer.Option(None, help=f"Topics each publisher process publishes. {LIST}"),
    topics_per_sub: str = typer.Option(None, help=f"Topics each subscriber process follows. {LIST}"),
    rate: str = typer.Option(None, help=f"Messages per second per publisher. {LIST}"),
    size: str = typer.Option(None, help=f"Payload bytes. {LIST}"),
    dht: str = typer.Option(None, help=f"Discovery nodes (ring size). {LIST}"),
    repeats: int = typer.Option(None, min=1, help="Runs of every point (default 1)."),
    seconds: float = typer.Option(None, min=0.1, help="Seconds of publishing per run (default 5)."),
    seed: int = typer.Option(None, min=0, help="Seed for random topologies and placements (point i gets seed+i)."),
    shared_hosts: bool = typer.Option(None, "--shared-hosts", help="Let several processes share a Mininet host "
                                      "when the topology has fewer hosts than a point has processes."),
    out: Path = typer.Option(None, help="The study directory (default runs/study-NAME, NAME the file's name "
                             "setting or a digest of the grid: the same command resumes the same study)."),
    as_json: bool = typer.Option(False, "--json", help='Print one JSON object: {"study", "points", "ran", '
                                 '"skipped", "wall_s"}.'),
    log_level: str = log_level_option("INFO"),
    log_file: Path = log_file_option(),
) -> None:
    """Run every point of the grid (the product of every axis's values, times --repeats), each a run
    directory under OUT/runs/ in the trace schema, with OUT/study.json naming them. Points already
    done are skipped: after an interruption, the same command finishes the study. Every process's log
    (at --log-level) is kept in its run directory's logs/. Report it with `chordpub study report OUT`."""
    setup_logging(log_level, log_file)
    from topologies.study import AXES, StudySpec, run_study

    given = {"pubs": _values(pubs), "subs": _values(subs), "mode": _values(mode), "topo": topo or None,
             "delay": _values(delay), "topics": _values(topics), "topics_per_pub": _values(topics_per_pub),
             "topics_per_sub": _values(topics_per_sub), "rate": _values(rate), "size": _values(size),
             "dht": _values(dht), "backend": backend, "repeats": repeats, "seconds": seconds, "seed": seed,
             "shared_hosts": shared_hosts}
    if study_file is not None:
        spec = StudySpec.from_toml(study_file, overrides=given)
    else:
        spec = StudySpec.make({k: v for k, v in given.items() if k in AXES},
                              {k: v for k, v in given.items() if k not in AXES})
    if out is None:
        digest = hashlib.sha1(json.dumps(spec.to_dict(), sort_keys=True).encode()).hexdigest()[:8]
        name = spec.settings["name"] or digest
        out = Path("runs") / f"study-{name}"
        out.parent.mkdir(exist_ok=True)
    if out.exists() and not out.is_dir():
        fail(f"--out {out} is a file")
    output_file(out, "--out")
    points = spec.points()

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=Console(stderr=True), transient=True, disable=not sys.stderr.isatty())
    task = bar.add_task("study", total=len(points))
    done = {"n": 0}

    def on_point(i: int, point, status: str) -> None:  # noqa: ANN001 - a topologies.study.Point
        if status in ("skipped", "done"):
            done["n"] += 1
            bar.update(task, completed=done["n"])
        else:
            bar.update(task, description=f"{point.name}")

    def progress(message: str) -> None:
        bar.update(task, description=message[:60])

    try:
        with bar:
            summary = run_study(spec, out, on_point=on_point, progress=progress, log_level=log_level.upper())
    except KeyboardInterrupt:
        typer.echo(f"chordpub: interrupted after {done['n']} of {len(points)} points; everything started was "
                   f"stopped. Run the same command again to finish {out}.", err=True)
        raise typer.Exit(130) from None
    if as_json:
        typer.echo(json.dumps(summary))
        return
    typer.echo(f"study {summary['study']}: {summary['points']} points, {summary['ran']} run now, "
               f"{summary['skipped']} already done ({summary['wall_s']:g} s)\n"
               f"report: chordpub study report {summary['study']}")


@study_app.command("report")
@clean_errors
def report(
    study: Path = typer.Argument(..., help="A study directory (from `chordpub study run`)."),
    png: Path = typer.Option(None, help="Draw latency p50/p99 against publishers × subscribers per mode, and the "
                             "latency CDFs, into this PNG file."),
    master: str = typer.Option(None, help="Spark master URL (default: SPARK_MASTER, else local[*])."),
    as_json: bool = typer.Option(False, "--json", help='Print one JSON object: {"study", "points": [{...parameters, '
                                 '"deliveries", "expected", "lost", "latency_p50_ms", ...}], "patterns", "cdf"}.'),
) -> None:
    """One Spark job over every finished run of the study, grouped by the point's parameters: per point
    deliveries, expected and lost (what publishers sent, once per subscriber of the topic), duplicates,
    latency p50/p90/p99/max, lookups and hops; then the five patterns of austinjhunt's study checked."""
    from topologies.study import load_study
    from traces.patterns import patterns
    from traces.spark import session
    from traces.study_report import study_report

    doc = load_study(study)
    output_file(png, "--png")
    spark = session(master, app_name="chordpub-study-report")
    try:
        result = study_report(spark, study, doc)
    finally:
        spark.stop()
    if not result["points"]:
        fail(f"{study}: no point has finished yet (run `chordpub study run` again to resume it)")
    result["patterns"] = patterns(result["points"])
    varying = [k for k, v in doc["axes"].items() if len(v) > 1]
    if png is not None:
        from traces.study_plot import draw

        result["png"] = str(draw(result, varying, png))
    if as_json:
        typer.echo(json.dumps(result))
        return
    typer.echo(render(result, varying, len(doc["points"])))


def render(result: dict, varying: list[str], planned: int) -> str:
    shown = (varying or ["pubs", "subs"]) + ["deliveries", "expected", "lost", "latency_p50_ms", "latency_p90_ms",
                                             "latency_p99_ms", "latency_max_ms", "mean_hops"]
    heads = [s.replace("latency_", "").replace("_ms", " ms") for s in shown]
    rows = [[_cell(p.get(k)) for k in shown] for p in result["points"]]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
    lines = [f"study {result['study']}: {len(result['points'])} points reported (of {planned} planned)",
             "  ".join(h.rjust(w) for h, w in zip(heads, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.append("\nthe five patterns of austinjhunt's study:")
    for k in "12345":
        v = result["patterns"][k]
        verdict = {True: "yes", False: "no", None: "cannot tell"}[v["holds"]]
        numbers = {n: x for n, x in v.items() if n not in ("pattern", "holds")}
        lines.append(f"  {k}. {v['pattern']}: {verdict}  {json.dumps(numbers)}")
    if result.get("png"):
        lines.append(f"\nfigure: {result['png']}")
    return "\n".join(lines)


def _cell(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)
