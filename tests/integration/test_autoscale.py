"""`chordpub ring autoscale` on a live ring: a ring of 3 whose topics all hash into one node's arc grows,
each new node splitting the hottest arc at the median of its keys, until records per node are within
2× of the mean; no registration and no reliable message is lost while nodes join; when the topics go
it shrinks back to its minimum by graceful leaves. Real node processes, a real scaler process.

To see it fail: make `dht.scaling.split_point` return the arc's midpoint whatever the keys (the skewed
topics below sit in the first part of the arc, so each split takes fewer than half and the ring
reaches --max without coming under 2), or make `_shrink` kill the node instead of asking it to leave
(the node never says it left the ring: its keys were not handed on).
"""

from __future__ import annotations

import json
import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from chordpub import Client
from chordpub.launcher import wait_for
from dht.client import DhtClient, DhtError
from dht.ringcheck import evaluate, walk
from tests.conftest import PERIOD, one_error_line, run_cli
from tests.helpers.hot_topics import names_in_arc

TOPICS = 3000
RELIABLE = 4  # of the hot topics, carry a reliable stream while the ring grows
SPAWN = ("{python} -m chordpub node start --host {host} --port {port} --join {join} --id {id} --bits {bits} "
         f"--successors {{successors}} --replicas {{replicas}} --stabilize {PERIOD}")


def walk_any(dht: DhtClient, via: str | list[str]) -> list[dict]:
    """The nodes of a consistent ring walked from the first of `via` that answers (else []: mid-join, a
    node's keys are met twice or not at all; and when no node walked from answers in time)."""
    for endpoint in [via] if isinstance(via, str) else via:
        try:
            infos, problems = walk(dht, endpoint, step_over=False)
        except DhtError:
            continue  # left (the scaler may shrink any node), or too busy
        return infos if evaluate(infos, problems, 64)["consistent"] else []
    return []


def records(dht: DhtClient, via: str | list[str]) -> list[int]:
    """Records owned per node (walk_any)."""
    return [i["load"]["records"] for i in walk_any(dht, via)]


def lapsed(logs: Path) -> list[str]:
    """The nodes' log lines saying a lease ran out: a registration its client still renews, lost."""
    return [line for log in logs.rglob("*.log") for line in log.read_text(errors="replace").splitlines()
            if "ran out" in line]


def looks(path: Path) -> list[dict]:
    """The scaler's JSON lines so far (a last line still being written is not one yet)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{") and line.endswith("}")]


def test_autoscale_splits_the_hot_arc_loses_nothing_and_shrinks_back(ring_factory, procs, tmp_path):
    ring = ring_factory()
    ring.start(3)
    ring.wait_consistent(timeout=60)
    seed = ring.nodes[0].endpoint
    ids = sorted(n.id for n in ring.nodes)
    topics = names_in_arc(ids[-1], ids[0], TOPICS)  # the arc of the lowest id wraps past 0
    publisher, subscriber = Client(seed), Client(seed)  # the default heartbeat: 1 s, a 3 s lease
    started_pids: list[int] = []
    scaler = streamer = None
    stop = threading.Event()  # the publishing thread's end, whatever happens: a failing wait must not leave
    try:                      # it running (pytest would report, then never exit)
        got: dict[str, list[int]] = {t: [] for t in topics[:RELIABLE]}
        for t in topics[:RELIABLE]:
            subscriber.subscribe(t, reliable=True, callback=lambda m, t=t: got[t].append(int(m.payload)))
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda t: publisher.advertise(t, reliable=t in got), topics))
        dht = DhtClient(seed)
        assert sorted(records(dht, seed)) == [0, 0, TOPICS]

        sent = {t: 0 for t in got}

        def stream() -> None:
            while not stop.is_set():
                for t in got:
                    sent[t] += 1
                    publisher.publish(t, str(sent[t]))
                stop.wait(0.01)  # a steady stream, not a flood

        streamer = threading.Thread(target=stream, daemon=True)
        streamer.start()
        scaler = procs("scaler", "ring", "autoscale", seed, "--high", "1200", "--low", "100", "--min", "3",
                       "--max", "8", "--patience", "2", "--interval", "0.5", "--cooldown", "1", "--spawn",
                       SPAWN, "--json", "--log-dir", str(tmp_path / "spawned"))
        log_path = tmp_path / "scaler.log"

        def balanced() -> bool:
            started_pids[:] = [x["pid"] for x in looks(log_path) if x["action"] == "grow" and x.get("pid")]
            counts = records(dht, seed)
            # the scaler logs a grow once its node has joined: every node beyond 3 is in the log; and
            # every registration at its owner (a hand-over in flight holds some back for a moment)
            return (len(counts) == 3 + len(started_pids) > 3 and sum(counts) == TOPICS
                    and max(counts) < 2 * TOPICS / len(counts))

        wait_for(balanced, 120, interval=0.2, what="records per node within 2x of the mean")
        assert not lapsed(tmp_path), "registrations lost while nodes joined (their leases ran out)"
        grows = [x for x in looks(log_path) if x["action"] == "grow"]
        assert all(x["ok"] for x in grows), grows
        assert len(grows) <= 5  # --max 8 from 3: a bounded number of steps
        assert all(x["max_over_mean"] is not None and x["max"] > 1200 for x in grows)  # the figures that made it
        stop.set()
        streamer.join()
        wait_for(lambda: all(got[t] == list(range(1, sent[t] + 1)) for t in got), 30,
                 what="every reliable message, once, in order")
        assert sum(sent.values()) > 100

        publisher.close()
        subscriber.close()

        def members() -> list[str]:  # the ring's nodes ever: the shrink may take an original one
            return [n.endpoint for n in ring.nodes] + [x["started"] for x in grows]

        def shrunk() -> bool:  # the scaler logs a leave once the walk no longer meets the node
            done = [x for x in looks(log_path) if x["action"] == "shrink"]
            return len(done) == len(grows) and records(dht, members()) == [0, 0, 0]

        wait_for(shrunk, 120, interval=0.2, what="the ring shrunk back to 3 nodes")
        shrinks = [x for x in looks(log_path) if x["action"] == "shrink"]
        assert all(x["ok"] for x in shrinks), shrinks
        # the least-loaded node of its look left (one of ours among equals: the unit tests; here the
        # topics may still be going when a look finds the mean below --low)
        assert all(x["load"] == x["min"] < 100 for x in shrinks), shrinks
        left = {x["node"] for x in shrinks}
        assert len(left) == len(grows) and not left & {i["endpoint"] for i in walk_any(dht, members())}
        logs = "\n".join(p.read_text(errors="replace") for p in tmp_path.rglob("*.log"))
        assert all(f"{node} left the ring" in logs for node in left), \
            "a node taken out without leaving gracefully: its keys were not handed on"
        dht.close()
    finally:
        stop.set()
        if streamer is not None:
            streamer.join(timeout=10)
        publisher.close()
        subscriber.close()
        if scaler is not None:
            scaler.send_signal(signal.SIGINT)
        grown = [x["pid"] for x in looks(tmp_path / "scaler.log") if x["action"] == "grow"]
        for pid in set(started_pids) | set(grown):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_autoscale_refuses_bad_input_in_one_line(tmp_path):
    for args, words in (
        (["--high", "10", "--low", "20"], ("thresholds out of order",)),
        (["--high", "10", "--spawn", "chordpub node start --join {join}"], ("{port}",)),
        (["--high", "10", "--spawn", "x --port {port} {nope}"], ("placeholder",)),
        (["--high", "10", "--min", "5", "--max", "2"], ("--min",)),
        (["--high", "10", "--metric", "weight"], ("--metric",)),
    ):
        proc = run_cli("ring", "autoscale", "127.0.0.1:1", *args)
        one_error_line(proc, *words)
        assert proc.returncode == 2


def test_the_scaler_holds_while_no_node_answers_and_goes_on_when_they_do(ring_factory, procs, tmp_path):
    """A node too busy to answer (here: stopped) is not the end of the scaler: its looks say so and
    hold, and the next look that gets an answer carries on. Take the except in `Autoscaler.look` away
    and the scaler exits at the first silent look."""
    ring = ring_factory()
    ring.start(2)
    ring.wait_consistent(timeout=60)
    scaler = procs("scaler", "ring", "autoscale", ring.nodes[0].endpoint, "--high", "100000", "--interval", "0.2",
                   "--json")
    log = tmp_path / "scaler.log"

    def seen() -> list[dict]:
        return looks(log) if log.exists() else []

    wait_for(lambda: any(x["nodes"] == 2 for x in seen()), 30, what="a first look at both nodes")
    for node in ring.nodes:
        os.kill(node.proc.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: any(x["nodes"] is None and "answer" in x["reason"] for x in seen()), 60,
                 what="a look that no node answered")
        assert scaler.poll() is None, log.read_text()[-2000:]
    finally:
        for node in ring.nodes:
            os.kill(node.proc.pid, signal.SIGCONT)
    silent = max(i for i, x in enumerate(seen()) if x["nodes"] is None)
    wait_for(lambda: any(x["nodes"] == 2 for x in seen()[silent + 1:]), 60, what="looks at both nodes again")
    assert scaler.poll() is None
