"""Loaded in every pytest process (`-p tests.plugin_reaper` in setup.cfg's addopts): what a notebook or a
test leaves running dies with the notebook, or at the latest with the run.

A notebook's kernel that ends on a failed cell does not always run its `atexit` hooks, and the nodes its
ring forked, or an autoscaler spawned in sessions of their own, outlive it. A ring left running keeps
pinging its peers' addresses: a later test whose node binds one of those ports is joined by it, and two
unrelated rings merge (a node's id is the hash of its address, so nothing tells them apart).

Whatever the run starts carries a tag in its environment, inherited through every fork, exec and new
session: `CHORDPUB_TEST_RUN` for the run (set by the controlling process) and `CHORDPUB_TEST_NOTEBOOK`
while a notebook runs. After each notebook every process with its tag is killed, and when the run ends
every process with the run's.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import pytest

RUN_TAG = "CHORDPUB_TEST_RUN"
NOTEBOOK_TAG = "CHORDPUB_TEST_NOTEBOOK"
PASS_GAP = 0.05  # seconds between two scans for tagged processes


def tagged(name: str, value: str) -> list[int]:
    """The pids of the live processes (not this one) started with `name=value` in their environment."""
    marker = f"\0{name}={value}\0".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        pid = int(environ.parent.name)
        try:
            if pid != os.getpid() and marker in b"\0" + environ.read_bytes() + b"\0":
                found.append(pid)
        except OSError:
            continue  # gone meanwhile, or a kernel thread
    return found


def kill_tagged(name: str, value: str, passes: int = 3) -> list[int]:
    """SIGKILL every process tagged `name=value`; the pids killed (a child of ours among them is reaped).
    A process in the midst of an exec shows no environment for that moment, and a process forked
    meanwhile was not there to see: the scan is repeated (`passes`, PASS_GAP apart) until one finds none."""
    pids: list[int] = []
    for n in range(passes):
        found = _kill(tagged(name, value))
        pids += found
        if n and not found:
            break
        time.sleep(PASS_GAP)
    return pids


def _kill(pids: list[int]) -> list[int]:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass  # not ours: its own parent, or init, reaps it
    return pids


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the workers inherit the controller's; a pytest run by a test
        os.environ[RUN_TAG] = uuid.uuid4().hex  # tags its own


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # noqa: ANN201 - a hookwrapper
    if not item.nodeid.split("::", 1)[0].endswith(".ipynb"):
        yield
        return
    tag = os.environ[NOTEBOOK_TAG] = uuid.uuid4().hex
    try:
        yield
    finally:
        del os.environ[NOTEBOOK_TAG]
        kill_tagged(NOTEBOOK_TAG, tag)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controlling process, after its workers
        kill_tagged(RUN_TAG, os.environ[RUN_TAG])
