"""Lookup latency on Mininet with and without proximity neighbour selection: same ring, same keys.

One discovery node on every host of the network (its id is key_id("ip:port"), so a second ring on
the same hosts has the same ids), started with `--pns K`; once `ring check` finds every finger in
its interval and every PNS finger measured, every host looks up the same keys at its own node with
`chordpub node lookups` (iterative lookups: the client asks each node on the path itself). Then the
ring is stopped, so that the next one (another K) starts on the same quiet network.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from topologies.hosts import MininetHosts

NODE_PORT = 5555


MEASURES = 3  # times the lookups are run at most, until the fingers hold still across them


class ProximityRunError(RuntimeError):
    """A ring that did not start or settle, or lookups that did not run; the text says which."""


def run_ring_lookups(net: MininetHosts, pns: int, keys_file: Path, logs: Path, stabilize: float = 1.0,
                     successors: int = 8, timeout: float = 120.0,
                     progress: Callable[[str], None] = lambda _m: None, prs: bool = False, repeat: int = 1,
                     settled: Callable[[list[dict], list[list[int | None]]], bool] | None = None) -> dict:
    """Start the ring with --pns `pns` (and --prs), wait until it has settled, look up every key from
    every host (each timed `repeat` times, the fastest kept: `node lookups --repeat`). `settled(nodes,
    finger ids)`, if given, must hold too before the lookups (a choice the caller waits for: round trips
    measured on a loaded machine converge to the links' only as samples accumulate).

    Returns {"nodes": [{"host", "endpoint", "id"}], "lookups": [{"host", "key", "ok", "owner", "hops",
    "ms"}], "settle_s"}."""
    logs.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    nodes: list[dict] = []
    tag = f"pns{pns}" + ("-prs" if prs else "")
    try:
        first = None
        for host in net.names:
            ready = logs / f"{tag}-{host}.ready"
            ready.unlink(missing_ok=True)
            args = ["node", "start", "--host", net.ip(host), "--port", str(NODE_PORT), "--stabilize", str(stabilize),
                    "--pns", str(pns), "--successors", str(successors), "--no-relay", "--ready-file", str(ready),
                    "--log-level", "WARNING"] + (["--prs"] if prs else [])
            if first:
                args += ["--join", first]
            with open(logs / f"{tag}-{host}.log", "ab") as log:
                procs.append(net.popen(host, [sys.executable, "-m", "chordpub", *args], stdout=log, stderr=log))
            info = _await_ready(procs[-1], ready, logs / f"{tag}-{host}.log")
            nodes.append({"host": host, "endpoint": info["endpoint"], "id": int(info["id"])})
            first = first or info["endpoint"]
        progress(f"{tag}: {len(nodes)} nodes started; waiting for the fingers to settle")
        t0 = time.monotonic()
        fingers = _await_settled(net, nodes, pns, t0 + timeout, settled)
        settle_s = time.monotonic() - t0
        progress(f"{tag}: settled after {settle_s:.1f} s; looking up")
        for _attempt in range(MEASURES):
            lookups = _lookups(net, nodes, keys_file, logs, tag, timeout, repeat)
            after = _await_settled(net, nodes, pns, time.monotonic() + timeout, settled)
            if after == fingers:
                break
            # a choice moved while the lookups ran (round trips within PNS's margin): they routed over
            # two tables, neither the one reported; time them again on the one that holds now
            progress(f"{tag}: a finger moved during the lookups; looking up again")
            fingers = after
        return {"nodes": nodes, "lookups": lookups, "settle_s": round(settle_s, 2), "fingers": fingers}
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)


def _await_ready(proc: subprocess.Popen, ready: Path, log: Path) -> dict:
    deadline = time.monotonic() + 30
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            text = log.read_text(errors="replace")[-400:] if log.exists() else ""
            raise ProximityRunError(f"a node did not start: {text.strip()}")
        time.sleep(0.05)  # poll interval of a deadline loop
    return json.loads(ready.read_text())


RING_STATE = """
import json, sys
from dht.client import DhtClient
from dht.ringcheck import check_ring
endpoints = sys.argv[1:]
with DhtClient(endpoints[0], timeout=2.0) as client:
    report = check_ring(client, expected=len(endpoints))
    infos = [client.info(e) for e in endpoints] if report["consistent"] else []
print(json.dumps({"report": report, "fingers": [i["fingers"] for i in infos]}))
"""


def _ring_state(net: MininetHosts, nodes: list[dict]) -> dict:
    """`ring check` and every node's fingers, asked from the first host by one process."""
    proc = net.popen(nodes[0]["host"], [sys.executable, "-c", RING_STATE, *(n["endpoint"] for n in nodes)],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    try:
        return json.loads(out or b"{}")
    except json.JSONDecodeError:
        return {}


def _await_settled(net: MininetHosts, nodes: list[dict], pns: int, deadline: float,
                   settled: Callable[[list[dict], list[list[int | None]]], bool] | None = None
                   ) -> list[list[int | None]]:
    """A consistent ring whose every finger is in its interval and, under PNS, chosen on a measured
    round trip (and `settled` holds); then the same state once more a round later (choices no longer
    moving). Returns every node's finger ids, in `nodes` order."""
    previous = None
    report: dict = {}
    while time.monotonic() < deadline:
        state = _ring_state(net, nodes)
        report = state.get("report") or {}
        if report.get("consistent") and report.get("fingers_correct") == 1.0:
            fingers = state["fingers"]
            measured = all(x is None or x["endpoint"] == n["endpoint"] or x.get("rtt_ms") is not None
                           for f, n in zip(fingers, nodes, strict=True) for x in f)
            if pns < 2 or measured:
                ids = [[None if x is None else x["id"] for x in f] for f in fingers]
                if settled is None or settled(nodes, ids):
                    if ids == previous:
                        return ids
                    previous = ids
                else:
                    previous = None
                    report = {"problems": ["the fingers the caller waits for are not chosen yet"]}
        time.sleep(0.5)  # poll interval of a deadline loop
    raise ProximityRunError(f"the ring did not settle: {report.get('problems') or report}")


def _lookups(net: MininetHosts, nodes: list[dict], keys_file: Path, logs: Path, tag: str,
             timeout: float, repeat: int = 1) -> list[dict]:
    """Every key looked up from every host. The hosts' lookup processes start together and open their
    connections (an untimed pass), then take turns timing theirs: timed at once, each would be timed
    while the others start and look up (a Python process's start-up is CPU the nodes then lack), and
    the latencies would measure this machine's load rather than the links."""
    procs: dict[str, subprocess.Popen] = {}
    turns = {n["host"]: (logs / f"{tag}-{n['host']}.warm", logs / f"{tag}-{n['host']}.go") for n in nodes}
    try:
        for n in nodes:
            warm, go = turns[n["host"]]
            warm.unlink(missing_ok=True)
            go.unlink(missing_ok=True)
            with open(logs / f"{tag}-{n['host']}.lookups.json", "wb") as f, \
                    open(logs / f"{tag}-{n['host']}.log", "ab") as err:
                procs[n["host"]] = net.popen(n["host"], [
                    sys.executable, "-m", "chordpub", "node", "lookups", n["endpoint"], "--keys", str(keys_file),
                    "--repeat", str(repeat), "--ready-file", str(warm), "--go-file", str(go), "--json"],
                    stdout=f, stderr=err)
        deadline = time.monotonic() + timeout
        while not all(warm.exists() or procs[h].poll() is not None for h, (warm, _go) in turns.items()):
            if time.monotonic() > deadline:
                raise ProximityRunError(f"lookup processes not connected within {timeout:g} s")
            time.sleep(0.05)  # polling files with a deadline
        rows = []
        for n in nodes:
            host, proc = n["host"], procs[n["host"]]
            turns[host][1].touch()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                raise ProximityRunError(f"lookups from {host} did not finish within {timeout:g} s") from None
            try:
                body = json.loads((logs / f"{tag}-{host}.lookups.json").read_text())
            except (OSError, json.JSONDecodeError):
                raise ProximityRunError(f"lookups from {host} failed (exit {proc.returncode})") from None
            rows += [{"host": host, "origin": n["id"], **r} for r in body["results"]]
        return rows
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5)
