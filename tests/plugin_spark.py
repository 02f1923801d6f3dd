"""Loaded in every pytest process (`-p tests.plugin_spark` in setup.cfg's addopts): one Spark Connect
server for the whole run, started by the controlling process before its workers.

A local master starts a driver JVM in every `chordpub analyze`, `study report` and `demo` the tests
run and in every notebook: 15-25 CPU-seconds each, about a dozen in a run. With SPARK_MASTER set to
the server's `sc://` URL (inherited by the workers, the commands they start and the notebooks'
kernels) each of them is a Connect client instead (traces/spark_connect.py), and the run starts one
JVM for all of them. The tests that are about a local driver (spark-submit, the class archive,
`analyze --master local[1]`, the simulator's Spark tasks) name their master and start their own.

The server is started only for a run that can need it (a directory, a notebook or a Spark test
among the paths) and not waited for here: its clients retry until it listens. It is stopped when
the run ends, and dies with the process that started it whatever ends it.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import pytest

SPARK_PATHS = ("notebooks", "tests/spark")
_server = None
_log_dir: str | None = None


def _needs_spark(config: pytest.Config) -> bool:
    root = Path(config.rootpath)
    for arg in config.args or []:
        path = Path(arg.split("::", 1)[0])
        path = path if path.is_absolute() else Path(config.invocation_params.dir) / path
        try:
            rel = path.resolve().relative_to(root).as_posix()
        except ValueError:
            continue
        if path.is_dir() or rel.endswith(".ipynb") or rel.startswith(SPARK_PATHS):
            return True
    return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pytest_configure(config: pytest.Config) -> None:
    global _server, _log_dir
    if hasattr(config, "workerinput") or os.environ.get("SPARK_MASTER") or not _needs_spark(config):
        return  # a worker inherits the controller's SPARK_MASTER; a master set by hand is kept
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return  # the Spark tests say so themselves
    from traces.spark_connect import SparkServer

    _log_dir = tempfile.mkdtemp(prefix="chordpub-spark-server-")
    _server = SparkServer(_free_port(), "local[2]", Path(_log_dir) / "server.log").start()
    os.environ["SPARK_MASTER"] = _server.url


def pytest_unconfigure(config: pytest.Config) -> None:
    global _server
    if _server is None:
        return
    os.environ.pop("SPARK_MASTER", None)
    _server.stop()
    if _server.proc.returncode not in (0, 143, -15, -9) and _log_dir:
        print(f"the suite's Spark Connect server exited with {_server.proc.returncode}; its log: "
              f"{_log_dir}/server.log", file=sys.stderr)
    elif _log_dir:
        shutil.rmtree(_log_dir, ignore_errors=True)
    _server = None
