"""What a notebook leaves running dies when the notebook ends (tests/plugin_reaper.py)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from dht.processes import wait_for
from tests import plugin_reaper


class _Notebook:
    nodeid = "notebooks/99_left.ipynb::99_left.ipynb"


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_process_a_notebook_left_in_a_session_of_its_own_dies_when_the_notebook_ends():
    """A failed notebook's kernel left its ring's nodes running (sessions of their own, re-parented to
    init), and a later test's ring was joined by them through a reused port.

    To see it fail: drop the `kill_tagged(NOTEBOOK_TAG, tag)` of the plugin's runtest hook."""
    hook = plugin_reaper.pytest_runtest_protocol(_Notebook(), None)
    next(hook)  # the notebook runs: what it starts carries its tag
    left = subprocess.run(["sh", "-c", "setsid sleep 600 >/dev/null 2>&1 & echo $!"], capture_output=True,
                          text=True, check=True)
    pid = int(left.stdout)
    try:
        wait_for(lambda: Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep"), 10, what="sleep running")
        tag = os.environ[plugin_reaper.NOTEBOOK_TAG]
        assert pid in plugin_reaper.tagged(plugin_reaper.NOTEBOOK_TAG, tag), (
            f"not tagged: {Path(f'/proc/{pid}/environ').read_bytes().count(tag.encode())} tags in its environment, "
            f"its parent {Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[1]}")
        try:
            next(hook)
        except StopIteration:
            pass  # the notebook has ended
        wait_for(lambda: not _running(pid), 10, what="the left process killed")
        assert plugin_reaper.NOTEBOOK_TAG not in os.environ, "the next test would be tagged as the notebook"
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
