"""Trace writers: JSON Lines for live processes, Parquet for the simulator, and the run directory.

A live process may die at any moment, so its writer is line-buffered and appends whole lines:
at worst the last line is torn, and readers skip and count it. Every row goes through
`schema.normalize` first, so nothing off-schema reaches a file. The simulator produces columns
(numpy arrays) by the million, so its writer takes columns and lets pyarrow check them against
the same schema.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import IO

from traces.schema import TABLES, SchemaError, normalize


class _TraceFile:
    """What both writers share: one table, one file (its folder made), a row count, `with` support."""

    def __init__(self, path: str | os.PathLike, table: str) -> None:
        if table not in TABLES:
            raise ValueError(f"unknown trace table {table!r}")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.table = table
        self.rows = 0

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):  # noqa: ANN204 - the subclass
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class JsonlWriter(_TraceFile):
    """Appends rows of one table to a .jsonl file, one line per row, flushed per line."""

    def __init__(self, path: str | os.PathLike, table: str) -> None:
        super().__init__(path, table)
        self._file: IO[str] = open(self.path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    def write(self, row: dict) -> None:
        self._file.write(json.dumps(normalize(self.table, row), separators=(",", ":")) + "\n")
        self.rows += 1

    def close(self) -> None:
        self._file.close()


class ParquetWriter(_TraceFile):
    """Writes one table's rows to a Parquet file in row groups, from columns or from rows."""

    def __init__(self, path: str | os.PathLike, table: str) -> None:
        import pyarrow.parquet as pq

        from traces.schema import arrow_schema

        super().__init__(path, table)
        self.schema = arrow_schema(table)
        self._writer = pq.ParquetWriter(self.path, self.schema, compression="zstd")

    def write_columns(self, columns: dict) -> None:
        """One row group from equal-length columns (lists or numpy arrays), one per schema field.

        Ids may be given as integers (numpy uint64 included): they are stored as decimal strings.
        A missing, extra or ill-typed column raises before anything is written.
        """
        import pyarrow as pa

        names = [f.name for f in self.schema]
        if set(columns) != set(names):
            raise SchemaError(f"{self.table} columns: missing {sorted(set(names) - set(columns))}, "
                              f"unknown {sorted(set(columns) - set(names))}")
        arrays = []
        for field in self.schema:
            values = columns[field.name]
            if isinstance(values, pa.Array | pa.ChunkedArray):
                pass  # already Arrow: taken as it is, nulls included
            elif pa.types.is_string(field.type) and getattr(values, "dtype", None) is not None \
                    and values.dtype.kind in "iu":
                values = pa.array(values).cast(pa.string())  # integer ids, converted in C
            elif pa.types.is_string(field.type):
                values = [v if v is None or isinstance(v, str) else str(v) for v in values]
            try:
                arrays.append(values.cast(field.type) if isinstance(values, pa.Array | pa.ChunkedArray)
                              else pa.array(values, type=field.type, from_pandas=True))
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as exc:
                raise SchemaError(f"{self.table}.{field.name}: {exc}") from None
        batch = pa.Table.from_arrays(arrays, schema=self.schema)
        for field, column in zip(self.schema, batch.columns, strict=True):
            if not field.nullable and column.null_count:
                raise SchemaError(f"{self.table}.{field.name} may not be null")
        self._writer.write_table(batch)
        self.rows += batch.num_rows

    def write_rows(self, rows: list[dict]) -> None:
        """Rows checked by `schema.normalize`, written as one row group."""
        checked = [normalize(self.table, r) for r in rows]
        self.write_columns({f.name: [r[f.name] for r in checked] for f in self.schema})

    def close(self) -> None:
        self._writer.close()


def make_run_dir(root: str | os.PathLike, run: str, config: dict) -> Path:
    """RUN/manifest.json (config, versions, host), RUN/lookups/, RUN/deliveries/.

    A run of a name that exists replaces it: live writers append, so the traces of an earlier run
    under the same name would otherwise be counted again (only the directories this module and the
    commands write are removed; anything else a user keeps there stays)."""
    run_dir = Path(root) / run
    for kept in (*TABLES, "logs"):
        shutil.rmtree(run_dir / kept, ignore_errors=True)
    for table in ("lookups", "deliveries"):  # load/ is made by the one command that writes it
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


def run_complete(run_dir: Path) -> bool:
    """A run directory is complete when its manifest holds the run's summary, which an experiment
    writes last (a run cut short by Ctrl-C or a failure has none)."""
    try:
        return "summary" in json.loads((Path(run_dir) / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for dist in ("chordpub", "pyzmq", "mmh3", "msgpack"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """The whole rows of a JSON Lines file written here ([] if it does not exist): a line torn by a
    process killed mid-write is skipped, as the module docstring promises."""
    rows = []
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return rows
    for line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows
