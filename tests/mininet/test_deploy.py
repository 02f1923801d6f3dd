"""docs/deploy.md's recipe on separate hosts: every process binds 0.0.0.0 in its own network namespace
and tells the others its host's address (given with --advertise, or found by itself)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chordpub.launcher import stop_processes, wait_for
from dht.ids import key_id
from topologies.graphs import build
from topologies.mininet_net import mininet_network

pytestmark = pytest.mark.mininet
PORT = 5555


def chordpub(host, *args: str, log: Path) -> subprocess.Popen:  # noqa: ANN001 - a mininet Host
    with log.open("ab") as out:
        return host.popen([sys.executable, "-m", "chordpub", *args], stdout=out, stderr=subprocess.STDOUT,
                          stdin=subprocess.DEVNULL)


def test_a_ring_spread_over_four_hosts_bound_to_every_interface(clean_host, tmp_path):
    started: list[subprocess.Popen] = []
    with mininet_network(build("single,6,delay=0")) as net:
        hosts = net.hosts()
        ring_hosts, sub_host, pub_host = hosts[:4], hosts[4], hosts[5]
        seed = f"{ring_hosts[0].IP()}:{PORT}"
        try:
            for i, host in enumerate(ring_hosts):
                # two nodes say their address, two find it (the host's only interface besides lo)
                told = ["--advertise", host.IP()] if i % 2 == 0 else []
                join = ["--join", seed] if i else []
                started.append(chordpub(host, "node", "start", "--bind", "0.0.0.0", "--port", str(PORT), *told,
                                        *join, "--stabilize", "0.3", "--ready-file", str(tmp_path / f"n{i}.ready"),
                                        log=tmp_path / f"n{i}.log"))
                ready = tmp_path / f"n{i}.ready"
                wait_for(lambda r=ready: r.exists() and r.read_text(), 30, what=f"node {i} ready")
                node = json.loads(ready.read_text())
                assert node["endpoint"] == f"{host.IP()}:{PORT}" and node["id"] == key_id(node["endpoint"])

            def consistent() -> dict | None:
                out = sub_host.popen([sys.executable, "-m", "chordpub", "ring", "check", seed, "--json",
                                      "--expect", "4"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL)
                text, _ = out.communicate(timeout=60)
                report = json.loads(text or "{}")
                return report if report.get("consistent") else None

            report = wait_for(consistent, 60, interval=0.5, what="a consistent ring over four hosts")
            assert {m["bind"] for m in report["members"]} == {f"0.0.0.0:{PORT}"}

            result = tmp_path / "sub.json"
            with result.open("w") as out:
                sub = sub_host.popen([sys.executable, "-m", "chordpub", "sub", "--via", seed, "--topic", "sensors",
                                      "--bind", "0.0.0.0", "--count", "20", "--seconds", "60", "--json"],
                                     stdout=out, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
            started.append(sub)
            started.append(chordpub(pub_host, "pub", "--via", f"{ring_hosts[1].IP()}:{PORT}", "--topic", "sensors",
                                    "--bind", "0.0.0.0", "--advertise", pub_host.IP(), "--count", "100000",
                                    "--rate", "20", log=tmp_path / "pub.log"))
            t0 = time.monotonic()
            sub.wait(timeout=90)
            assert sub.returncode == 0, sub.stderr.read().decode()[-2000:]
            summary = json.loads(result.read_text())
            assert summary["received"] >= 20 and summary["publishers"] == 1, summary
            print(f"20 messages across hosts after {time.monotonic() - t0:.1f}s")
        finally:
            stop_processes(started, grace=5)
