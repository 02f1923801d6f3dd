"""The Python API: chordpub.Client as an application uses it, on a live ring over loopback."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from chordpub import Client, Message
from chordpub.launcher import stop_processes, wait_for
from dht.client import DhtClient, DhtError
from dht.spawner import start as start_command
from pubsub.directory import topic_info
from tests.conftest import IN_CI, start_module_ring

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from start_module_ring(tmp_path_factory, "client-ring", 4)


def subscribers(via: str, topic: str) -> int:
    with DhtClient(via) as client:
        return topic_info(client, topic)["subscribers"]


def test_a_clients_first_publishes_go_straight_to_their_owners_with_no_info_and_no_lookup(ring):
    """A Client learns the ring's id width and the arcs around its entry node as it starts (a `ping`
    and a `get_links`): on a ring its entry node's successor list covers, each of 40 new topics (and
    their prefix record) is registered at its owner with no `info` and no lookup asked.
    To see it fail: `learn_ring` returning at once, or `ping` not naming the width (the first
    placement then asks `info`, and looks up every owner whose arc it does not know)."""
    asked = {"info": 0, "lookup_id": 0}
    with Client(ring.nodes[0].endpoint) as client:
        dht = client.registrar.dht
        for name in asked:
            def counted(*args, _real=getattr(dht, name), _name=name, **kwargs):  # noqa: ANN002, ANN003, ANN202
                asked[_name] += 1
                return _real(*args, **kwargs)
            setattr(dht, name, counted)
        for i in range(40):
            client.publish(f"straight/{i}", b"x")
        regs = client.registrar.regs
        wait_for(lambda: len(regs) >= 80 and all(r.placed for r in list(regs.values())), 10,
                 what="every topic's fields in place at its owner")
    assert asked == {"info": 0, "lookup_id": 0}


def test_subscribe_then_publish_200_rounds_loses_nothing(ring):
    """Each round: a subscription is made on a topic whose best-effort publisher is running, then the
    publisher sends one numbered message. subscribe() returns only once the publisher holds our
    filter, so every one arrives."""
    with Client(ring.nodes[0].endpoint) as publisher, Client(ring.nodes[1].endpoint) as subscriber:
        publisher.advertise("rounds")
        missed = []
        for i in range(200):
            sub = subscriber.subscribe("rounds")
            publisher.publish("rounds", str(i))
            msg = sub.get(timeout=5)
            if msg is None or msg.payload != str(i).encode():
                missed.append((i, msg))
            sub.unsubscribe()
        assert not missed, missed[:5]


def test_one_client_follows_2000_topics_of_20_publishing_clients_with_at_most_16_sockets(ring, tmp_path):
    n_procs, clients_per_proc, topics_per_client, messages = 4, 5, 100, 3
    topics = n_procs * clients_per_proc * topics_per_client
    procs = []
    files = {k: tmp_path / k for k in ("go", "done")}
    try:
        for p in range(n_procs):
            procs.append(start_command(
                ["--via", ring.nodes[p % 4].endpoint, "--clients", str(clients_per_proc), "--topics",
                 str(topics_per_client), "--first", str(p * clients_per_proc * topics_per_client), "--messages",
                 str(messages), "--ready", str(tmp_path / f"ready{p}"), "--go", str(files["go"]), "--done",
                 str(files["done"])], tmp_path / f"publishers{p}.log", cwd=ROOT, module="tests.helpers.publishers"))
        wait_for(lambda: all((tmp_path / f"ready{p}").exists() for p in range(n_procs)) or any(
            x.poll() is not None for x in procs), timeout=240, what="publishers advertised")
        assert all(x.poll() is None for x in procs), "a publisher process died"
        got: dict[str, list[bytes]] = {}
        lock = threading.Lock()
        everything = threading.Event()

        def on_message(m: Message) -> None:
            with lock:
                got.setdefault(m.topic, []).append(m.payload)
                if sum(map(len, got.values())) == topics * messages:
                    everything.set()

        with Client(ring.nodes[3].endpoint) as client:
            client.subscribe_many([f"many-{n}" for n in range(topics)], callback=on_message)
            sockets = len(client.context._sockets)
            files["go"].write_text("1")
            everything.wait(120)
            with lock:
                missing = {f"many-{n}" for n in range(topics)} - {t for t, v in got.items() if len(v) == messages}
            assert not missing, f"{len(missing)} topics incomplete, e.g. {sorted(missing)[:5]}"
            for t, payloads in got.items():
                assert payloads == [f"{t}:{i}".encode() for i in range(1, messages + 1)]
            assert sockets <= 16, sockets
    finally:
        files["done"].write_text("1")
        stop_processes(procs, grace=15)


def test_unsubscribe_stops_delivery_at_once_and_the_owner_forgets_us(ring):
    heartbeat = 0.5
    via = ring.nodes[2].endpoint
    with Client(via, heartbeat=heartbeat) as publisher, Client(via, heartbeat=heartbeat) as subscriber:
        seen: list[Message] = []
        sub = subscriber.subscribe("goodbye", callback=seen.append)
        publisher.publish("goodbye", "one")
        wait_for(lambda: seen, timeout=5, what="the first message")
        assert subscribers(via, "goodbye") == 1
        sub.unsubscribe()
        t0 = time.monotonic()
        count = len(seen)
        for _ in range(20):
            publisher.publish("goodbye", "after")
        wait_for(lambda: subscribers(via, "goodbye") == 0, timeout=heartbeat, what="the owner dropping us")
        assert time.monotonic() - t0 <= heartbeat
        assert len(seen) == count and not sub.active
        assert "goodbye" not in subscriber.subscriptions


def test_get_iteration_and_a_failing_callback(ring):
    via = ring.nodes[1].endpoint
    with Client(via) as publisher, Client(via) as subscriber:
        pulled = subscriber.subscribe("pull")
        calls: list[int] = []

        def flaky(m: Message) -> None:
            calls.append(m.seq)
            if m.seq == 2:
                raise RuntimeError("the application's bug")

        subscriber.subscribe("push", callback=flaky)
        for i in range(5):
            publisher.publish("pull", f"p{i}")
            publisher.publish("push", f"q{i}")
        taken = []
        for msg in pulled:
            taken.append(msg.text)
            if len(taken) == 5:
                break
        assert taken == [f"p{i}" for i in range(5)]
        assert pulled.get(timeout=0.05) is None
        wait_for(lambda: len(calls) == 5, timeout=5, what="every callback run, the failing one too")
        assert calls == [1, 2, 3, 4, 5]
        with pytest.raises(RuntimeError, match="callback"):
            subscriber.subscriptions["push"].get(timeout=0)
        with pytest.raises(ValueError, match="already subscribed"):
            subscriber.subscribe("pull")


def test_bad_input_and_a_dead_ring_fail_clearly(ring, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(DhtError, match="no reply from 127.0.0.1:1 within 1s"):
        Client("127.0.0.1:1", timeout=1.0)
    assert time.monotonic() - t0 < 5
    with pytest.raises(ValueError, match="malformed endpoint"):
        Client("nowhere")
    with Client(ring.nodes[0].endpoint) as c:
        for bad in ("", "x" * 2000, "a\x00b"):
            with pytest.raises(ValueError, match="topic"):
                c.publish(bad, b"x")
        with pytest.raises(ValueError, match="mode"):
            c.subscribe("t", mode="carrier-pigeon")
        with pytest.raises(TypeError, match="payload"):
            c.publish("t", 42)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="at most"):
            c.publish("t", b"x" * 2_000_000)
        c.advertise("terms", history=5)
        with pytest.raises(ValueError, match="other terms"):
            c.advertise("terms", history=9)
    with pytest.raises(RuntimeError, match="closed"):
        c.publish("t", b"x")
    c.close()  # twice is fine


def test_the_example_runs(ring):
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py"), "--via", ring.nodes[0].endpoint],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["by_callback"] == {"news": 3, "sports": 3}
    assert report["by_get"] == {"sports": 3, "weather": 3}
    assert report["after_unsubscribe"] == {"news": 4, "sports": 3}  # sports stopped at once
    assert report["sports_subscribers"] == [2, 1]


@pytest.mark.skipif(not IN_CI and sys.platform != "linux", reason="counts /proc/self/fd")
def test_a_closed_client_leaves_no_thread_and_no_socket(ring):
    before_threads = {t.ident for t in threading.enumerate()}
    before_fds = len(list(Path("/proc/self/fd").iterdir()))
    for _ in range(3):
        with Client(ring.nodes[0].endpoint) as c:
            c.subscribe("tidy", callback=lambda _m: None)
            c.publish("tidy", b"x")
    wait_for(lambda: {t.ident for t in threading.enumerate()} <= before_threads, timeout=10,
             what="the clients' threads gone")
    assert len(list(Path("/proc/self/fd").iterdir())) <= before_fds + 2


def test_a_callback_may_unsubscribe_subscribe_and_close(ring):
    via = ring.nodes[2].endpoint
    with Client(via) as publisher:
        subscriber = Client(via)
        seen: list[str] = []
        second: list = []

        def on_first(m: Message) -> None:
            seen.append(m.text)
            subscriber.unsubscribe("first")  # from the io thread: no waiting on itself
            second.append(subscriber.subscribe("second", callback=lambda m: (seen.append(m.text),
                                                                             subscriber.close())))

        subscriber.subscribe("first", callback=on_first)
        publisher.publish("first", "one")
        wait_for(lambda: second and second[0].active and "second" in subscriber.io.topics
                 and subscriber.io.topics["second"].stats is not None, timeout=10, what="the second subscription")
        publisher.publish("first", "not delivered")
        publisher.publish("second", "two")  # advertises "second", waiting for our filter
        wait_for(lambda: subscriber._closed and not subscriber.io.thread.is_alive(), timeout=20,
                 what="the client closed by its own callback")
        assert seen == ["one", "two"]


def test_threads_publishing_a_new_topic_at_once_lose_nothing_to_the_first_registration(ring):
    """The first publish of a topic registers it and waits for the subscribers the owner knows to
    connect; a second thread publishing the same topic meanwhile must wait too (a gRPC gateway
    serves concurrent Publish calls so). Before, the others sent at once, into no connection: with 8
    threads, 7 of the 8 first messages were lost."""
    via = ring.nodes[0].endpoint
    with Client(via) as publisher, Client(via) as subscriber:
        sub = subscriber.subscribe("eight-at-once")
        start = threading.Barrier(8)
        seqs: list[int] = []

        def one() -> None:
            start.wait(10)
            seqs.append(publisher.publish("eight-at-once", b"first"))

        threads = [threading.Thread(target=one) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        got = []
        wait_for(lambda: (m := sub.get(timeout=0.1)) is not None and got.append(m.seq) is None and len(got) == 8, 20,
                 what="the eight first messages")
    assert sorted(seqs) == sorted(got) == list(range(1, 9)) and sub.lost == 0


def test_a_reliable_subscriber_that_connects_after_the_publishers_wait_still_gets_the_first_messages(ring):
    """A new topic's first messages wait for the subscribers its owner knows of, up to a lease; one
    that connects later still gets them from seq 1 if it is reliable: they are kept a lease more for it
    (the late hold, pubsub/history.py), though the publisher keeps no history of its own.

    To see it fail, make `Publisher._advertised` skip the late hold (`hold_late` not called): the
    subscriber finds the first messages gone and dead-letters them."""
    via = ring.nodes[0].endpoint
    letters: list = []
    with Client(via) as publisher, Client(ring.nodes[1].endpoint, on_dead_letter=letters.append) as subscriber:
        sub = subscriber.subscribe("late/1", reliable=True)
        deferred: list = []  # the subscriber hears of the publisher, but connects only when we say
        connect = subscriber.io.set_publishers
        subscriber.io.set_publishers = lambda topic, entries: deferred.append((topic, entries))
        for i in range(20):
            publisher.publish("late/1", f"m{i}")
        wait_for(lambda: "late/1" not in publisher.publisher._advertising and deferred, 30,
                 what="the publisher done waiting for the subscriber it was told of")
        subscriber.io.set_publishers = connect
        subscriber.io.call(lambda: [connect(*args) for args in deferred])
        got: list[str] = []
        wait_for(lambda: (m := sub.get(timeout=0.1)) is not None and got.append(m.text) is None and len(got) == 20,
                 20, what=f"the first messages (dead letters: {letters})")
    assert got == [f"m{i}" for i in range(20)] and not letters


def test_publish_many_sends_the_same_messages_in_order_and_nothing_on_a_bad_payload(ring, tmp_path):
    """A batch goes out as that many publishes would: numbered on from the last publish, in order,
    to plain subscribers, a consumer group and through a publisher's journal; a bad payload anywhere
    in it raises before any is sent."""
    via = ring.nodes[0].endpoint
    with Client(via) as publisher, Client(via, data_dir=tmp_path / "pub-data") as journaled, \
            Client(via) as subscriber, Client(via) as member:
        plain = subscriber.subscribe("batched", reliable=True)
        worker = member.subscribe("batched", group="g")
        from_journal = subscriber.subscribe("batched-journal", reliable=True)
        assert publisher.publish("batched", b"one") == 1
        assert publisher.publish_many("batched", [f"m{i}" for i in range(2, 2502)]) == 2501
        with pytest.raises(TypeError):
            publisher.publish_many("batched", [b"fine", 42, b"never sent"])
        assert publisher.publish_many("batched", []) == 0
        assert publisher.publish("batched", b"last") == 2502, "a refused batch takes no number"
        assert journaled.publish_many("batched-journal", (b"j%d" % i for i in range(1, 3001))) == 3000
        got, done, journal_got = [], [], []

        def drained(sub, into: list, n: int) -> bool:  # noqa: ANN001 - a Subscription
            while len(into) < n and (m := sub.get(timeout=0.05)) is not None:
                into.append(m)
            return len(into) >= n

        wait_for(lambda: drained(plain, got, 2502), 30, what="the batch at the plain subscriber")
        wait_for(lambda: drained(worker, done, 2502), 30, what="the batch at the group's member")
        wait_for(lambda: drained(from_journal, journal_got, 3000), 30, what="the journaled batch")
    assert [m.seq for m in got] == list(range(1, 2503))
    assert [m.payload for m in got[1:2501]] == [f"m{i}".encode() for i in range(2, 2502)] and got[-1].payload == b"last"
    assert [m.payload for m in journal_got] == [b"j%d" % i for i in range(1, 3001)]
    assert sorted(m.seq for m in done) == list(range(1, 2503)), "the group's copy of each"


def test_a_batch_callback_gets_lists_in_order_and_a_raising_one_dead_letters_its_list(ring):
    """`batch=True`: one call per list of messages that arrived together (a flood arrives in the
    publisher's coalesced runs, so lists longer than one), every message once, in order; a call that
    raises sends each message of its list to the dead-letter queue, and the next list still comes."""
    via = ring.nodes[0].endpoint
    lists: list[list[int]] = []
    letters = []

    def take(batch: list[Message]) -> None:
        lists.append([m.seq for m in batch])
        if len(lists) == 2:
            raise RuntimeError("the application's bug")

    with Client(via) as publisher, Client(via, on_dead_letter=letters.append) as subscriber:
        with pytest.raises(ValueError, match="batch=True"):
            subscriber.subscribe("listed", batch=True)
        with pytest.raises(ValueError, match="plain subscriptions"):
            subscriber.subscribe("listed", batch=True, callback=take, group="g")
        subscriber.subscribe("listed", reliable=True, callback=take, batch=True)
        publisher.publish_many("listed", [b"%d" % i for i in range(5000)])
        wait_for(lambda: sum(map(len, lists)) == 5000, 30, what="every message in some list")
        seqs = [s for batch in lists for s in batch]
        assert seqs == list(range(1, 5001)) and max(map(len, lists)) > 1
        wait_for(lambda: len(letters) == len(lists[1]), 10, what="the raising call's list dead-lettered")
        assert [d.from_seq for d in letters] == lists[1] and all(d.payload for d in letters)
