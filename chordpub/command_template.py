"""The template that dht/spawner.py forks `chordpub` commands from (`python -m chordpub.command_template`):
it imports the modules of a node and of the clients' commands once, then forks a command for each `spawn`
request on its stdin and answers each `status` request with what it reaped (dht/spawner.py says why,
and what the protocol is)."""

from __future__ import annotations

import atexit
import json
import os
import shlex
import signal
import sys
import threading
import traceback
from collections import OrderedDict

import setproctitle

# a node's modules, and those of the commands that start as often: `pub`, `sub`, `ring`, and their Client
WARM = ("chordpub.cli", "chordpub.cli_node", "dht.host", "dht.node_config", "pubsub.relay", "chordpub.cli_pubsub",
        "chordpub.cli_sub", "chordpub.cli_ring", "pubsub.client", "pubsub.dispatch", "pubsub.directory",
        "chordpub.launcher", "dht.ringcheck")
MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__main__.py")  # sys.argv[0] of `python -m chordpub`
EXITED_KEPT = 4096  # exit codes kept for the asking (the oldest forgotten first; a pid forked again, at once)


def _enter_namespaces(pid: int) -> None:
    """Join the network and mount namespaces of process `pid` (an emulated host's shell), as `mnexec -a`
    does: the command then binds and connects on that host (setns(2): root, and one thread, as a fork is)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for kind in ("net", "mnt"):
        fd = os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY)
        try:
            if libc.setns(fd, 0) != 0:
                raise OSError(ctypes.get_errno(), f"setns into {kind} namespace of {pid}")
        finally:
            os.close(fd)


def _child(argv: list[str], log: str, err: str | None, cwd: str, env: dict[str, str],
           namespaces_of: int | None = None, module: str = "chordpub") -> None:
    """In the fork: become the command, as `python -m MODULE ARGV > LOG 2>ERR < /dev/null` in a new session
    (ERR: LOG when None), in the namespaces of process `namespaces_of` when given."""
    code = 1
    try:
        os.setsid()
        out, errors = (os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) for path in (log, err or log))
        nothing = os.open(os.devnull, os.O_RDONLY)
        os.dup2(nothing, 0)
        os.dup2(out, 1)
        os.dup2(errors, 2)
        for fd in {out, errors, nothing}:
            os.close(fd)
        if namespaces_of is not None:  # (what goes wrong here is in the log)
            _enter_namespaces(namespaces_of)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - (the old one may hold requests read ahead)
        # sys.stdout and sys.stderr stay: flushed before the fork, now on the log, and buffered as an
        # exec'd interpreter's would be on a file (stderr by the line; stdout as PYTHONUNBUFFERED says)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # `ps`, `pgrep -f` and /proc/PID/cmdline show the command line, as an exec'd process's (set before
        # the environment changes: the title takes the room of the process's first environment)
        setproctitle.setproctitle(shlex.join([sys.executable, "-m", module, *argv]))
        os.chdir(cwd)
        for gone in set(os.environ) - set(env):
            del os.environ[gone]
        os.environ.update(env)
        if module == "chordpub":
            sys.argv = [MAIN, *argv]  # (click names the program from it: "python -m chordpub", as when exec'd)
            from chordpub.cli import main

            main()
        else:
            import runpy

            sys.path.insert(0, cwd)  # (`python -m` finds a module of the directory it starts in)
            sys.argv = [module, *argv]  # (runpy puts the module's file first, as `python -m` does)
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - what an exec'd interpreter would print, then its status
        traceback.print_exc()
    try:  # the interpreter's own way out: other threads joined, exit handlers run, output flushed
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def serve() -> None:
    import importlib

    for name in WARM:
        importlib.import_module(name)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher stops us by closing our stdin
    codes: OrderedDict[int, int] = OrderedDict()  # pid -> exit code, for every command reaped
    for line in sys.stdin:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            codes[pid] = os.waitstatus_to_exitcode(status)
            if len(codes) > EXITED_KEPT:
                codes.popitem(last=False)
        request = json.loads(line)
        if request["op"] == "spawn":
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                pid = os.fork()
            except OSError as e:
                reply = {"error": f"fork: {e}"}
            else:
                if pid == 0:
                    _child(request["argv"], request["log"], request.get("err"), request["cwd"], request["env"],
                           request.get("namespaces_of"), request.get("module", "chordpub"))
                codes.pop(pid, None)  # a pid reused: what its last holder exited with is not this one's
                reply = {"pid": pid}
        else:
            reply = {"code": codes.get(request["pid"])}  # (asked as often as any thread of the launcher likes)
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
