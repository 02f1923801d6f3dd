"""`chordpub mininet run`: the real processes on an emulated network, one command, one run directory."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from chordpub.cli_common import clean_errors, fail

mininet_app = typer.Typer(help="Run ring, publishers and subscribers on Mininet hosts (needs root).",
                          no_args_is_help=True)


@mininet_app.command("run")
@clean_errors
def run(
    topo: str = typer.Option(..., help="Topology spec: single,4 | linear,4 | tree,fanout=2,depth=2 | waxman,n=8 ..."),
    dht: int = typer.Option(None, min=1, help="Discovery nodes (default 2; from the file with --dht-json)."),
    pubs: int = typer.Option(1, min=0, help="Publishers."),
    subs: int = typer.Option(1, min=0, help="Subscribers."),
    delay: str = typer.Option(None, help="Delay of every link, e.g. 5ms (default: the spec's, 1ms for "
                              "single/linear/tree)."),
    seconds: float = typer.Option(10.0, min=0.1, help="Seconds of publishing."),
    mode: str = typer.Option("direct", help="direct (subscribers connect to publishers) | relay (via the owner)."),
    placement: str = typer.Option("roundrobin", help="roundrobin (one process per host while hosts last) | "
                                  "random (hosts shuffled with --seed, then dealt out)."),
    seed: int = typer.Option(None, help="Seed for random topologies, random placement and link loss."),
    out: Path = typer.Option(Path("runs"), help="Root of run directories."),
    run_name: str = typer.Option(None, "--run", help="Run name (default mininet-DATE-TIME)."),
    dht_json: Path = typer.Option(None, help='The course\'s {"dht": [{"id","hash","IP","port","host"}]} file: '
                                  "exactly those node ids on those hosts."),
    bits: int = typer.Option(64, min=8, max=128, help="Identifier bits (match the --dht-json hash width)."),
    rate: float = typer.Option(10.0, min=0.1, help="Messages per second per publisher."),
    size: int = typer.Option(100, min=8, max=512 * 1024, help="Payload bytes."),
    topics: int = typer.Option(1, min=1, help="Topics; publishers and subscribers are dealt out over them."),
    topics_per_pub: int = typer.Option(1, min=1, help="Topics each publisher process publishes (one client "
                                       "for all of them), consecutive from its own first one."),
    topics_per_sub: int = typer.Option(1, min=1, help="Topics each subscriber process follows."),
    stabilize: float = typer.Option(0.5, min=0.05, help="Seconds between the nodes' maintenance rounds."),
    emulation: str = typer.Option("auto", help="Link delay/loss by auto | netem (TCLink) | userspace "
                                  "(topologies.delay_switch; what auto picks on kernels without sch_netem)."),
    curve: Path = typer.Option(None, help="CURVE keys directory (`chordpub keys generate`): every process "
                               "runs --curve."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Place DHT nodes, publishers and subscribers on the hosts of TOPO, start them with this CLI inside
    the hosts, wait for a consistent ring, publish for SECONDS, stop everything and gather one run
    directory (manifest.json, lookups/ and deliveries/ JSON Lines, logs/). Analyse it with
    `chordpub analyze RUN`."""
    from topologies.experiment import Experiment, ExperimentConfig
    from topologies.graphs import parse_delay

    if dht is not None and dht_json is not None:
        fail("give --dht or --dht-json, not both (the file says how many nodes)")
    config = ExperimentConfig(
        topo=topo, dht=dht or 2, pubs=pubs, subs=subs, delay_ms=parse_delay(delay) if delay else None,
        seconds=seconds, mode=mode, placement=placement, seed=seed, out=out, run=run_name, dht_json=dht_json,
        bits=bits, rate=rate, size=size, topics=topics, topics_per_pub=topics_per_pub,
        topics_per_sub=topics_per_sub, stabilize=stabilize, emulation=emulation,
        curve=curve)

    def progress(message: str) -> None:  # for people; scripts get one line on error, as everywhere
        if sys.stderr.isatty():
            typer.echo(f"chordpub: {message}", err=True)

    summary = Experiment(config, progress=progress).run()
    if as_json:
        typer.echo(json.dumps(summary))
        return
    lat = summary["latency_ms"]
    typer.echo(f"run {summary['dir']} ({summary['emulation']} link emulation, {summary['wall_s']:g} s)\n"
               f"ring: {summary['ring']['nodes']} nodes consistent after {summary['ring']['seconds']:g} s\n"
               f"deliveries: {summary['deliveries']} (publishers sent {summary['sent']}); latency "
               f"min {lat['min']} p50 {lat['p50']} p99 {lat['p99']} ms\n"
               f"lookups: {summary['lookups']}, mean hops {summary['mean_hops']}")
    if len(summary["topics"]) > 1:
        for topic, t in summary["topics"].items():
            typer.echo(f"  {topic}: sent {t['sent']}, delivered {t['deliveries']}, latency p50 "
                       f"{t['latency_ms']['p50']} p99 {t['latency_ms']['p99']} ms")
