"""Where the `chordpub` command starts: `--version` answers here, before the CLI (typer, and every
command's options) is imported; everything else goes to chordpub/cli.py, with typer told not to
format help and errors through rich (`TYPER_USE_RICH=0`, unless the environment says otherwise):
importing rich for that was most of every command's start (a node's, a publisher's, `--help`'s).
The progress bars and `ring watch` import rich themselves, when they run."""

from __future__ import annotations

import os
import sys


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        from chordpub import __version__

        print(f"chordpub {__version__}")
        return
    told = "TYPER_USE_RICH" in os.environ
    os.environ.setdefault("TYPER_USE_RICH", "0")
    import typer.core  # noqa: F401 - reads TYPER_USE_RICH once, as it is imported

    if not told:
        del os.environ["TYPER_USE_RICH"]  # not passed on to the processes a command starts
    from chordpub.cli import main as cli_main

    cli_main()
