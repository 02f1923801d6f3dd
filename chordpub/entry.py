"""Where the `chordpub` command starts: `--version` answers here, before the CLI (typer, and every
command's options) is imported; everything else goes to chordpub/cli.py."""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        from chordpub import __version__

        print(f"chordpub {__version__}")
        return
    from chordpub.cli import main as cli_main

    cli_main()
