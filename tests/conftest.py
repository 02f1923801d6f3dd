"""Shared fixtures: real node processes on loopback, always stopped, even when a test fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chordpub.launcher import LocalRing

PERIOD = 0.2  # stabilization period used by the ring tests (seconds)
IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.fixture
def ring_factory(tmp_path: Path):
    """make(**node_options) -> a LocalRing whose processes are all killed at teardown."""
    rings: list[LocalRing] = []

    def make(setup=None, **options) -> LocalRing:  # noqa: ANN001 - a dht.transport.SocketSetup
        ring = LocalRing(tmp_path / f"ring{len(rings)}", options={"stabilize": PERIOD, **options}, setup=setup)
        rings.append(ring)
        return ring

    yield make
    for ring in rings:
        ring.stop()
    leftovers = [n.proc.pid for r in rings for n in r.nodes if n.proc.poll() is None]
    assert not leftovers, f"node processes left running: {leftovers}"


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run `chordpub ARGS` as a user would; returns the completed process (text)."""
    return subprocess.run([sys.executable, "-m", "chordpub", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def one_error_line(proc: subprocess.CompletedProcess, *words: str) -> None:
    """The CLI's contract for bad input: non-zero exit, nothing on stdout, one line on stderr."""
    assert proc.returncode != 0
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]
