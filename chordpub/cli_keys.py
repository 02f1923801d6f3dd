"""`chordpub keys generate DIR` and `keys add NAME DIR`: the CURVE keypairs of a deployment and its
principals (dht/curve.py says which and why)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from chordpub.cli_common import clean_errors

keys_app = typer.Typer(help="CURVE keys for --curve: encryption and authentication on every socket.",
                       no_args_is_help=True)


@keys_app.command("generate")
@clean_errors
def generate(directory: Path = typer.Argument(..., help="New directory for the keys (must not hold keys yet)."),
             as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Write a keypair per role (server, node, publisher, subscriber, client) and DIR/authorized/ with
    the public keys that listening sockets admit. Give DIR to every process as --curve DIR."""
    from dht.curve import generate as make_keys

    written = make_keys(directory)
    out = {"dir": str(directory), "roles": sorted(written), "authorized": str(directory / "authorized")}
    typer.echo(json.dumps(out) if as_json else
               f"keys for {', '.join(sorted(written))} in {directory}; admitted public keys in "
               f"{directory / 'authorized'} (secret keys are mode 600: copy only what each host needs)")


@keys_app.command("add")
@clean_errors
def add(name: str = typer.Argument(..., help="The principal's name, as a policy (--acl) names it."),
        directory: Path = typer.Argument(..., help="The keys directory (from `chordpub keys generate`)."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Make a principal: one more client keypair, NAME, admitted by the servers (restart them to admit
    it). A process presents it with --principal NAME (Client(role=NAME)); a policy says what it may
    publish and subscribe."""
    from dht.curve import add_principal

    secret = add_principal(directory, name)
    out = {"principal": name, "secret": str(secret), "authorized": str(directory / "authorized" / f"{name}.key")}
    typer.echo(json.dumps(out) if as_json else
               f"principal {name}: {secret} (give it to that process alone) and {out['authorized']}")
