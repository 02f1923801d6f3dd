"""`chordpub topo show`: what a topology spec builds (topologies/graphs.py), as text, JSON or a PNG."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from chordpub.cli_common import clean_errors, output_file

topo_app = typer.Typer(help="Network topologies for the simulator and Mininet (spec strings).", no_args_is_help=True)


@topo_app.command("show")
@clean_errors
def show(spec: str = typer.Argument(..., help="e.g. single,4 | linear,4 | tree,depth=2,fanout=3 | waxman,n=50 | "
                                    "barabasi_albert,n=100,m=2 | transit_stub; any takes delay=5ms, bw=, loss=, seed="),
         png: Path = typer.Option(None, help="Draw it to this PNG file."),
         seed: int = typer.Option(0, help="Seed for the random generators."),
         as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Hosts, switches, links, link delays and the diameter in hops and ms."""
    from topologies.graphs import build, describe, draw

    output_file(png, "--png")
    g = build(spec, seed=seed)
    info = describe(g)
    if png:
        draw(g, str(png))
        info["png"] = str(png)
    if as_json:
        typer.echo(json.dumps(info))
        return
    d = info["delay_ms"]
    typer.echo(f"{spec}: {info['hosts']} hosts, {info['switches']} switches, {info['links']} links "
               f"({d['min']:g}..{d['max']:g} ms each); diameter {info['diameter_hops']} hops, "
               f"{info['diameter_ms']:g} ms between the farthest hosts" + (f"; drawn to {png}" if png else ""))
