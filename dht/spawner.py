"""`chordpub` processes (a ring's nodes, publishers, subscribers) forked from a warm template instead of
started from scratch.

A `chordpub node start` exec'd afresh pays for its interpreter and its imports every time: about 0.2
CPU-seconds before its first socket, most of what an idle node costs in a short-lived ring (a local
ring, the demo, a test); a `pub` or `sub` as much. A template process imports a node's and a client's
modules once; each command is then a fork of it that runs the same command line (`chordpub.cli.main`) in
a session of its own, with its output to its log, as the exec'd one would: a few hundredths of a
CPU-second each.

The template is one process per launching process (started on the first command, ended when the
launcher exits or closes its pipe). It takes requests on its stdin, one JSON object a line, and answers
each on its stdout: `spawn` forks a command and answers its pid; `status` reaps what exited and answers a
pid's exit code (None: running). The template stays single-threaded and opens no socket, so that a
fork of it is safe. A fork takes the launcher's environment as it is at the spawn; but what the
interpreter and the imports read at their start is the template's, so a launcher whose variables of
that kind (STARTUP_PREFIXES) changed since the template started execs its commands the ordinary way.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import threading
import time

# variables read as an interpreter starts or a module is imported (PYTHONPATH, PYTHONHASHSEED, the
# dynamic linker's, msgpack's choice of its pure-Python build), not when a node reads its environment
STARTUP_PREFIXES = ("PYTHON", "LD_", "MSGPACK_")


COMMAND_ARGV = [sys.executable, "-m", "chordpub"]  # what a forked command stands for


def _startup(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES)}


class ForkedProcess:
    """A command forked by the template, with the part of `subprocess.Popen` the launchers use."""

    def __init__(self, spawner: Spawner, pid: int, args: list[str]) -> None:
        self._spawner = spawner
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            code = self._spawner.status(self.pid)
            if code is not None:  # (another thread may have seen it first)
                self.returncode = code
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.01)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)  # (a zombie until the template reaps it: a signal to it is harmless)
            except ProcessLookupError:  # reaped since: as Popen, nothing to signal
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Spawner:
    """The launching side: the template process and the requests to it (one at a time)."""

    def __init__(self) -> None:
        self.env = _startup(dict(os.environ))
        self._lock = threading.Lock()
        self._proc = subprocess.Popen([sys.executable, "-m", "chordpub.command_template"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, start_new_session=True, text=True, bufsize=1)
        atexit.register(self.close)

    def usable(self) -> bool:
        return self._proc.poll() is None and _startup(dict(os.environ)) == self.env

    def _ask(self, request: dict) -> dict:
        with self._lock:
            self._proc.stdin.write(json.dumps(request) + "\n")  # type: ignore[union-attr]
            line = self._proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise OSError("the command template process exited")
        return json.loads(line)

    def spawn(self, argv: list[str], log: str, cwd: str, err: str | None = None,
              namespaces_of: int | None = None, module: str = "chordpub") -> ForkedProcess:
        """`argv`: the command line after `chordpub` (as `python -m chordpub` takes it), or after `module`
        (`python -m MODULE ARGV`: a script of this tree's that drives a Client, e.g. a test's helper); its
        output appended to the file `log`, its errors to `err` (None: to `log` too); in the network and
        mount namespaces of process `namespaces_of` when given (an emulated host's: root only)."""
        log, err = (None if p is None else os.path.abspath(p) for p in (log, err))  # (the template's cwd is its own)
        for path in {log, err or log}:  # there once this returns, as with Popen and a file opened for it
            with open(path, "ab"):
                pass
        reply = self._ask({"op": "spawn", "argv": argv, "log": log, "err": err, "cwd": cwd, "env": dict(os.environ),
                           "namespaces_of": namespaces_of, "module": module})
        if "error" in reply:
            raise OSError(reply["error"])
        return ForkedProcess(self, reply["pid"], [sys.executable, "-m", module, *argv])

    def status(self, pid: int) -> int | None:
        return self._ask({"op": "status", "pid": pid})["code"]

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()  # type: ignore[union-attr]
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


_shared: Spawner | None = None
_shared_lock = threading.Lock()


def shared() -> Spawner | None:
    """This process's template, started on first use; None where it cannot serve (its environment
    changed, or CHORDPUB_FORK=0 asks for exec'd commands)."""
    global _shared
    if os.environ.get("CHORDPUB_FORK", "1") == "0":
        return None
    with _shared_lock:
        if _shared is None or _shared._proc.poll() is not None:
            _shared = Spawner()
        return _shared if _shared.usable() else None


def start(argv: list[str], log: str | os.PathLike, err: str | os.PathLike | None = None,
          cwd: str | os.PathLike | None = None, module: str = "chordpub") -> subprocess.Popen | ForkedProcess:
    """`chordpub ARGV` (or `python -m MODULE ARGV`) in a session of its own, stdin on /dev/null, its output
    appended to `log` and its errors to `err` (None: to `log`): forked from this process's template where
    it can be, exec'd otherwise."""
    cwd = os.fspath(cwd) if cwd is not None else os.getcwd()
    if (spawner := shared()) is not None:
        return spawner.spawn(argv, os.fspath(log), cwd, None if err is None else os.fspath(err), module=module)
    with open(log, "ab") as out, open(err if err is not None else os.devnull, "ab") as errors:
        return subprocess.Popen([sys.executable, "-m", module, *argv], stdout=out,
                                stderr=subprocess.STDOUT if err is None else errors, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=cwd)
