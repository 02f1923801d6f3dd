"""Topic discovery and direct dissemination over a live ring (issue 3's acceptance).

Publishers and subscribers run as real `chordpub pub` / `chordpub sub` processes where a test only
needs their outside; in-process Publisher/Subscriber objects (real sockets, real ring) where a test
needs a seam, such as a lossy link in front of a subscriber.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import zmq

from chordpub.launcher import LocalRing, stop_processes, wait_for
from dht.client import DhtClient
from pubsub.directory import Directory
from pubsub.envelope import Envelope
from pubsub.publisher import Publisher
from pubsub.subscriber import Subscriber

PERIOD = 0.2


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    r = LocalRing(tmp_path_factory.mktemp("pubsub-ring"), options={"stabilize": PERIOD})
    try:
        r.start(8)
        r.wait_consistent(timeout=60, fingers=True)
        yield r
    finally:
        r.stop()


@pytest.fixture
def procs(tmp_path):
    """spawn(name, *cli_args) -> Popen, logging to tmp_path/name.log; all killed at teardown."""
    started: list[subprocess.Popen] = []

    def spawn(name: str, *args: str) -> subprocess.Popen:
        log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 - closed when the child exits
        p = subprocess.Popen([sys.executable, "-m", "chordpub", *args], stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        started.append(p)
        return p

    yield spawn
    stop_processes(started, grace=3)


def lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]


class Background:
    """Runs an in-process Subscriber in a thread, collecting deliveries and dead letters."""

    def __init__(self, sub: Subscriber) -> None:
        self.sub = sub
        self.deliveries: list = []
        self.dead: list[dict] = []
        sub.on_delivery = self.deliveries.append
        sub.on_dead_letter = self.dead.append
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.sub.run(stop=self.done.is_set)
        finally:
            self.sub.close(unregister=False)

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=10)


def pub_args(via: str, topic: str, trace: Path, *extra: str) -> list[str]:
    return ["pub", "--via", via, "--topic", topic, "--trace", str(trace), *extra]


@pytest.mark.parametrize("mode", ["direct", "relay"])
@pytest.mark.parametrize("reliable", [True, False], ids=["reliable", "best-effort"])
def test_three_publishers_three_subscribers_on_overlapping_topics(ring, procs, tmp_path, reliable, mode):
    via = [n.endpoint for n in ring.nodes]
    # topics of their own: the module's ring still holds the last variant's registrations for a lease,
    # which would satisfy "subscribers registered" below before these subscribers are
    alpha, beta = (f"{t}-{mode}-{'reliable' if reliable else 'best-effort'}" for t in ("alpha", "beta"))
    topics = {"p1": alpha, "p2": beta, "p3": alpha}
    n_msgs = 150
    rel = ["--reliable", "--mode", mode] if reliable else ["--mode", mode]
    wants = {"s1": alpha, "s2": beta, "s3": alpha}
    expected_count = {alpha: 2 * n_msgs, beta: n_msgs}

    def start_sub(name: str) -> subprocess.Popen:
        topic = wants[name]
        args = ["sub", "--via", via[int(name[1])], "--topic", topic, "--trace", str(tmp_path / f"{name}.jsonl"),
                "--json", "--heartbeat", "0.5", *rel]
        args += ["--count", str(expected_count[topic])] if reliable else ["--seconds", "8"]
        return procs(name, *args)

    subs = {name: start_sub(name) for name in ("s1", "s2")}  # before the publishers
    with DhtClient(via[0]) as client:
        directory = Directory(client)
        wait_for(lambda: all(directory.info(t)["subscribers"] >= 1 for t in (alpha, beta)),
                 timeout=20, what="subscribers registered")
    for name, topic in topics.items():
        procs(name, *pub_args(via[int(name[1]) + 3], topic, tmp_path / f"{name}.jsonl", "--count", str(n_msgs),
                              "--rate", "100", "--history", "1000", "--linger", "6", "--heartbeat", "0.5",
                              "--mode", mode))
    wait_for(lambda: len(lines(tmp_path / "p1.jsonl")) >= 50, timeout=20, what="p1 half-way")
    subs["s3"] = start_sub("s3")  # after the publishers
    for name, p in subs.items():
        assert p.wait(timeout=60) == 0, (tmp_path / f"{name}.log").read_text()
    sent = {name: {(r["publisher"], r["seq"]) for r in lines(tmp_path / f"{name}.jsonl")} for name in topics}
    for name, topic in wants.items():
        rows = lines(tmp_path / f"{name}.jsonl")
        got = [(r["publisher"], r["seq"]) for r in rows]
        mine = set().union(*(sent[p] for p, t in topics.items() if t == topic))
        assert all(r["topic"] == topic and r["mode"] == mode for r in rows)
        assert len(got) == len(set(got)), f"{name} got duplicates"
        assert set(got) <= mine, f"{name} got messages of another topic"
        if reliable:
            assert set(got) == mine, f"{name} missed {len(mine - set(got))}"
            for pub in {p for p, _ in got}:
                seqs = [s for p, s in got if p == pub]
                assert seqs == sorted(seqs) and seqs[0] == 1
        summary = json.loads((tmp_path / f"{name}.log").read_text().strip().splitlines()[-1])
        assert summary["received"] == len(got) and summary["duplicates"] == 0
    if not reliable:  # best effort loses at most the slow joiners' first messages
        for name in ("s1", "s2"):
            assert len(lines(tmp_path / f"{name}.jsonl")) >= 0.9 * expected_count[wants[name]]


def test_a_publisher_started_later_is_found_within_two_heartbeats(ring, procs, tmp_path):
    heartbeat = 1.0
    via = ring.nodes[2].endpoint
    trace = tmp_path / "late.jsonl"
    procs("sub", "sub", "--via", via, "--topic", "latecomer", "--trace", str(trace), "--seconds", "30",
          "--heartbeat", str(heartbeat))
    with DhtClient(via) as client:
        directory = Directory(client)
        wait_for(lambda: directory.info("latecomer")["subscribers"] == 1, timeout=20,
                 what="subscriber registered")
    publisher = Publisher(ring.nodes[5].endpoint, "latecomer", heartbeat=heartbeat).start()
    registered_ns = time.time_ns()
    try:
        def first_delivery():
            publisher.publish(b"hello")
            rows = lines(trace)
            return rows[0] if rows else None

        first = wait_for(first_delivery, timeout=4 * heartbeat, interval=0.02, what="first delivery")
        assert (first["recv_ns"] - registered_ns) / 1e9 <= 2 * heartbeat
    finally:
        publisher.close()


def test_a_killed_publisher_leaves_within_its_lease_and_is_dropped(ring, procs, tmp_path):
    heartbeat = 0.5
    lease = 3 * heartbeat
    via = ring.nodes[1].endpoint
    sub = Background(Subscriber(via, "mortal", heartbeat=heartbeat))
    try:
        pub = procs("pub", *pub_args(ring.nodes[4].endpoint, "mortal", tmp_path / "p.jsonl", "--count", "0",
                                     "--rate", "50", "--heartbeat", str(heartbeat)))
        wait_for(lambda: sub.deliveries, timeout=20, what="deliveries")
        pub.send_signal(signal.SIGKILL)
        pub.wait(timeout=5)
        killed = time.monotonic()
        with DhtClient(via) as client:
            directory = Directory(client)
            wait_for(lambda: not directory.info("mortal")["publishers"], timeout=lease + 10 * PERIOD,
                     what="the publisher gone from topic info")
        assert time.monotonic() - killed <= lease + 5 * PERIOD
        wait_for(lambda: not sub.sub.states, timeout=2 * heartbeat + 1, what="the subscriber dropping it")
    finally:
        sub.stop()


def test_registrations_survive_the_owners_death(tmp_path):
    with LocalRing(tmp_path / "ring", options={"stabilize": PERIOD, "replicas": 3}) as ring:
        ring.start(6)
        ring.wait_consistent(timeout=60)
        # everyone enters the ring through the topic's owner, which then dies: clients must fail over
        from dht.ids import key_id, owner_of

        owner_id = owner_of(sorted(n.id for n in ring.nodes), key_id("phoenix"))
        via = next(n.endpoint for n in ring.nodes if n.id == owner_id)
        # a publisher that will not renew its lease during the test: only the replica can keep it
        first = Publisher(via, "phoenix", heartbeat=60).start()
        sub = Background(Subscriber(via, "phoenix", heartbeat=0.5))
        second = None
        try:
            wait_for(lambda: first.id in sub.sub.states, timeout=10, what="subscriber matched")
            with DhtClient(via) as client:
                owner = Directory(client).info("phoenix")["owner"]
            victim = next(n for n in ring.nodes if n.endpoint == owner["endpoint"])
            ring.kill(victim)
            ring.wait_consistent(timeout=10 * PERIOD)
            survivor = ring.live[0].endpoint
            with DhtClient(survivor) as client:
                info = Directory(client).info("phoenix")
            assert info["owner"]["endpoint"] != owner["endpoint"]
            assert [p["id"] for p in info["publishers"]] == [first.id]
            second = Publisher(survivor, "phoenix", heartbeat=0.5).start()

            def heard_second():
                second.publish(b"x")
                return any(d.env.publisher == second.id for d in sub.deliveries)

            wait_for(heard_second, timeout=8, interval=0.05, what="the new publisher reaching the subscriber")
        finally:
            sub.stop()
            first.close()
            if second is not None:
                second.close()


def test_a_late_joiner_gets_the_history_it_asks_for(ring, procs, tmp_path):
    via = ring.nodes[3].endpoint
    pub_trace = tmp_path / "p.jsonl"
    procs("pub", *pub_args(via, "archive", pub_trace, "--count", "100", "--rate", "500", "--history", "60",
                           "--linger", "30"))
    wait_for(lambda: len(lines(pub_trace)) == 100, timeout=20, what="100 published")
    out = subprocess.run([sys.executable, "-m", "chordpub", "sub", "--via", via, "--topic", "archive",
                          "--history", "50", "--count", "50", "--json", "--trace", str(tmp_path / "s.jsonl")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["received"] == 50 and summary["recovered"] == 50 and summary["publishers"] == 1
    rows = lines(tmp_path / "s.jsonl")
    assert [r["seq"] for r in rows] == list(range(51, 101)) and all(r["recovered"] for r in rows)
    refused = subprocess.run([sys.executable, "-m", "chordpub", "sub", "--via", via, "--topic", "archive",
                              "--history", "70", "--count", "1", "--seconds", "2", "--json"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0
    assert "offers history 60 < requested 70" in refused.stderr
    assert json.loads(refused.stdout)["received"] == 0


class LossyLink:
    """A test relay between a publisher and a subscriber that drops 5% and a run of sequence numbers."""

    def __init__(self, upstream: str, drop_run: range, seed: int = 3) -> None:
        ctx = zmq.Context.instance()
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.connect(f"tcp://{upstream}")
        self.pub = ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.endpoint = f"127.0.0.1:{self.pub.bind_to_random_port('tcp://127.0.0.1')}"
        self.rng = random.Random(seed)
        self.drop_run = drop_run
        self.dropped: set[int] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            if not self.sub.poll(50):
                continue
            frames = self.sub.recv_multipart()
            seq = Envelope.decode(frames[1]).seq
            if seq in self.drop_run or self.rng.random() < 0.05:
                self.dropped.add(seq)
                continue
            self.pub.send_multipart(frames)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.sub.close()
        self.pub.close()


def test_reliable_mode_repairs_every_gap_inside_the_history_and_dead_letters_the_rest(ring):
    via = ring.nodes[6].endpoint
    total, window = 400, 30
    publisher = Publisher(via, "lossy", history=window, heartbeat=0.5)
    link = LossyLink(publisher.id, drop_run=range(200, 260))  # 60 in a row: longer than the window
    publisher.entry = replace(publisher.entry, endpoint=link.endpoint)  # subscribers go through the link
    sub = Background(Subscriber(via, "lossy", reliable=True, heartbeat=0.5))
    try:
        publisher.start()
        wait_for(lambda: publisher.id in sub.sub.states, timeout=10, what="subscriber matched")
        for _ in range(total):
            publisher.publish(b"payload")
            time.sleep(0.002)  # pacing the publisher (a rate), not synchronization

        def accounted() -> bool:
            lost = sum(r["to_seq"] - r["from_seq"] + 1 for r in sub.dead)
            return len(sub.deliveries) + lost >= total

        wait_for(accounted, timeout=15, what="every message delivered or dead-lettered")
    finally:
        sub.stop()
        publisher.close()
        link.close()
    seqs = [d.env.seq for d in sub.deliveries]
    assert seqs == sorted(set(seqs)), "out of order or duplicated"
    lost = {s for r in sub.dead for s in range(r["from_seq"], r["to_seq"] + 1)}
    assert not lost & set(seqs) and lost | set(seqs) == set(range(1, total + 1))
    assert lost and lost <= set(range(200, 260)), sub.dead  # only the run longer than the window
    assert all(r["publisher"] == publisher.id and r["reason"] for r in sub.dead)
    random_drops = link.dropped - set(range(200, 260))
    assert random_drops and random_drops <= set(seqs)  # repaired from history
    recovered = {d.env.seq for d in sub.deliveries if d.recovered}
    assert random_drops <= recovered
    assert sub.sub.stats.gaps == len(lost)


def test_only_the_strongest_publisher_is_delivered_and_the_next_takes_over(ring, procs, tmp_path):
    heartbeat = 0.5
    via = ring.nodes[7].endpoint
    sub = Background(Subscriber(via, "exclusive", heartbeat=heartbeat))
    try:
        strong = procs("strong", *pub_args(via, "exclusive", tmp_path / "a.jsonl", "--count", "0", "--rate", "50",
                                           "--strength", "2", "--heartbeat", str(heartbeat)))
        procs("weak", *pub_args(via, "exclusive", tmp_path / "b.jsonl", "--count", "0", "--rate", "50",
                                "--strength", "1", "--heartbeat", str(heartbeat)))
        wait_for(lambda: len(sub.sub.states) == 2, timeout=20, what="both publishers matched")
        mark = len(sub.deliveries)
        wait_for(lambda: len(sub.deliveries) >= mark + 50, timeout=10, what="50 deliveries")
        strong_id = lines(tmp_path / "a.jsonl")[0]["publisher"]
        assert {d.env.publisher for d in sub.deliveries[mark:]} == {strong_id}
        strong.send_signal(signal.SIGKILL)
        strong.wait(timeout=5)
        killed_ns = time.time_ns()
        weak_id = lines(tmp_path / "b.jsonl")[0]["publisher"]
        first_weak = wait_for(lambda: next((d for d in sub.deliveries if d.env.publisher == weak_id), None),
                              timeout=3 * heartbeat + 3, what="the weaker publisher taking over")
        assert (first_weak.recv_ns - killed_ns) / 1e9 <= 3 * heartbeat + 5 * PERIOD + heartbeat
    finally:
        sub.stop()


def test_garbage_on_the_repair_and_notify_sockets_changes_nothing(ring):
    via = ring.nodes[0].endpoint
    publisher = Publisher(via, "sturdy", history=10, heartbeat=0.5).start()
    sub = Background(Subscriber(via, "sturdy", history=5, heartbeat=0.5))
    try:
        for _ in range(5):
            publisher.publish(b"m")
        wait_for(lambda: publisher.id in sub.sub.states, timeout=10, what="matched")
        before_states = dict(sub.sub.states)
        ctx = zmq.Context.instance()
        rng = random.Random(9)
        import msgpack
        for endpoint in (publisher.repair.endpoint, sub.sub.notify.endpoint):
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(f"tcp://{endpoint}")
            junk = [rng.randbytes(rng.randint(0, 100)) for _ in range(100)] + [
                msgpack.packb({"v": 1, "op": "range", "id": 1, "topic": "sturdy", "from": -5}),
                msgpack.packb({"v": 1, "op": "last", "id": 2, "topic": 7, "count": 1}),
                msgpack.packb({"v": 1, "op": "changed", "id": 3, "key": "sturdy", "fields": {"pub/x": "no"}}),
                msgpack.packb({"v": 1, "op": "changed", "id": 4, "key": "other", "fields": {}}),
                msgpack.packb({"v": 1, "op": "changed", "id": 5, "key": "sturdy", "fields": {}}),  # a lie
            ]
            for body in junk:
                sock.send(body)
            sock.close()
        for _ in range(5):
            publisher.publish(b"m")
        wait_for(lambda: len(sub.deliveries) >= 10, timeout=10, what="deliveries go on")
        assert set(sub.sub.states) == set(before_states)
        assert sub.thread.is_alive()
        with DhtClient(via) as client:
            assert [p["id"] for p in Directory(client).info("sturdy")["publishers"]] == [publisher.id]
    finally:
        sub.stop()
        publisher.close()


def test_pubsub_cli_errors_are_one_clear_line(ring):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "chordpub", *args], capture_output=True, text=True,
                              timeout=60)

    for args, words in [
        (("pub", "--via", "nowhere", "--topic", "t"), "malformed endpoint"),
        (("sub", "--via", "nowhere", "--topic", "t", "--count", "1"), "malformed endpoint"),
        (("topic", "info", "t", "--via", "bad"), "malformed endpoint"),
        (("sub", "--via", ring.nodes[0].endpoint, "--topic", "t", "--json"), "--count or --seconds"),
        (("pub", "--via", ring.nodes[0].endpoint, "--topic", "t", "--mode", "carrier-pigeon"), "--mode"),
    ]:
        out = run(*args)
        assert out.returncode != 0 and out.stdout == ""
        err = out.stderr.strip().splitlines()
        assert len(err) == 1 and words in err[0] and "Traceback" not in out.stderr, out.stderr


def test_topic_info_json(ring):
    via = ring.nodes[4].endpoint
    publisher = Publisher(via, "catalogue", history=7, strength=3).start()
    try:
        out = subprocess.run([sys.executable, "-m", "chordpub", "topic", "info", "catalogue", "--via", via,
                              "--json"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        info = json.loads(out.stdout)
        assert set(info) == {"topic", "key_id", "owner", "publishers", "subscribers"}
        assert info["publishers"] == [{"id": publisher.id, "endpoint": publisher.id, "strength": 3, "history": 7}]
        assert info["subscribers"] == 0
        from dht.ids import key_id, owner_of
        assert info["owner"]["id"] == owner_of(sorted(n.id for n in ring.nodes), key_id("catalogue"))
    finally:
        publisher.close()
