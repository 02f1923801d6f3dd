"""The `chordpub` command: one typer app, one sub-app per area. Thin: parse, call, print.

Every report command takes --json and then prints exactly one JSON object on stdout. Bad input
gives one clear line on stderr and a non-zero exit, never a traceback (docs/contracts.md). The
areas live in their own modules, which import only chordpub/cli_common.py; this one mounts them,
and only the one a command line names: a node or client process does not import and build the
simulator's, Spark's and Mininet's commands to start.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path

import typer

from chordpub.cli_common import CURVE_HELP, clean_errors, fail, log_file_option, log_level_option, setup_logging
from dht.ids import key_id


def _area(module: str, attribute: str, group: bool = True) -> Callable[[typer.Typer, str], None]:
    """Mounts `attribute` of chordpub.`module` under its name: imported only when mounted."""
    def mount(app: typer.Typer, name: str) -> None:
        thing = getattr(importlib.import_module(f"chordpub.{module}"), attribute)
        if group:
            app.add_typer(thing, name=name)
        else:
            app.command(name)(thing)
    return mount


def _sim(app: typer.Typer, name: str) -> None:
    from chordpub import cli_sim, cli_sim_paper

    if "paper" not in {c.name for c in cli_sim.sim_app.registered_commands}:
        cli_sim.sim_app.command("paper")(cli_sim_paper.paper_cmd)
        cli_sim.sim_app.command("stretch")(cli_sim_paper.stretch_cmd)
    app.add_typer(cli_sim.sim_app, name=name)


# the command's first word -> what mounts it, in the order --help lists them
AREAS: dict[str, Callable[[typer.Typer, str], None]] = {
    "node": _area("cli_node", "node_app"),
    "ring": _area("cli_ring", "ring_app"),
    "pub": _area("cli_pubsub", "pub", group=False),
    "sub": _area("cli_sub", "sub", group=False),
    "gateway": _area("cli_gateway", "gateway", group=False),
    "topic": _area("cli_pubsub", "topic_app"),
    "dlq": _area("cli_dlq", "dlq_app"),
    "elect": _area("cli_consensus", "elect", group=False),
    "leader": _area("cli_consensus", "leader", group=False),
    "kv": _area("cli_consensus", "kv_app"),
    "sim": _sim,
    "topo": _area("cli_topo", "topo_app"),
    "mininet": _area("cli_mininet", "mininet_app"),
    "analyze": _area("cli_analyze", "analyze", group=False),
    "spark-server": _area("cli_analyze", "spark_server", group=False),
    "keys": _area("cli_keys", "keys_app"),
    "acl": _area("cli_acl", "acl_app"),
    "study": _area("cli_study", "study_app"),
    "config": _area("cli_config", "config_app"),
}


def _print_version(value: bool) -> None:
    if value:
        from chordpub import __version__

        typer.echo(f"chordpub {__version__}")
        raise typer.Exit()


def root(ctx: typer.Context,
         config: Path = typer.Option(None, "--config", help="A TOML file of settings for any command's options "
                                     "(default: $CHORDPUB_CONFIG, else ./chordpub.toml if present); the command "
                                     "line wins. `chordpub config show` prints them."),
         version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                      help="Print the version and exit.")) -> None:
    """chordpub: DHT-based publish/subscribe over a Chord ring on ZeroMQ."""
    from chordpub.config import ConfigError, config_path, load

    path = config_path(config)
    ctx.meta["chordpub.config"] = path
    if path is not None:
        try:
            ctx.default_map = load(path, ctx.command)
        except ConfigError as exc:
            fail(str(exc))


@clean_errors
def demo(seconds: float = typer.Option(10.0, min=0.0, help="Seconds of publishing, split between direct and "
                                      "relay mode (0: lookups only)."),
         out: Path = typer.Option(Path("runs"), help="Where the run directory goes."),
         nodes: int = typer.Option(8, min=1, max=256, help="Ring size."),
         lookups: int = typer.Option(1000, min=1, help="Lookups of random topic names."),
         curve: Path = typer.Option(None, help=CURVE_HELP + " Every process of the demo runs --curve."),
         as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
         analysis: bool = typer.Option(True, "--analysis/--no-analysis",
                                       help="End with Spark's summary of the run's traces (Java needed); "
                                       "--no-analysis: the demo's own figures only, no Java."),
         log_level: str = log_level_option(),
         log_file: Path = log_file_option()) -> None:
    """The main job: a local ring, lookups from random nodes, then 3 publishers and 3 subscribers on
    overlapping topics (direct, then relay), and what they measured. Every process's log is kept in
    the run directory's logs/."""
    from chordpub.demo import run_demo

    setup_logging(log_level, log_file)

    run_demo(nodes=nodes, lookups=lookups, seconds=seconds, out=out, as_json=as_json, curve=curve,
             analysis=analysis)


def keyid(key: str, bits: int = 64) -> None:
    typer.echo(str(key_id(key, bits)))


def build(only: str | None = None) -> typer.Typer:
    """The `chordpub` app: every command, or (`only`) the one a command line names, so that a process
    started as `chordpub node start` imports and builds that command alone."""
    # help texts are plain text: "[topic]" in them is shown, not read as rich markup
    app = typer.Typer(help="chordpub: DHT-based publish/subscribe over a Chord ring on ZeroMQ.",
                      no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False,
                      rich_markup_mode=None)
    app.callback()(root)
    for name, mount in AREAS.items():
        if only is None or only == name:
            mount(app, name)
    if only in (None, "demo"):
        app.command("demo")(demo)
    if only in (None, "keyid"):
        app.command("keyid", hidden=True)(keyid)
    return app


def _only(argv: list[str]) -> str | None:
    """The command `argv` names first, when it needs no other: not with a config file in force (it is
    checked against every command) nor before a command word (`--help`, `--config F`, `--version`), nor for
    `config`."""
    if not argv or (argv[0] not in AREAS and argv[0] not in ("demo", "keyid")) or argv[0] == "config":
        return None  # `config show ARGS` reads the whole app
    from chordpub.config import config_path

    return None if config_path(None) is not None else argv[0]


_full: typer.Typer | None = None


def full_app() -> typer.Typer:
    """Every command (built once)."""
    global _full
    if _full is None:
        _full = build()
    return _full


def __getattr__(name: str) -> typer.Typer:
    if name == "app":  # `from chordpub.cli import app`: the whole app
        return full_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    build(_only(sys.argv[1:]))()


def run(*args: object) -> str:
    """Run `chordpub ARGS` in this process, as the shell would run it, and return what it printed on
    stdout; a command that fails raises RuntimeError with what it said on stderr. For notebooks and
    scripts that run many commands: the simulator's compiled loops load once, not once a command."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    command = f"chordpub {' '.join(map(str, args))}"
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = typer.main.get_command(full_app()).main([str(a) for a in args], prog_name="chordpub",
                                                    standalone_mode=False)
    except Exception as exc:  # a usage error: what the shell would have printed before exit status 2
        if not hasattr(exc, "format_message"):
            raise
        raise RuntimeError(f"{command}: {exc.format_message()}") from None
    if code not in (None, 0):
        raise RuntimeError(f"{command}: exit status {code}: {err.getvalue().strip()}")
    return out.getvalue()


if __name__ == "__main__":
    main()
