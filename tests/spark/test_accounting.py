"""One accounting for expected / delivered / recovered / lost: `sub --json`, the demo's table and
`chordpub analyze` give the same figures for one run with a known slow-joiner loss and a known
repaired gap (docs/contracts.md, Accounting). The analysis is `chordpub analyze`'s own job
(`traces.spark.analyze`, whose result `analyze --json` prints as it is) on the suite's Spark session:
a JVM of its own cost this test 15 CPU-s; tests/spark/test_analyze.py runs the command itself."""

from __future__ import annotations

import json
import signal
import time

import pytest

from chordpub import Client
from chordpub.demo_pubsub import topic_figures
from chordpub.launcher import wait_for
from dht.client import DhtClient
from pubsub.directory import topic_info
from tests.conftest import jsonl, start_module_ring
from tests.helpers.lossy import LossyLink
from traces.accounting import pair_figures
from traces.spark import analyze

pytestmark = pytest.mark.spark

TOPIC = "accounted"
TOTAL = 100
UNCONNECTED = set(range(1, 6))  # sent after the subscribers subscribed, before they could receive
GAP = {40, 41, 42}  # lost on the way, repaired from history by the reliable subscriber


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from start_module_ring(tmp_path_factory, "accounting-ring", 3)


def test_pair_figures_owe_from_the_first_owed_seq():
    rows = [{"seq": s, "recovered": s == 7, "first_owed": 5} for s in (5, 7, 7, 9)]
    assert pair_figures(rows) == {"expected": 5, "delivered": 3, "lost": 2, "recovered": 1, "duplicates": 1}
    assert pair_figures(rows, last_sent=12)["lost"] == 5  # the tail the publisher's trace shows
    older = [{"seq": s, "recovered": False} for s in (3, 4, 6)]  # a trace without first_owed
    assert pair_figures(older) == {"expected": 4, "delivered": 3, "lost": 1, "recovered": 0, "duplicates": 0}


def test_sub_demo_and_analyze_agree_on_a_known_loss(ring, procs, tmp_path, spark):
    run = tmp_path / "run"
    (run / "deliveries").mkdir(parents=True)
    (run / "sent").mkdir()
    via = ring.nodes[0].endpoint
    subs = {name: procs(name, "sub", "--via", via, "--topic", TOPIC, *flags, "--seconds", "120", "--json",
                        "--run", "acct", "--trace", str(run / "deliveries" / f"{name}.jsonl"))
            for name, flags in (("best-effort", ()), ("reliable", ("--reliable",)))}
    late = None
    with DhtClient(via) as dht, Client(via, heartbeat=0.5) as publisher:
        wait_for(lambda: topic_info(dht, TOPIC)["subscribers"] >= 2, 30, what="subscribers registered")
        publisher.advertise("warm-up")  # binds the PUB socket, so that the link can sit in front of it
        link = LossyLink(publisher.publishing.endpoint, TOPIC, drop_run=UNCONNECTED | GAP, rate=0.0)
        try:
            publisher.publishing.endpoint = link.endpoint  # subscribers connect through the link
            publisher.advertise(TOPIC, reliable=True)
            with open(run / "sent" / "pub.jsonl", "w") as sent:
                for seq in range(1, TOTAL + 1):
                    assert publisher.publish(TOPIC, str(seq)) == seq
                    sent.write(json.dumps({"topic": TOPIC, "publisher": publisher.id, "seq": seq,
                                           "sent_ns": time.time_ns()}) + "\n")
                    if seq == TOTAL // 2:  # a late joiner: owed only what is sent after it joined
                        late = procs("late", "sub", "--via", via, "--topic", TOPIC, "--seconds", "120", "--json",
                                     "--run", "acct", "--trace", str(run / "deliveries" / "late.jsonl"))
                        wait_for(lambda: topic_info(dht, TOPIC)["subscribers"] >= 3, 30,
                                 what="the late subscriber registered")
                    time.sleep(0.005)  # pacing the publisher (a rate), not synchronization

            def seen(name: str) -> int:
                return max((r["seq"] for r in jsonl(run / "deliveries" / f"{name}.jsonl")), default=0)

            wait_for(lambda: all(seen(n) == TOTAL for n in ("best-effort", "reliable", "late")), 30,
                     what="every subscriber at the last message")
        finally:
            link.close()
    summaries = {}
    for name, p in {**subs, "late": late}.items():
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
        summaries[name] = json.loads((tmp_path / f"{name}.log").read_text().splitlines()[-1])
        assert p.returncode == 0, (name, summaries[name])

    # the known figures
    assert (summaries["best-effort"]["lost"], summaries["best-effort"]["recovered"]) == (8, 0)
    assert (summaries["reliable"]["lost"], summaries["reliable"]["recovered"]) == (0, 8)
    assert summaries["late"]["expected"] <= TOTAL // 2  # nothing before it joined is owed
    # the three counts agree
    keys = ("expected", "lost", "recovered", "duplicates")
    from_subs = {k: sum(s[k] for s in summaries.values()) for k in keys}
    demo = topic_figures([run / "sent" / "pub.jsonl"],
                         [run / "deliveries" / f"{n}.jsonl" for n in ("best-effort", "reliable", "late")])
    assert {k: demo[k] for k in keys} == from_subs, (demo, summaries)
    (row,) = json.loads(json.dumps(analyze(spark, [run])))["deliveries"]  # as `analyze --json` prints it
    assert {k: row[k] for k in keys} == from_subs, (row, summaries)
