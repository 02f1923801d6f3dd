"""`chordpub config show`: the settings a command would run with, and where each comes from."""

from __future__ import annotations

import json

import typer

from chordpub.cli_common import clean_errors

config_app = typer.Typer(help="Settings from chordpub.toml (or --config FILE): any option of any command; "
                         "the command line wins.", no_args_is_help=True)


@config_app.command("show", context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                              "allow_interspersed_args": False})
@clean_errors
def config_show(ctx: typer.Context,
                as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
                argv: list[str] = typer.Argument(None, metavar="[COMMAND [ARGS]...]",
                                                 help="A command as you would type it after `chordpub`.")) -> None:
    """Without a command: the config file in force and its settings. With one (`config show sub --via
    H:P`): every option that command would run with, and whether it came from the command line, the
    config file or the default."""
    from chordpub.config import effective

    root = ctx.find_root()
    path = root.meta.get("chordpub.config")
    settings = root.default_map or {}
    if not argv:
        out = {"file": None if path is None else str(path), "settings": settings}
        typer.echo(json.dumps(out) if as_json else (
            f"config file: {path or 'none (no --config, $CHORDPUB_CONFIG or ./chordpub.toml)'}\n"
            + "\n".join(_flat(settings))))
        return
    command, rows = effective(root.command, settings, list(argv))
    if as_json:
        typer.echo(json.dumps({"file": None if path is None else str(path), "command": command, "options": rows}))
        return
    width = max(len(r["option"]) for r in rows) if rows else 0
    typer.echo(f"chordpub {command}   (config file: {path or 'none'})")
    for r in rows:
        typer.echo(f"  {r['option']:<{width}}  {_text(r['value'])}   [{r['from']}]")


def _flat(settings: dict, prefix: str = "") -> list[str]:
    lines = []
    for k, v in settings.items():
        if isinstance(v, dict):
            lines += _flat(v, f"{prefix}{k} ")
        else:
            lines.append(f"  {prefix}--{k.replace('_', '-')} = {_text(v)}")
    return lines


def _text(value: object) -> str:
    if value is None:
        return "(not set)"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "(none)"
    return str(value)
