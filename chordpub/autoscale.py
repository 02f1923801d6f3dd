"""`chordpub ring autoscale`: look at the ring's load, decide (dht/scaling.py), and carry it out — start a
node with a command template, or ask one to leave gracefully — one change at a time.

A new node is started by a command template: a local process by default, or what the user gives
(`ssh {host} chordpub node start ...`, a container's run command). It joins through a node of the
ring with the id the decision chose; the change counts as done once the ring, walked by successor
pointers, holds it and its successor's load has been handed over (the hot node no longer owns the
new node's keys). A node asked to leave is done once the walk no longer meets it; a process this
scaler started is then reaped. Nodes it started keep serving when it exits: the ring's keys are on
them; their pids are in the decisions it printed.
"""

from __future__ import annotations

import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from chordpub.launcher import stop_processes
from dht.client import DhtClient, DhtError
from dht.load import report
from dht.ringcheck import evaluate, walk
from dht.scaling import Decision, Scaler
from dht.spawner import ForkedProcess, start

PLACEHOLDERS = ("python", "host", "port", "join", "id", "bits", "successors", "replicas")
DEFAULT_SPAWN = ("{python} -m chordpub node start --host {host} --port {port} --join {join} --id {id} "
                 "--bits {bits} --successors {successors} --replicas {replicas}")
SETTLE_TIMEOUT = 60.0  # seconds a change may take before it is called failed
REAP_GRACE = 10.0  # seconds a process asked to leave has to exit before it is killed
GIVE_UP = 60.0  # seconds of looks with no node answering before the scaler exits with an error


def check_template(template: str) -> list[str]:
    """The template's words; ValueError (one line) when it cannot start a node."""
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise ValueError(f"--spawn: {exc}") from None
    if not words:
        raise ValueError("--spawn is empty")
    if not any("{port}" in w for w in words):
        raise ValueError("--spawn must contain {port}: the scaler chooses each new node's port")
    try:
        for w in words:
            w.format(**{k: "" for k in PLACEHOLDERS})
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"--spawn: unknown or malformed placeholder {exc} (known: "
                         f"{', '.join('{' + k + '}' for k in PLACEHOLDERS)})") from None
    return words


def free_port(host: str) -> int:
    """A port free on `host` now, which must be an address of this machine."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, 0))
        except OSError as exc:
            raise ValueError(f"cannot pick a free port on {host} ({exc.strerror}): give --base-port "
                             "for hosts other than this machine's") from None
        return s.getsockname()[1]


@dataclass
class Spawner:
    """Starts nodes from `template` on `hosts` in turn; ports from `base_port` upwards, else free ones."""

    template: str
    hosts: list[str]
    log_dir: Path
    base_port: int = 0
    procs: dict[str, subprocess.Popen | ForkedProcess] = field(default_factory=dict)  # endpoint -> its process
    count: int = 0

    def start(self, join: str, new_id: int, ring: dict) -> tuple[str, subprocess.Popen | ForkedProcess]:
        host = self.hosts[self.count % len(self.hosts)]
        port = self.base_port + self.count if self.base_port else free_port(host)
        values = {"python": sys.executable, "host": host, "port": port, "join": join, "id": new_id,
                  "bits": ring["bits"], "successors": ring["r"], "replicas": ring["replicas"]}
        cmd = [w.format(**values) for w in check_template(self.template)]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"autoscaled-{self.count}-{port}.log"
        if cmd[:3] == [sys.executable, "-m", "chordpub"]:  # this interpreter's chordpub: forked warm where it can be
            proc = start(cmd[3:], log_path)
        else:
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        self.count += 1
        endpoint = f"{host}:{port}"
        self.procs[endpoint] = proc
        return endpoint, proc


class Autoscaler:
    """The loop: every `interval` seconds walk the ring, decide, carry out. `emit` gets one dict per look."""

    def __init__(self, client: DhtClient, endpoint: str, scaler: Scaler, spawner: Spawner,
                 emit: Callable[[dict], None]) -> None:
        self.client = client
        self.via = endpoint
        self.scaler = scaler
        self.spawner = spawner
        self.emit = emit
        self.previous: list[dict] | None = None
        self.known: list[str] = [endpoint]  # the nodes the last walk met: where to start when `via` is busy
        self.unanswered_since: float | None = None

    def run(self, interval: float, seconds: float | None) -> None:
        end = None if seconds is None else time.monotonic() + seconds
        while end is None or time.monotonic() < end:
            started = time.monotonic()
            self.look()
            time.sleep(max(0.0, interval - (time.monotonic() - started)))  # the pace of looks

    def look(self) -> dict:
        try:
            infos, problems = self._walk()
        except DhtError as exc:  # a busy or restarting ring: hold, and look again next time
            now = time.monotonic()
            self.unanswered_since = self.unanswered_since or now
            if now - self.unanswered_since > GIVE_UP:
                raise DhtError(f"{exc}, for {GIVE_UP:g} s") from exc
            out = {"time": round(time.time(), 3), **Decision("hold", str(exc), {"nodes": None}).to_dict(),
                   "problems": [str(exc)]}
            self.emit(out)
            return out
        self.unanswered_since = None
        self.known = [i["endpoint"] for i in infos]
        check = evaluate(infos, problems, int(infos[0].get("bits") or 64))
        if not check["consistent"]:  # mid-join or mid-leave: a node's keys may be counted twice or not at all
            decision = Decision("hold", f"the ring is settling: {check['problems'][0]}", {"nodes": len(infos)})
        elif self.previous is None:
            decision = Decision("hold", "first look: rates need two", {"nodes": len(infos)})
        else:
            decision = self.scaler.decide(report(self.previous, infos)["nodes"], time.monotonic())
        self.previous = infos
        out = {"time": round(time.time(), 3), **decision.to_dict(), "problems": check["problems"]}
        if decision.action == "grow":
            out.update(self._grow(decision, infos))
        elif decision.action == "shrink":
            out.update(self._shrink(decision))
        if decision.action != "hold":
            self.scaler.changed(time.monotonic())
            self.previous = None  # the next rates start after the change
        self.emit(out)
        return out

    def _walk(self) -> tuple[list[dict], list[str]]:
        """Walk from the node we know; if it went or is too busy to answer, from another node met before."""
        candidates = [self.via] + [e for e in self.known if e != self.via]
        for endpoint in candidates:
            try:
                infos, problems = walk(self.client, endpoint)
            except DhtError:
                continue
            self.via = endpoint
            return infos, problems
        raise DhtError(f"no node of the ring answers (tried {', '.join(candidates[:5])})")

    def _grow(self, decision: Decision, infos: list[dict]) -> dict:
        hot = next(i for i in infos if i["endpoint"] == decision.node)
        endpoint, proc = self.spawner.start(self.via, decision.new_id, hot)
        self.scaler.started.append(endpoint)

        def joined() -> bool:
            if proc.poll() is not None:
                raise DhtError(f"the new node exited with status {proc.returncode} (log in {self.spawner.log_dir})")
            ring, _ = walk(self.client, self.via, step_over=False)
            new = next((i for i in ring if i["endpoint"] == endpoint), None)
            after = next((i for i in ring if i["endpoint"] == decision.node), None)
            return (new is not None and after is not None and after["predecessor"] is not None
                    and after["predecessor"]["endpoint"] == endpoint)

        out = {"started": endpoint, "pid": proc.pid, **settle(joined, [proc])}
        if not out["ok"]:  # stopped by settle: not ours to take away later
            self.spawner.procs.pop(endpoint, None)
            self.scaler.started.remove(endpoint)
        return out

    def _shrink(self, decision: Decision) -> dict:
        self.client.leave(decision.node)
        proc = self.spawner.procs.pop(decision.node, None)
        if decision.node in self.scaler.started:  # bounded by --max however long it runs
            self.scaler.started.remove(decision.node)
        self.known = [e for e in self.known if e != decision.node]
        if self.via == decision.node:
            self.via = self.known[0]

        def gone() -> bool:
            ring, _ = walk(self.client, self.via, step_over=False)
            return all(i["endpoint"] != decision.node for i in ring) and (proc is None or proc.poll() is not None)

        out = settle(gone, [])
        if proc is not None and proc.poll() is None:
            stop_processes([proc], grace=REAP_GRACE)
        return out


def settle(done: Callable[[], bool], cleanup: list[subprocess.Popen | ForkedProcess],
           timeout: float = SETTLE_TIMEOUT) -> dict:
    """Poll `done` until it holds; a change that does not settle within `timeout` is reported failed (and
    the processes in `cleanup` are stopped). A DhtError from `done` is a look that failed (a node too busy
    to answer): it is the error only if the change never settles, or at once if a started node exited."""
    t0 = time.monotonic()
    error = None
    while True:
        try:
            if done():
                error = None  # a look that failed on the way is forgotten
                break
        except DhtError as exc:
            error = str(exc)
            if "exited" in error:
                break
        if time.monotonic() - t0 > timeout:
            error = error or f"not settled within {timeout:g} s"
            break
        time.sleep(0.1)  # polling a condition with a deadline
    if error is not None:
        stop_processes(cleanup, grace=3)
    return {"settled_s": round(time.monotonic() - t0, 3), "ok": error is None, "error": error}
