"""`make notebooks` serves the notebooks wherever `make test` runs, root included (Jupyter refuses to
run as root without --allow-root). The test starts it on a free port, waits until JupyterLab answers,
and stops its whole process group."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from pathlib import Path

from chordpub.launcher import wait_for
from tests.helpers.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]


def test_make_notebooks_serves_them(tmp_path):
    (port,) = free_ports(1)
    log = open(tmp_path / "lab.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(["make", "-s", "notebooks", f"NOTEBOOK_ARGS=--port={port} --ip=127.0.0.1 "
                             f"--ServerApp.port_retries=0 --ServerApp.runtime_dir={tmp_path / 'rt'}"],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)

    def serving() -> dict | None:
        assert proc.poll() is None, (tmp_path / "lab.log").read_text()[-2000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api", timeout=1) as reply:
                return json.loads(reply.read())
        except OSError:
            return None

    try:
        info = wait_for(serving, timeout=120, interval=0.2, what="JupyterLab serving")
        assert "version" in info
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        except ProcessLookupError:
            pass
        log.close()
