"""Starting and stopping local node processes: `ring up`, the demo, benchmarks and tests.

Each node is a real `chordpub node start` process. It may bind port 0; it then writes its endpoint
to a ready file, which we poll with a deadline (no sleeps as synchronization, no pipes to fill).
Processes get their own session so that stopping them never signals us, and `stop` always
escalates from SIGTERM to SIGKILL, so nothing is left running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from dht.client import DhtClient
from dht.processes import interrupts_deferred, stop_processes, wait_for
from dht.ringcheck import check_ring
from dht.spawner import ForkedProcess, start
from dht.transport import SocketSetup

__all__ = ["LaunchError", "LocalRing", "NodeProcess", "await_ready", "interrupts_deferred", "node_command",
           "spawn_node", "stop_processes", "wait_for"]


class LaunchError(RuntimeError):
    pass


@dataclass
class NodeProcess:
    endpoint: str
    id: int
    proc: subprocess.Popen | ForkedProcess
    log_path: Path
    positions: list[dict] = field(default_factory=list)  # its ring positions ({"id", "endpoint"}), with --vnodes

    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def vnodes(self) -> int:
        return max(len(self.positions), 1)

    def to_dict(self) -> dict:
        return {"id": self.id, "endpoint": self.endpoint, "pid": self.proc.pid, "log": str(self.log_path),
                **({"positions": self.positions} if len(self.positions) > 1 else {})}


def node_command(host: str, port: int, join: str | None, ready_file: Path,
                 options: dict[str, object] | None = None, python: str | None = None) -> list[str]:
    cmd = [python or sys.executable, "-m", "chordpub", "node", "start", "--host", host, "--port", str(port),
           "--ready-file", str(ready_file)]
    if join:
        cmd += ["--join", join]
    for name, value in (options or {}).items():
        flag = f"--{name.replace('_', '-')}"
        if value is True:
            cmd.append(flag)  # a switch
        elif value is not None and value is not False:
            cmd += [flag, str(value)]
    return cmd


def spawn_node(workdir: Path, name: str, host: str = "127.0.0.1", port: int = 0, join: str | None = None,
               options: dict[str, object] | None = None, code: Path | None = None,
               python: str | None = None) -> subprocess.Popen | ForkedProcess:
    """A `chordpub node start` process, forked from the warm template (dht/spawner.py) where it can
    be; `code`: run the chordpub of that source tree instead of this one, with the interpreter `python`
    (benchmarks set one revision's ring beside another's), exec'd."""
    workdir.mkdir(parents=True, exist_ok=True)
    ready = workdir / f"{name}.ready"
    ready.unlink(missing_ok=True)
    if code is None and python is None:  # this tree's chordpub: forked warm where it can be (dht/spawner.py)
        return start(node_command(host, port, join, ready, options)[3:], workdir / f"{name}.log")
    log = open(workdir / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it from here
    try:
        env = None if code is None else {**os.environ, "PYTHONPATH": str(code)}
        return subprocess.Popen(node_command(host, port, join, ready, options, python), stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL, start_new_session=True, cwd=code, env=env)
    finally:
        log.close()


def await_ready(proc: subprocess.Popen | ForkedProcess, workdir: Path, name: str, timeout: float = 30.0) -> NodeProcess:
    ready = workdir / f"{name}.ready"
    log = workdir / f"{name}.log"

    def check() -> dict | None:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
            raise LaunchError(f"node {name} exited with status {proc.returncode}: " + " | ".join(tail))
        if ready.exists():
            try:
                return json.loads(ready.read_text())
            except json.JSONDecodeError:
                return None
        return None

    info = wait_for(check, timeout, what=f"node {name} ready")
    return NodeProcess(info["endpoint"], int(info["id"]), proc, log, info.get("positions") or [])


@dataclass
class LocalRing:
    """N node processes on one host, all joined through the first. A context manager."""

    workdir: Path
    host: str = "127.0.0.1"
    base_port: int = 0
    options: dict[str, object] = field(default_factory=dict)
    setup: SocketSetup | None = None  # for our own `check` calls (CURVE)
    code: Path | None = None  # the source tree the nodes run (default: this one; spawn_node) ...
    python: str | None = None  # ... and the interpreter (default: this one)
    nodes: list[NodeProcess] = field(default_factory=list)
    _count: int = 0

    def start(self, n: int, timeout: float = 60.0) -> list[NodeProcess]:
        """Start n nodes: the first alone, then the rest at once, each joining through the first."""
        if n < 1:
            raise LaunchError("a ring needs at least one node")
        new: list[NodeProcess] = []
        pending: list[tuple[subprocess.Popen, Path, str]] = []
        try:
            if not self.nodes:
                with interrupts_deferred():
                    pending.append(self.add_proc(join=None))
                new.append(await_ready(*pending[0], timeout=timeout))
                self.nodes.append(new[-1])
                pending.clear()
                n -= 1
            for _ in range(n):
                with interrupts_deferred():
                    pending.append(self.add_proc(join=self.nodes[0].endpoint))
            for proc, workdir, name in pending:
                new.append(await_ready(proc, workdir, name, timeout=timeout))
                self.nodes.append(new[-1])
        except BaseException:
            stop_processes([p for p, *_ in pending])
            raise
        return new

    def add_proc(self, join: str | None, **options: object) -> tuple[subprocess.Popen, Path, str]:
        name = f"node{self._count}"
        port = self.base_port + self._count if self.base_port else 0
        self._count += 1
        proc = spawn_node(self.workdir, name, self.host, port, join, {**self.options, **options}, code=self.code,
                          python=self.python)
        return proc, self.workdir, name

    def add(self, join: str | None = None, timeout: float = 30.0, **options: object) -> NodeProcess:
        """One more node, joining through `join` (default: the first node); `options` for it alone
        (e.g. id=N to place it on the ring)."""
        with interrupts_deferred():
            proc, workdir, name = self.add_proc(join or self.nodes[0].endpoint, **options)
        try:
            node = await_ready(proc, workdir, name, timeout=timeout)
        except BaseException:
            stop_processes([proc])
            raise
        self.nodes.append(node)
        return node

    @property
    def live(self) -> list[NodeProcess]:
        return [n for n in self.nodes if n.alive()]

    @property
    def positions(self) -> int:
        """Ring positions of the live nodes: what a walk of the ring meets."""
        return sum(n.vnodes for n in self.live)

    def kill(self, node: NodeProcess) -> None:
        node.proc.send_signal(signal.SIGKILL)
        node.proc.wait(timeout=5)

    def check(self, via: str | None = None, expected: int | None = None, timeout: float = 0.3,
              step_over: bool = False) -> dict:
        """`ring check` from `via`; a poll by default: a dead successor ends the walk (not consistent)."""
        with DhtClient(via or self.live[0].endpoint, timeout=timeout, retries=0, setup=self.setup) as client:
            return check_ring(client, expected=expected if expected is not None else self.positions,
                              step_over=step_over)

    def wait_consistent(self, timeout: float, fingers: bool = False) -> tuple[dict, float]:
        """Poll `ring check` until consistent (and, with fingers=True, every finger and successor
        list exact); return the last report and the seconds it took."""
        t0 = time.monotonic()
        last: dict = {}
        # one client for every poll: a fresh one would pay a TCP and ZeroMQ handshake with every node
        # on each walk, time that the heal time measured here would wrongly include
        # half a second a node: a live process of many positions on a loaded machine can take a
        # quarter, and a dead one refuses the connection at once
        client = DhtClient(self.live[0].endpoint if self.live else "127.0.0.1:1", timeout=0.5, retries=0,
                           setup=self.setup)

        def ok() -> bool:
            nonlocal last
            try:
                via = self.live[0].endpoint
                last = check_ring(client, start=via, expected=self.positions, step_over=False, split_wait=0.2)
            except Exception as exc:  # a node mid-start may not answer yet: keep polling
                last = {"consistent": False, "problems": [str(exc)]}
                return False
            exact = last["fingers_correct"] == 1.0 and last["successors_correct"] == 1.0
            return last["consistent"] and (not fingers or exact)

        try:
            wait_for(ok, timeout, interval=0.1, what="a consistent ring")  # a walk asks every node: not too often
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; last check: {last}") from None
        finally:
            client.close()
        return last, time.monotonic() - t0

    def write_file(self, path: Path) -> None:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps({"nodes": [n.to_dict() for n in self.nodes]}, indent=2) + "\n")
        os.replace(tmp, path)

    def stop(self) -> None:
        stop_processes([n.proc for n in self.nodes])

    def __enter__(self) -> LocalRing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
