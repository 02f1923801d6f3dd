"""One pub/sub experiment: place, start, wait for the ring, run, stop, gather one run directory.

Every process is the chordpub CLI started inside its host (topologies/hosts.py: a Mininet host, as
a user would type it in an xterm, or loopback for the local backend), writing its output to RUN/logs/
files, never to pipes that could fill. The order is the one that makes the measurement clean:
discovery nodes (the first alone, the rest joining it), then `ring check` polled until the ring is
consistent, then subscribers, then publishers for `seconds`, a short drain, and everything stopped
(SIGTERM, then SIGKILL) in `finally`, before Mininet itself is torn down. The run directory holds
manifest.json (topology, emulation, placement, versions, command), lookups/ and deliveries/ in JSON
Lines (the trace schema, source "mininet" or "live"), logs/; its manifest's "summary" is written
last, so a run directory that has one is complete.
`topologies` never imports `pubsub` or `dht`: it talks to them through the CLI.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dht.processes import interrupts_deferred, stop_processes
from topologies.hosts import BACKENDS, Hosts, graph_for, open_hosts
from topologies.placement import PLACEMENTS, Slot, load_dht_json, place
from topologies.run_summary import summarize, tail, topics_for
from traces.writer import make_run_dir

MODES = ("direct", "relay")


class ExperimentError(RuntimeError):
    """The experiment could not be run as asked (a process died, the ring never formed, bad options)."""


@dataclass
class ExperimentConfig:
    topo: str
    dht: int = 2
    pubs: int = 1
    subs: int = 1
    delay_ms: float | None = None  # every link; None keeps the spec's delays
    seconds: float = 10.0
    mode: str = "direct"
    placement: str = "roundrobin"
    seed: int | None = None
    out: Path = Path("runs")
    run: str | None = None
    dht_json: Path | None = None
    bits: int = 64
    rate: float = 10.0
    size: int = 100
    topics: int = 1
    topics_per_pub: int = 1  # each publisher process is one client on this many topics
    topics_per_sub: int = 1
    stabilize: float = 0.5
    emulation: str = "auto"
    ring_timeout: float = 60.0
    curve: Path | None = None  # keys directory: every process runs --curve
    backend: str = "mininet"  # or "local": every process on loopback (topologies/hosts.py)
    log_level: str = "INFO"  # every process's --log-level; their logs go to RUN/logs/

    def check(self) -> None:
        if self.backend not in BACKENDS:
            raise ExperimentError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.mode not in MODES:
            raise ExperimentError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.placement not in PLACEMENTS:
            raise ExperimentError(f"placement must be one of {', '.join(PLACEMENTS)}, got {self.placement!r}")
        if min(self.pubs, self.subs) < 0 or self.topics < 1 or self.seconds <= 0:
            raise ExperimentError("pubs and subs must be >= 0, topics >= 1 and seconds > 0")
        if self.backend == "local" and self.dht_json is not None:
            raise ExperimentError("a dht.json names Mininet hosts: it needs the mininet backend")
        for name in ("topics_per_pub", "topics_per_sub"):
            if not 1 <= getattr(self, name) <= self.topics:
                raise ExperimentError(f"--{name.replace('_', '-')} must be between 1 and --topics ({self.topics})")


@dataclass
class Started:
    slot: Slot
    proc: subprocess.Popen
    endpoint: str | None = None
    node_id: str | None = None  # as the node itself reported it


@dataclass
class Experiment:
    """Runs one ExperimentConfig; `run()` returns the summary and leaves RUN/ complete."""

    config: ExperimentConfig
    progress: Callable[[str], None] = lambda _msg: None
    started: list[Started] = field(default_factory=list)

    def run(self) -> dict:
        cfg = self.config
        cfg.check()
        entries = load_dht_json(cfg.dht_json, cfg.bits) if cfg.dht_json else None
        if cfg.backend == "mininet":
            graph_for(cfg.topo, cfg.delay_ms, cfg.seed)  # a bad spec is refused before anything is made
        name = cfg.run or time.strftime(f"{cfg.backend}-%Y%m%d-%H%M%S")
        run_dir = make_run_dir(cfg.out, name, {k: str(v) if isinstance(v, Path) else v
                                               for k, v in asdict(cfg).items()})
        logs = run_dir / "logs"
        logs.mkdir(exist_ok=True)
        t0 = time.monotonic()
        self.progress(f"starting {cfg.topo} on Mininet" if cfg.backend == "mininet" else "starting on loopback")
        with open_hosts(cfg.backend, cfg.topo, cfg.delay_ms, cfg.seed, logs, cfg.emulation) as net:
            slots = place(net.names, cfg.dht, cfg.pubs, cfg.subs, cfg.placement, cfg.seed, entries)
            if entries:
                self._check_addresses(net, entries)
            try:
                ring = self._start_ring(net, slots, logs, name)
                self._start_clients(net, slots, logs, name, run_dir)
                self._await_publishing(logs)
                self.progress(f"publishing for {cfg.seconds:g} s")
                self._wait(cfg.seconds)
                self._stop(role="pub")
                self._drain(run_dir / "deliveries")
            finally:
                self._stop()
            info = net.describe()
            emulation = net.emulation
            source = net.source
        summary = summarize(run_dir)
        summary.update({"run": name, "dir": str(run_dir), "ring": ring, "emulation": emulation,
                        "wall_s": round(time.monotonic() - t0, 2)})
        self._write_manifest(run_dir, info, emulation, source, summary)
        return summary

    # -- processes --------------------------------------------------------------------------------
    def _spawn(self, net: Hosts, slot: Slot, args: list[str], logs: Path, stdout: Path | None = None) -> Started:
        with open(logs / f"{slot.name}.log", "ab") as err, open(stdout or logs / f"{slot.name}.log", "ab") as out, \
                interrupts_deferred():
            proc = net.popen(slot.host, [sys.executable, "-m", "chordpub", *args, "--log-level", self.config.log_level],
                             stdout=out, stderr=err)
            started = Started(slot, proc)
            self.started.append(started)
        return started

    def _start_ring(self, net: Hosts, slots: list[Slot], logs: Path, run: str) -> dict:
        cfg = self.config
        nodes = [s for s in slots if s.role == "dht"]
        self.progress(f"starting {len(nodes)} discovery nodes")
        first: str | None = None
        for i, slot in enumerate(nodes):
            ip = net.ip(slot.host)
            args = ["node", "start", "--host", ip, "--port", str(net.node_port(slot.port)), "--bits", str(cfg.bits),
                    "--stabilize", str(cfg.stabilize), "--run", run, "--source", net.source,
                    "--ready-file", str(logs / f"{slot.name}.ready"),
                    "--trace", str(logs.parent / "lookups" / f"{slot.name}.jsonl")]
            if slot.node_id is not None:
                args += ["--id", str(slot.node_id)]
            if first:
                args += ["--join", first]
            started = self._spawn(net, slot, args + self._curve(), logs)
            if i == 0:
                first = self._await_ready(started, logs)
        for started in self.started[1:]:
            self._await_ready(started, logs)
        self.progress("waiting for the ring to be consistent")
        t0 = time.monotonic()
        deadline = t0 + cfg.ring_timeout
        report: dict = {}
        while time.monotonic() < deadline:
            self._check_alive()
            with interrupts_deferred():
                proc = net.popen(nodes[0].host, [sys.executable, "-m", "chordpub", "ring", "check", first, "--json",
                                                 "--expect", str(len(nodes)), *self._curve()],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                out, _ = proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            except BaseException:
                proc.kill()
                proc.wait()
                raise
            try:
                report = json.loads(out or b"{}")
            except json.JSONDecodeError:
                report = {}
            if report.get("consistent"):
                report["seconds"] = round(time.monotonic() - t0, 2)
                self.progress(f"ring of {report['nodes']} consistent after {report['seconds']:g} s")
                return report
            time.sleep(0.2)  # poll interval of a deadline loop
        raise ExperimentError(f"the ring was not consistent within {cfg.ring_timeout:g} s: "
                              f"{report.get('problems') or report}")

    def _await_ready(self, started: Started, logs: Path) -> str:
        ready = logs / f"{started.slot.name}.ready"
        deadline = time.monotonic() + 30
        while not ready.exists():
            if started.proc.poll() is not None or time.monotonic() > deadline:
                raise ExperimentError(f"{started.slot.name} on {started.slot.host} did not start: "
                                      + tail(logs / f"{started.slot.name}.log"))
            time.sleep(0.05)
        info = json.loads(ready.read_text())
        started.endpoint, started.node_id = info["endpoint"], str(info["id"])
        return started.endpoint

    def _start_clients(self, net: Hosts, slots: list[Slot], logs: Path, run: str, run_dir: Path) -> None:
        cfg = self.config
        nodes = [s for s in self.started if s.slot.role == "dht"]
        by_host = {s.slot.host: s.endpoint for s in nodes}
        clients = [s for s in slots if s.role in ("sub", "pub")]
        self.progress(f"starting {cfg.subs} subscribers and {cfg.pubs} publishers ({cfg.mode})")
        for role in ("sub", "pub"):  # subscribers first: the publishers' first messages find them
            for j, slot in enumerate(s for s in clients if s.role == role):
                via = by_host.get(slot.host) or nodes[j % len(nodes)].endpoint
                ip = net.ip(slot.host)
                per = cfg.topics_per_sub if role == "sub" else cfg.topics_per_pub
                topic_args = [a for t in topics_for(j, per, cfg.topics) for a in ("--topic", t)]
                if role == "sub":
                    args = ["sub", "--via", via, *topic_args, "--host", ip, "--mode", cfg.mode,
                            "--run", run, "--source", net.source, "--json",
                            "--seconds", str(cfg.seconds + cfg.ring_timeout + 60),
                            "--trace", str(run_dir / "deliveries" / f"{slot.name}.jsonl")]
                    self._spawn(net, slot, args + self._curve(), logs, stdout=logs / f"{slot.name}.json")
                else:
                    args = ["pub", "--via", via, *topic_args, "--host", ip, "--mode", cfg.mode,
                            "--count", "0", "--rate", str(cfg.rate), "--size", str(cfg.size),
                            "--trace", str(logs / f"{slot.name}.sent.jsonl")]
                    self._spawn(net, slot, args + self._curve(), logs)

    def _await_publishing(self, logs: Path, timeout: float = 60.0) -> None:
        """The publishing window starts when every publisher sends (its sent record has a line) and
        every subscriber of a published topic has received: a process's start in a loaded host, its
        registrations and its connections to the publishers can take seconds, longer than a short
        window. A subscriber still silent at the deadline is left to the summary (its deliveries: 0)."""
        cfg = self.config
        pubs = [s for s in self.started if s.slot.role == "pub"]
        subs = [s for s in self.started if s.slot.role == "sub"]
        published = {t for j in range(len(pubs)) for t in topics_for(j, cfg.topics_per_pub, cfg.topics)}
        waiting = [logs / f"{s.slot.name}.sent.jsonl" for s in pubs]
        waiting += [logs.parent / "deliveries" / f"{s.slot.name}.jsonl" for j, s in enumerate(subs)
                    if published & set(topics_for(j, cfg.topics_per_sub, cfg.topics))]
        def written(f: Path) -> bool:
            return f.exists() and f.stat().st_size > 0

        deadline = time.monotonic() + timeout
        while not all(map(written, waiting)):
            self._check_alive()
            if time.monotonic() > deadline:
                if not all(map(written, waiting[:len(pubs)])):
                    raise ExperimentError(f"the publishers did not start sending within {timeout:g} s")
                self.progress("a subscriber has received nothing yet; publishing anyway")
                return
            time.sleep(0.05)  # poll interval of a deadline loop

    def _curve(self) -> list[str]:
        return ["--curve", str(Path(self.config.curve).resolve())] if self.config.curve else []

    def _check_alive(self) -> None:
        for s in self.started:
            if s.proc.poll() is not None:
                raise ExperimentError(f"{s.slot.name} on {s.slot.host} exited with status {s.proc.returncode}")

    def _wait(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._check_alive()
            time.sleep(min(0.2, max(deadline - time.monotonic(), 0)))

    def _drain(self, deliveries: Path, quiet: float = 0.5, limit: float = 3.0) -> None:
        """After the publishers stop, wait until no delivery has been traced for `quiet` seconds."""
        end = time.monotonic() + limit
        last, since = -1, time.monotonic()
        while time.monotonic() < end:
            size = sum(f.stat().st_size for f in deliveries.glob("*.jsonl"))
            if size != last:
                last, since = size, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return
            time.sleep(0.05)

    def _stop(self, role: str | None = None, grace: float = 5.0) -> None:
        stop_processes([s.proc for s in self.started if role is None or s.slot.role == role], grace)

    # -- bookkeeping ------------------------------------------------------------------------------
    @staticmethod
    def _check_addresses(net: Hosts, entries: list) -> None:
        wrong = [f"{e.name}: {e.ip} is not {e.host}'s address {net.ip(e.host)}"
                 for e in entries if net.ip(e.host) != e.ip]
        if wrong:
            raise ExperimentError("dht.json does not match the network: " + "; ".join(wrong))

    def _write_manifest(self, run_dir: Path, info: dict, emulation: str, source: str, summary: dict) -> None:
        path = run_dir / "manifest.json"
        manifest = json.loads(path.read_text())
        manifest.update({
            "source": source,
            "command": sys.argv,
            "topology": {**info, "emulation": emulation},
            "placement": [{**s.slot.to_dict(), "endpoint": s.endpoint, "exit": s.proc.returncode,
                           **({"id": s.node_id} if s.node_id else {})} for s in self.started],
            "summary": summary,  # written last: a run directory with a summary is complete
        })
        if source == "mininet":
            manifest["versions"].update({"mininet": _mininet_version(), "kernel": platform.release()})
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(manifest, indent=2) + "\n")
        os.replace(tmp, path)


def _mininet_version() -> str:
    try:
        from mininet.net import VERSION
        return VERSION
    except ImportError:
        return "unknown"
