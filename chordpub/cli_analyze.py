"""`chordpub analyze`: Spark aggregation of run directories (traces/spark.py does the work)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from chordpub.cli_common import clean_errors, fail, output_file


@clean_errors
def analyze(
    dirs: list[Path] = typer.Argument(..., help="Run directories (RUN/lookups, RUN/deliveries), or directories "
                                      "holding them."),
    out: Path = typer.Option(None, help="Write lookups/deliveries as Parquet and CSV, and summary.json, here."),
    master: str = typer.Option(None, help="Spark master URL (default: SPARK_MASTER, else local[*])."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Aggregate lookup hops and latencies, and deliveries (duplicates, missing, latency), with Spark.

    Rows that do not fit the trace schema (a torn last line, a wrong type) are counted and named,
    never aggregated. The same job runs under spark-submit: see traces/report.py.
    """
    from traces.report import render, write_outputs
    from traces.spark import AnalyzeError, analyze, find_traces, session

    output_file(out, "--out")  # the directory itself is made; where it goes must exist
    try:
        found = find_traces(dirs)  # a bad directory fails before the JVM starts
    except AnalyzeError as exc:
        fail(str(exc))
    spark = session(master, input_bytes=found.bytes())
    try:
        result = analyze(spark, dirs)
    finally:
        spark.stop()
    if out:
        write_outputs(result, out)
    typer.echo(json.dumps(result) if as_json else render(result))
