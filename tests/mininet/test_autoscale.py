"""`chordpub ring autoscale` on Mininet, starting nodes on other hosts through its --spawn template: a
ring of 3 on one switch, whose 3000 topics all hash into one node's arc, grows onto the hosts of a
second switch until records per node are within 2× of the mean, loses no registration and no reliable
message meanwhile, and shrinks back to its 3 nodes by graceful leaves when the topics go.

The template runs the node in the chosen host's network namespace (`mnexec -a PID`, as `ssh HOST`
would on real machines), so each new node binds and advertises that host's address. To see it fail:
make the template start every node on the scaler's own host (drop `mnexec -a ...`): the nodes cannot
bind the other hosts' addresses, every grow is "ok": false and the ring never comes under 2.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from dht.ids import key_id
from tests.helpers.hot_topics import names_in_arc
from tests.integration.test_autoscale import lapsed
from topologies.partition import PORT, partitioned_ring

pytestmark = pytest.mark.mininet
STABILIZE = 0.25
TOPICS = 3000
STREAM = 200  # reliable messages published while the ring grows


def looks(path: Path) -> list[dict]:
    """The scaler's JSON lines so far (a last line still being written is not one yet)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{") and line.endswith("}")]


def wait_log(path: Path, done, timeout: float, what: str) -> list[dict]:  # noqa: ANN001 - looks -> bool
    deadline = time.monotonic() + timeout
    while not done(seen := looks(path)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout:g}s: {seen[-3:]}")
        time.sleep(0.2)  # polling the scaler's log with a deadline
    return seen


def test_autoscale_spawns_on_other_hosts_balances_and_shrinks_back(clean_host, tmp_path):
    spawned: list[int] = []
    with partitioned_ring(3, 5, tmp_path, STABILIZE) as ring:
        try:
            ring_hosts, spare = ring.side_a, ring.side_b
            for i, host in enumerate(ring_hosts):
                ring.start_node(host, PORT, ring.endpoint(ring_hosts[0]) if i else None)
            assert ring.wait_ring(ring_hosts[0], 3)["seconds"] is not None
            ids = sorted(key_id(ring.endpoint(h)) for h in ring_hosts)
            names = tmp_path / "names.txt"
            topics = names_in_arc(ids[-1], ids[0], TOPICS)
            names.write_text("\n".join(topics) + "\n")
            ready, done = tmp_path / "ready", tmp_path / "done"
            first = ring_hosts[0]
            ring.popen(first, "-m", "tests.helpers.hot_topics", "--via", ring.endpoint(first), "--names", str(names),
                       "--ready", str(ready), "--done", str(done), "--host", first.IP(), log="topics.log")
            deadline = time.monotonic() + 120
            while not ready.exists():
                assert time.monotonic() < deadline, (tmp_path / "topics.log").read_text()[-2000:]
                time.sleep(0.1)  # polling a file with a deadline

            # a reliable stream on one of the hot topics, across the ring's hosts, while it grows
            out = tmp_path / "follow.json"
            follow = ring.popen(ring_hosts[1], "-m", "tests.helpers.follow", "--via", ring.endpoint(ring_hosts[1]),
                                "--topic", topics[0], "--count", str(STREAM), "--seconds", "120", "--out", str(out),
                                "--host", ring_hosts[1].IP(), "--heartbeat", "1.0",  # the Client's default, like
                                log="follow.log")  # the topics': a lease of 1.5 s lapsed in a loaded suite
            ring.popen(ring_hosts[2], "-m", "chordpub", "pub", "--via", ring.endpoint(ring_hosts[2]), "--topic",
                       topics[0], "--host", ring_hosts[2].IP(), "--reliable", "--count", str(STREAM), "--rate", "20",
                       "--linger", "60", log="pub.log")

            pids = tmp_path / "pids"
            pids.mkdir()
            for host in spare:
                (pids / f"{host.IP()}.pid").write_text(str(host.pid))
            spawn = (f"sh -c 'exec mnexec -a \"$(cat {pids}/{{host}}.pid)\" {{python}} -m chordpub node start "
                     f"--host {{host}} --port {{port}} --join {{join}} --id {{id}} --bits {{bits}} "
                     f"--stabilize {STABILIZE}'")
            log = tmp_path / "scaler.log"
            ring.popen(first, "-m", "chordpub", "ring", "autoscale", ring.endpoint(first), "--high", "1200", "--low",
                       "100", "--min", "3", "--max", "8", "--patience", "2", "--interval", "0.5", "--cooldown", "1",
                       "--hosts", ",".join(h.IP() for h in spare), "--base-port", str(PORT + 100), "--spawn", spawn,
                       "--json", "--log-dir", str(tmp_path / "spawned"), log="scaler.log")

            def balanced(seen: list[dict]) -> bool:
                grows = [x for x in seen if x["action"] == "grow"]
                spawned[:] = [x["pid"] for x in grows]
                last = seen[-1] if seen else {}
                return (last.get("max_over_mean") is not None and last["nodes"] == 3 + len(grows) > 3
                        and last["max_over_mean"] < 2)

            seen = wait_log(log, balanced, 180, "records per node within 2x of the mean")
            grows = [x for x in seen if x["action"] == "grow"]
            assert all(x["ok"] for x in grows) and len(grows) <= 5, grows
            assert {x["started"].rsplit(":", 1)[0] for x in grows} <= {h.IP() for h in spare}
            assert not lapsed(tmp_path), "registrations lost while nodes joined (their leases ran out)"
            # every registration at its owner, as the scaler counts them (once the last hand-over is done)
            wait_log(log, lambda seen: round((seen[-1].get("mean") or 0) * (seen[-1]["nodes"] or 0)) == TOPICS, 30,
                     "all 3000 records owned")

            follow.wait(timeout=150)
            got = json.loads(out.read_text())
            assert follow.returncode == 0, got["received"]
            (seqs,) = got["seqs"].values()
            assert seqs == list(range(1, STREAM + 1))

            done.write_text("")  # the topics go: the ring shrinks back

            def shrunk(seen: list[dict]) -> bool:
                shrinks = [x for x in seen if x["action"] == "shrink"]
                return len(shrinks) == len(grows) and seen[-1]["nodes"] == 3

            seen = wait_log(log, shrunk, 120, "the ring back at 3 nodes")
            assert all(x["ok"] for x in seen if x["action"] == "shrink")
        finally:
            spawned += [x["pid"] for x in looks(tmp_path / "scaler.log") if x["action"] == "grow"]
            for pid in set(spawned):  # the nodes it started that did not leave
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
