"""Trace writers: JSON Lines for live processes, and the run-directory layout with its manifest.

A live process may die at any moment, so its writer is line-buffered and appends whole lines:
at worst the last line is torn, and readers skip and count it. Every row goes through
`schema.normalize` first, so nothing off-schema reaches a file.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time
from pathlib import Path
from typing import IO

from traces.schema import TABLES, normalize


class JsonlWriter:
    """Appends rows of one table to a .jsonl file, one line per row, flushed per line."""

    def __init__(self, path: str | os.PathLike, table: str) -> None:
        if table not in TABLES:
            raise ValueError(f"unknown trace table {table!r}")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.table = table
        self._file: IO[str] = open(self.path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self.rows = 0

    def write(self, row: dict) -> None:
        self._file.write(json.dumps(normalize(self.table, row), separators=(",", ":")) + "\n")
        self.rows += 1

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_run_dir(root: str | os.PathLike, run: str, config: dict) -> Path:
    """RUN/manifest.json (config, versions, host), RUN/lookups/, RUN/deliveries/."""
    run_dir = Path(root) / run
    for table in TABLES:
        (run_dir / table).mkdir(parents=True, exist_ok=True)
    manifest = {
        "run": run,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": config,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "versions": _versions(),
    }
    (run_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return run_dir


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for dist in ("chordpub", "pyzmq", "mmh3", "msgpack"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out
