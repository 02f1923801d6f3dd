"""Proximity neighbour selection in the live node: real processes on loopback with --pns.

Loopback has no distances worth choosing by, so these tests hold the node to what PNS must never
break: fingers stay in their intervals (one of the K samples), lookups reach the true owner under
joins and kills, and `node info` shows the round trips the choice was made by. That the nearest
sample wins where delays differ is tested on Mininet (tests/mininet/test_pns.py).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys

from chordpub.launcher import wait_for
from dht.client import DhtClient
from dht.fingers import MAX_FINGER_GAP
from dht.ids import key_id, owner_of
from tests.conftest import PERIOD, one_error_line, run_cli

FINGER_RUNS = 8  # runs of fingers with one owner each, at most, in a ring of 12 (about log2 12 + 2, generously)


def lookups_find_true_owners(ring, count: int, seed: int, exact: bool = True) -> None:
    ids = sorted(n.id for n in ring.live)
    endpoints = [n.endpoint for n in ring.live]
    rng = random.Random(seed)
    with DhtClient(endpoints[0]) as client:
        for i in range(count):
            key = f"pns-{seed}-{i}"
            found = client.lookup(key, start=rng.choice(endpoints))
            assert found.ok, found.error
            if exact:
                assert found.owner.id == owner_of(ids, key_id(key)), key


def test_pns_fingers_stay_in_their_intervals_and_lookups_stay_correct_under_joins_and_kills(ring_factory,
                                                                                             tmp_path):
    ring = ring_factory(pns=4)
    ring.start(12)
    report, _ = ring.wait_consistent(timeout=40 * PERIOD, fingers=True)
    assert report["fingers_correct"] == 1.0  # each finger one of its interval's first 4 nodes
    shown: dict = {}

    def every_finger_timed() -> bool:
        # a call that timed out drops that peer's average until the next one answers: poll
        info = run_cli("node", "info", ring.nodes[0].endpoint, "--json")
        assert info.returncode == 0, info.stderr
        shown.update(json.loads(info.stdout))
        measured = [f["rtt_ms"] for f in shown["fingers"] if f is not None and f["endpoint"] != shown["endpoint"]]
        return bool(measured) and all(ms is not None and 0 < ms < 1000 for ms in measured)

    wait_for(every_finger_timed, timeout=20 * PERIOD, interval=PERIOD, what="a round trip shown for every finger")
    assert shown["pns"] == 4
    human = run_cli("node", "info", ring.nodes[0].endpoint)
    assert "PNS, 4 samples" in human.stdout and " ms)" in human.stdout
    lookups_find_true_owners(ring, 200, 1)
    keys = tmp_path / "keys.txt"
    keys.write_text("".join(f"batch-{i}\n" for i in range(20)))
    batch = run_cli("node", "lookups", ring.nodes[3].endpoint, "--keys", str(keys), "--json")
    assert batch.returncode == 0, batch.stderr
    body = json.loads(batch.stdout)
    ids = sorted(n.id for n in ring.nodes)
    assert body["lookups"] == 20 and body["failed"] == 0 and body["p50_ms"] > 0
    assert all(r["owner"] == owner_of(ids, key_id(r["key"])) for r in body["results"])
    one_error_line(run_cli("node", "lookups", ring.nodes[3].endpoint, "--keys", str(tmp_path / "none.txt")),
                   "--keys", "cannot read")
    # connections opened first, timing on a signal (Mininet's hosts take turns), the fastest of 3 kept
    warm, go = tmp_path / "warm", tmp_path / "go"
    turn = subprocess.Popen([sys.executable, "-m", "chordpub", "node", "lookups", ring.nodes[3].endpoint, "--keys",
                             str(keys), "--repeat", "3", "--ready-file", str(warm), "--go-file", str(go), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(warm.exists, 60, what="the untimed pass")
        assert turn.poll() is None  # waiting for its turn
        go.touch()
        out, err = turn.communicate(timeout=60)
    finally:
        turn.kill()
        turn.wait()
    assert turn.returncode == 0, err
    timed = json.loads(out)
    assert timed["lookups"] == 20 and timed["failed"] == 0
    assert all(r["owner"] == owner_of(ids, key_id(r["key"])) for r in timed["results"])

    rng = random.Random(5)
    for victim in rng.sample(ring.nodes[1:], 2):
        ring.kill(victim)
    ring.add()
    ring.add()
    # lookups succeed while the ring heals (dead fingers are backed away from), and find the true
    # owner once it has
    lookups_find_true_owners(ring, 100, 2, exact=False)
    # a node whose own links did not move learns of a change across the ring only at its quiet pace:
    # one run of fingers per refresh, refreshes up to MAX_FINGER_GAP periods apart (dht/fingers.py)
    report, _ = ring.wait_consistent(timeout=(FINGER_RUNS + 2) * MAX_FINGER_GAP * PERIOD, fingers=True)
    assert report["nodes"] == 12 and report["fingers_correct"] == 1.0
    lookups_find_true_owners(ring, 200, 3)
