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


@clean_errors
def spark_server(
    port: int = typer.Option(15002, min=1, max=65535, help="Loopback port of the Connect endpoint (Spark's "
                             "default 15002)."),
    master: str = typer.Option("local[*]", help="Where the server's own driver runs its tasks."),
    log: Path = typer.Option(None, help="Append the server's log here (default: discarded)."),
    ready_timeout: float = typer.Option(120.0, min=1, help="Seconds to wait for the server to listen."),
) -> None:
    """Run one Spark driver for many analyses: a Spark Connect server on 127.0.0.1 until Ctrl-C.

    Once it prints its URL (one JSON line, {"url": "sc://127.0.0.1:PORT"}), `chordpub analyze
    --master sc://127.0.0.1:PORT` (or SPARK_MASTER set to it, for `study report`, `demo` and the
    notebooks) sends its queries there instead of starting a driver JVM of its own: seconds instead
    of tens of seconds on a small run. The server reads the traces by path, so it runs on the
    machine that holds them.
    """
    from chordpub.cli_common import stop_on_signals
    from traces.spark_connect import SparkServer, SparkServerError

    output_file(log, "--log")
    stop = stop_on_signals()
    server = SparkServer(port, master, log)
    try:
        server.start().wait_ready(ready_timeout)
    except SparkServerError as exc:
        server.stop()
        fail(str(exc))
    try:
        typer.echo(json.dumps({"url": server.url}))
        while not stop.wait(0.5):
            if server.proc.poll() is not None:
                fail(f"the Spark Connect server exited with status {server.proc.returncode}")
    finally:
        server.stop()
