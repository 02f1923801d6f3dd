"""Settings from a TOML file for any option of any command; the command line wins.

A table per command, named as it is typed, holds that command's options, named as they are typed
(without the dashes; `connect-timeout` and `connect_timeout` are the same)::

    [sub]
    via = "10.0.0.5:5555"
    topic = ["news", "alerts"]
    connect-timeout = 3

    [node.start]
    port = 6000
    stabilize = 0.25

The file is `--config FILE` (before the command: `chordpub --config site.toml sub ...`), else
$CHORDPUB_CONFIG, else `chordpub.toml` in the working directory when there is one. Its tables become
click's `default_map`, so a value counts exactly as a default would and a flag given on the command
line replaces it. A table or key that names no command or option is refused in one line.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

# typer vendors click; its commands are used here by shape only (groups have `commands`)
Group = Command = Any

DEFAULT_FILE = "chordpub.toml"
ENV = "CHORDPUB_CONFIG"


class ConfigError(ValueError):
    """A config file that cannot be used; the text says where and why."""


def config_path(given: Path | None) -> Path | None:
    """The file in force: --config, else $CHORDPUB_CONFIG, else ./chordpub.toml if it exists."""
    if given is not None:
        return given
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    default = Path(DEFAULT_FILE)
    return default if default.is_file() else None


def load(path: Path, root: Group) -> dict[str, Any]:
    """The file's settings as a (click) default_map for `root`, checked against its commands and options."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror}") from None
    return _tables(doc, root, path, [])


def _tables(doc: dict, group: Group, path: Path, where: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in doc.items():
        command = group.commands.get(name)
        if command is None or command.hidden:
            known = ", ".join(sorted(n for n, c in group.commands.items() if not c.hidden))
            raise ConfigError(f"config file {path}: [{'.'.join([*where, name])}] is not a command "
                              f"(commands here: {known})")
        if not isinstance(value, dict):
            raise ConfigError(f"config file {path}: {'.'.join([*where, name])} must be a table of options, "
                              f"not {type(value).__name__}")
        if hasattr(command, "commands"):
            out[name] = _tables(value, command, path, [*where, name])
        else:
            out[name] = _options(value, command, path, [*where, name])
    return out


def _options(table: dict, command: Command, path: Path, where: list[str]) -> dict[str, Any]:
    names: dict[str, str] = {}  # as typed (without dashes, "_" for "-") -> the parameter's name
    typed: list[str] = []
    multiple: set[str] = set()  # options given more than once on a command line (`join = "a:1"` is one)
    for p in command.params:
        if getattr(p, "param_type_name", "") != "option" or not p.name:
            continue
        if getattr(p, "multiple", False):
            multiple.add(p.name)
        longs = [o for o in p.opts if o.startswith("--")]
        typed.append((longs[0] if longs else p.name)[2:] if longs else p.name)
        for o in [p.name, *(x[2:] for x in longs)]:
            names[o.replace("-", "_")] = p.name
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = names.get(key.replace("-", "_"))
        if name is None:
            raise ConfigError(f"config file {path}: [{'.'.join(where)}] has no option {key!r} "
                              f"(options: {', '.join(sorted(typed))})")
        out[name] = [value] if name in multiple and isinstance(value, str) else value
    return out


def effective(root: Group, default_map: dict[str, Any], argv: list[str]) -> tuple[str, list[dict]]:
    """What `argv` (a command and its arguments, as typed after `chordpub`) would run with: each
    option's value and where it came from (command line, config file, default)."""
    group: Command = root
    names: list[str] = []
    defaults: Any = default_map
    args = list(argv)
    while hasattr(group, "commands"):
        if not args or args[0].startswith("-"):
            raise ConfigError("name a command, e.g. `chordpub config show sub --via H:P`")
        name = args.pop(0)
        command = group.commands.get(name)
        if command is None:
            raise ConfigError(f"no command {' '.join([*names, name])!r}")
        group, defaults = command, (defaults or {}).get(name)
        names.append(name)
    ctx = _parse(group, " ".join(names), args, defaults)
    rows = []
    for p in group.params:
        if getattr(p, "param_type_name", "") != "option" or not p.name or getattr(p, "hidden", False):
            continue
        source = ctx.get_parameter_source(p.name)
        origin = {"COMMANDLINE": "command line", "DEFAULT_MAP": "config file",
                  "ENVIRONMENT": "environment"}.get(getattr(source, "name", ""), "default")
        value = ctx.params.get(p.name)
        rows.append({"option": p.opts[0] if p.opts else p.name, "value": _plain(value), "from": origin})
    return " ".join(names), rows


def _parse(command: Command, name: str, args: list[str], defaults: Any) -> Any:  # -> a click Context
    """The command's context for `args`: an unknown option or a bad value is a ConfigError; a missing
    required option is shown as not set (what config show is for)."""
    try:
        return command.make_context(name, list(args), default_map=defaults)
    except Exception as exc:  # click's UsageError family, from the click typer vendors
        if type(exc).__name__ == "MissingParameter" or not hasattr(exc, "format_message"):
            return command.make_context(name, list(args), resilient_parsing=True, default_map=defaults)
        raise ConfigError(f"chordpub {name}: {exc.format_message()}") from None


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value
