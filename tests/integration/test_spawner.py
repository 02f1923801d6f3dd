"""Nodes forked from the warm template (dht/spawner.py) are nodes as an exec'd one is: a session of
their own, their output in their log, the launcher's environment, the exit status a signal gives them;
and where a variable the interpreter reads at its start changed since the template started, nodes are
exec'd instead. Any other forked `chordpub` command prints, errs and exits as the exec'd one does.

To see it fail: drop `os.setsid()` in `command_template._child` (the node shares the template's session, and a
signal to the template's group would reach it), or its `setproctitle` (`ps` and `pgrep -f` show every node as
the template), or keep the template's environment in the fork
(`os.environ.update(env)` -> `pass`: the node misses the config file the launcher named), or hand an exit
code to its first asker only (`codes.get(` -> `codes.pop(`: a thread asking after another sees the
dead node running, as the chaos tests' lookup threads did), or make
`Spawner.usable` ignore the environment (a node started after PYTHONPATH changed is forked with the
template's, not exec'd), or give the fork the template's own `sys.argv[0]` (`[MAIN, *argv]` ->
`["chordpub", *argv]`: its usage line names another program), or send its errors to its output file
(`(log, err or log)` -> `(log, log)`), or run a forked module from the template's directory rather than the
launcher's (drop `sys.path.insert(0, cwd)`: the test's own module is not found).
"""

from __future__ import annotations

import os
import signal
import subprocess

from chordpub.launcher import LocalRing, await_ready, spawn_node, stop_processes
from dht import spawner
from dht.client import DhtClient


def test_a_forked_node_serves_in_its_own_session_logs_to_its_file_and_exits_as_signalled(tmp_path):
    with LocalRing(tmp_path, options={"stabilize": 0.2}) as ring:
        a, b = ring.start(2)
        assert isinstance(a.proc, spawner.ForkedProcess), "a node of this tree and interpreter is forked"
        ring.wait_consistent(timeout=30)
        with DhtClient(a.endpoint) as client:
            assert client.info(b.endpoint)["endpoint"] == b.endpoint
        assert os.getsid(a.proc.pid) == a.proc.pid, "its own session, as start_new_session gives"
        with open(f"/proc/{a.proc.pid}/cmdline", "rb") as f:
            shown = f.read().replace(b"\0", b" ").decode()
        assert "-m chordpub node start" in shown and a.log_path.stem in shown, f"ps would show {shown!r}"
        assert "serving" in a.log_path.read_text()
        b.proc.send_signal(signal.SIGKILL)
        assert b.proc.wait(10) == -signal.SIGKILL
        again = spawner.ForkedProcess(spawner.shared(), b.proc.pid, b.proc.args)  # as another thread asks after it
        assert again.poll() == -signal.SIGKILL, "an exit code is there for every asker, not the first only"
        a.proc.send_signal(signal.SIGTERM)
        assert a.proc.wait(20) == 0, a.log_path.read_text()[-2000:]


def test_a_fork_takes_the_launchers_environment_and_a_changed_interpreter_variable_means_exec(tmp_path,
                                                                                                 monkeypatch):
    assert spawner.shared() is not None  # the template, started before the variable below is set
    config = tmp_path / "site.toml"
    config.write_text("[node.start]\nsuccessors = 6\n")
    monkeypatch.setenv("CHORDPUB_CONFIG", str(config))  # read by the node's command line, at its start
    first = spawn_node(tmp_path, "before")
    try:
        assert isinstance(first, spawner.ForkedProcess), "a node of this tree and interpreter is forked"
        node = await_ready(first, tmp_path, "before")
        with DhtClient(node.endpoint) as client:
            assert client.info(node.endpoint)["r"] == 6, "the fork read the launcher's environment"
        monkeypatch.setenv("PYTHONPATH", str(tmp_path))
        second = spawn_node(tmp_path, "after")
        try:
            assert isinstance(second, subprocess.Popen), "a fork would carry the template's PYTHONPATH"
        finally:
            stop_processes([second])
    finally:
        stop_processes([first])


def test_a_forked_command_prints_and_exits_as_an_exec_d_one(tmp_path, monkeypatch):
    """What the tests' `run_cli` and `procs` see of a `chordpub` command: the same output, errors and
    exit status whether the template forked it or it was exec'd."""
    seen = {}
    for way in ("1", "0"):
        monkeypatch.setenv("CHORDPUB_FORK", way)
        out, err = tmp_path / f"out{way}", tmp_path / f"err{way}"
        proc = spawner.start(["pub", "--topic", "t", "--no-such-option"], out, err=err, cwd=tmp_path)
        assert isinstance(proc, spawner.ForkedProcess) == (way == "1")
        seen[way] = (proc.wait(30), out.read_text(), err.read_text())
    code, printed, said = seen["1"]
    assert (code, printed) == (2, ""), seen
    assert said.startswith("Usage: python -m chordpub pub "), said
    assert seen["1"] == seen["0"], "a forked command's usage error is the exec'd one's"


def test_a_forked_module_of_this_tree_runs_as_python_dash_m_runs_it(tmp_path, monkeypatch):
    """A test's helper (`python -m tests.helpers.X`) forked as a command is: its arguments, its output
    and errors, its exit status, and the name `ps` shows, whether the template forked it or it was exec'd."""
    (tmp_path / "helper_here.py").write_text(
        "import sys\nprint('args', sys.argv[1:], sys.argv[0].endswith('helper_here.py'))\n"
        "print('to err', file=sys.stderr)\nsys.exit(int(sys.argv[1]))\n")
    seen = {}
    for way in ("1", "0"):
        monkeypatch.setenv("CHORDPUB_FORK", way)
        out, err = tmp_path / f"out{way}", tmp_path / f"err{way}"
        proc = spawner.start(["3", "x y"], out, err=err, cwd=tmp_path, module="helper_here")
        assert isinstance(proc, spawner.ForkedProcess) == (way == "1")
        assert proc.args[-4:] == ["-m", "helper_here", "3", "x y"]
        seen[way] = (proc.wait(30), out.read_text(), err.read_text())
    assert seen["1"] == (3, "args ['3', 'x y'] True\n", "to err\n"), seen
    assert seen["1"] == seen["0"]
