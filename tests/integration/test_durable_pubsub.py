"""Durable subscriptions, acknowledged retention and publishers restarted from their data directory,
with real clients on a live ring over loopback."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgpack
import pytest

from chordpub import Client
from chordpub.launcher import wait_for
from dht.client import DhtClient
from pubsub.directory import topic_info
from pubsub.durable import FILE, DataDir, DataDirError
from pubsub.envelope import Envelope
from tests.conftest import start_module_ring

HB = 0.3


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from start_module_ring(tmp_path_factory, "durable-ring", 3)


def drain(sub, got: list, n: int, timeout: float = 15) -> None:
    def enough() -> bool:
        while (m := sub.get(timeout=0.05)) is not None:
            got.append(m)
        return len(got) >= n

    wait_for(enough, timeout, what=f"{n} messages")


def test_a_durable_subscriber_resumes_after_its_committed_position(ring, tmp_path: Path):
    via = ring.nodes[0].endpoint
    with Client(via, heartbeat=HB) as publisher:
        publisher.advertise("resume")  # best effort, no history: only the durable subscriber's acks retain
        with Client(via, heartbeat=HB, data_dir=tmp_path / "s") as first:
            sub = first.subscribe("resume", durable="d")
            for i in range(1, 51):
                publisher.publish("resume", f"m{i}")
            got: list = []
            drain(sub, got, 50)
            name = first.id
            pub_history = publisher.publications["resume"].history
            wait_for(lambda: pub_history.acked.get(f"{name}/d") == 50, 10, what="the publisher holding our ack")
        for i in range(51, 121):  # published while the subscriber is away
            publisher.publish("resume", f"m{i}")
        assert pub_history.first_seq <= 51, "retained for the absent durable subscriber"
        with Client(via, heartbeat=HB, data_dir=tmp_path / "s") as again:
            assert again.id == name
            sub = again.subscribe("resume", durable="d")
            later: list = []
            drain(sub, later, 70)
    assert [m.seq for m in got] == list(range(1, 51))
    assert [m.seq for m in later] == list(range(51, 121)), "resumed exactly after the committed position"
    assert [m.text for m in later[:2]] == ["m51", "m52"] and all(m.recovered for m in later)
    assert not any(m.redelivered for m in later)


def test_a_publisher_restarted_from_its_data_dir_continues_and_repairs(ring, tmp_path: Path):
    via = ring.nodes[1].endpoint
    pd = tmp_path / "p"
    with Client(via, heartbeat=HB, name="pub-a", data_dir=pd) as publisher:
        publisher.advertise("restart", reliable=True, history=500)
        seqs = [publisher.publish("restart", f"before {i}") for i in range(300)]
    assert seqs == list(range(1, 301))
    with Client(via, heartbeat=HB, data_dir=pd) as publisher:
        assert publisher.id == "pub-a"
        publisher.advertise("restart", reliable=True, history=500)
        assert publisher.publish("restart", "after") == 301
        with Client(via, heartbeat=HB) as late:
            sub = late.subscribe("restart", reliable=True)
            got: list = []
            drain(sub, got, 301)
    assert [m.seq for m in got] == list(range(1, 302))
    assert got[0].text == "before 0" and got[-1].text == "after"


def test_retention_bounds_are_in_topic_info_and_trim_by_count(ring, tmp_path: Path):
    via = ring.nodes[2].endpoint
    with Client(via, heartbeat=HB) as publisher, Client(via, heartbeat=HB, data_dir=tmp_path / "s") as s:
        publisher.advertise("bounded", retain_messages=40, retain_seconds=600, retain_bytes=10_000)
        s.subscribe("bounded", durable="slow", callback=lambda m: None)
        history = publisher.publications["bounded"].history
        wait_for(lambda: history.acked, 10, what="the durable subscriber's first ack")
        s.unsubscribe("bounded")
        for _ in range(100):
            publisher.publish("bounded", b"x" * 10)
        assert len(history) == 40 and history.first_seq == 61
        with DhtClient(via) as dht:
            info = topic_info(dht, "bounded")
    assert info["publishers"][0]["retain"] == {"messages": 40, "seconds": 600, "bytes": 10_000}


def test_foreign_or_corrupt_state_is_refused_and_left_alone(ring, tmp_path: Path):
    via = ring.nodes[0].endpoint
    with Client(via, name="alice", data_dir=tmp_path / "a"):
        pass
    before = (tmp_path / "a" / FILE).read_bytes()
    with pytest.raises(DataDirError, match="holds the state of client 'alice', not 'bob'"):
        Client(via, name="bob", data_dir=tmp_path / "a")
    assert (tmp_path / "a" / FILE).read_bytes() == before
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / FILE).write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(DataDirError, match="not a usable client state file"):
        Client(via, data_dir=tmp_path / "c")
    assert (tmp_path / "c" / FILE).read_bytes() == b"this is not sqlite" * 100
    other = sqlite3.connect(tmp_path / "o.sqlite3")
    other.execute("CREATE TABLE t (x)")
    other.commit()
    other.close()
    (tmp_path / "o").mkdir()
    (tmp_path / "o.sqlite3").rename(tmp_path / "o" / FILE)
    with pytest.raises(DataDirError, match="not a chordpub client's state file"):
        DataDir(tmp_path / "o")
    with Client(via, data_dir=tmp_path / "d") as c:
        c.subscribe("one", durable="x")
        with pytest.raises(DataDirError, match="follows 'one', not 'two'"):
            c.subscribe("two", durable="x")


def test_uncommitted_messages_come_back_marked_redelivered(ring, tmp_path: Path):
    via = ring.nodes[1].endpoint
    with Client(via, heartbeat=HB) as publisher:
        publisher.advertise("manual", reliable=True)
        seen: list = []
        with Client(via, heartbeat=HB, data_dir=tmp_path / "s") as first:
            first.subscribe("manual", durable="m", auto_commit=False, callback=seen.append)
            for i in range(1, 21):
                publisher.publish("manual", f"m{i}")
            wait_for(lambda: len(seen) == 20, 10, what="20 messages")
            seen[9].commit()  # the application is done with 1..10 only
        again: list = []
        with Client(via, heartbeat=HB, data_dir=tmp_path / "s") as second:
            sub = second.subscribe("manual", durable="m")
            drain(sub, again, 10)
            assert sub.stats.redelivered == 10
    assert [m.seq for m in again] == list(range(11, 21))
    assert all(m.redelivered for m in again)


def test_retention_by_time_and_by_bytes(ring, tmp_path: Path):
    via = ring.nodes[2].endpoint
    with Client(via, heartbeat=HB) as publisher, Client(via, heartbeat=HB, data_dir=tmp_path / "s") as s:
        publisher.advertise("by-time", retain_seconds=1.0)
        publisher.advertise("by-bytes", retain_bytes=1000)
        for topic in ("by-time", "by-bytes"):
            s.subscribe(topic, durable=topic, callback=lambda m: None)
        kept = {t: publisher.publications[t].history for t in ("by-time", "by-bytes")}
        wait_for(lambda: all(h.acked for h in kept.values()), 10, what="both durable subscribers acking")
        s.unsubscribe("by-time")
        s.unsubscribe("by-bytes")
        for _ in range(30):
            publisher.publish("by-bytes", b"b" * 100)
            publisher.publish("by-time", b"t")
        assert (len(kept["by-bytes"]), kept["by-bytes"].first_seq, kept["by-bytes"].bytes) == (10, 21, 1000)
        assert len(kept["by-time"]) == 30
        wait_for(lambda: len(kept["by-time"]) == 0, 5, what="retention by time emptying the topic")
        assert len(kept["by-bytes"]) == 10


def test_an_absent_durable_subscriber_finds_exactly_the_lost_range_and_replays_what_is_held(ring, tmp_path: Path):
    import json

    from tests.conftest import run_cli

    via = ring.nodes[0].endpoint
    data = tmp_path / "s"
    with Client(via, heartbeat=HB) as publisher:
        publisher.advertise("away", retain_messages=50)
        with Client(via, heartbeat=HB, data_dir=data) as first:
            def picky(m) -> None:  # noqa: ANN001
                if m.text == "poison":
                    raise ValueError("cannot handle poison")

            first.subscribe("away", durable="a", callback=picky)
            publisher.publish("away", "fine")
            publisher.publish("away", "poison")
            history = publisher.publications["away"].history
            wait_for(lambda: history.acked.get(f"{first.id}/a") == 2, 10, what="the ack of 2")
        for i in range(3, 203):  # 200 while away; 50 retained: 3..152 are lost
            publisher.publish("away", f"m{i}")
        with Client(via, heartbeat=HB, data_dir=data) as again:
            sub = again.subscribe("away", durable="a")
            got: list = []
            drain(sub, got, 50)
        shown = run_cli("dlq", "show", str(data), "--json")
        assert shown.returncode == 0, shown.stderr
        letters = json.loads(shown.stdout)["letters"]
        with Client(via, heartbeat=HB) as watcher:
            replayed_to = watcher.subscribe("away")
            replay = run_cli("dlq", "replay", str(data), "--via", via, "--json")
            assert replay.returncode == 0, replay.stderr
            back: list = []
            drain(replayed_to, back, 1)
    assert [m.seq for m in got] == list(range(153, 203))
    poison = [x for x in letters if x["held"]]
    ranges = [x for x in letters if not x["held"]]
    assert [(x["from_seq"], x["to_seq"]) for x in poison] == [(2, 2)] and "cannot handle poison" in poison[0]["reason"]
    assert [(x["from_seq"], x["to_seq"], x["topic"]) for x in ranges] == [(3, 152, "away")]
    assert json.loads(replay.stdout) == {"replayed": 1, "ranges": 1, "topics": ["away"]}
    assert [m.text for m in back] == ["poison"]
    again_shown = json.loads(run_cli("dlq", "show", str(data), "--json", "--pending").stdout)
    assert [x["from_seq"] for x in again_shown["letters"]] == [3]


def test_an_archived_topic_outlives_its_publisher_and_its_owner(ring_factory):
    from dht.ids import key_id, owner_of

    ring = ring_factory()
    ring.start(4)
    ring.wait_consistent(timeout=60)
    owner_id = owner_of(sorted(n.id for n in ring.nodes), key_id("kept"))
    owner = next(n for n in ring.nodes if n.id == owner_id)
    others = [n for n in ring.nodes if n is not owner]
    with Client(others[0].endpoint, heartbeat=HB) as publisher:
        publisher.advertise("kept", archive=True, history=1000)
        for i in range(1, 1001):
            publisher.publish("kept", f"kept {i}")
    ring.kill(owner)  # SIGKILL: the archive must come from a replica
    ring.wait_consistent(timeout=60)
    with Client(others[1].endpoint, heartbeat=HB) as late:
        sub = late.subscribe("kept", history=1000)
        got: list = []
        drain(sub, got, 1000, timeout=30)
    assert [m.seq for m in got] == list(range(1, 1001))
    assert got[0].text == "kept 1" and all(m.recovered for m in got)


def test_the_cli_refuses_another_subscribers_data_dir_in_one_line(ring, tmp_path: Path):
    from tests.conftest import one_error_line, run_cli

    via = ring.nodes[0].endpoint
    with Client(via, name="first", data_dir=tmp_path / "d"):
        pass
    before = (tmp_path / "d" / FILE).read_bytes()
    one_error_line(run_cli("sub", "--via", via, "--topic", "t", "--durable", "second", "--data-dir",
                           str(tmp_path / "d"), "--seconds", "1"), "holds the state of client 'first'")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / FILE).write_bytes(b"\x00garbage" * 64)
    one_error_line(run_cli("pub", "--via", via, "--topic", "t", "--message", "x", "--data-dir", str(tmp_path / "bad")),
                   "not a usable client state file")
    one_error_line(run_cli("dlq", "show", str(tmp_path / "nothing-here")), "holds no client state")
    assert (tmp_path / "d" / FILE).read_bytes() == before
    assert (tmp_path / "bad" / FILE).read_bytes() == b"\x00garbage" * 64


@pytest.mark.parametrize(("subscribed", "topic"), [("late-ledger", "late-ledger"), ("late/*", "late/ledger")],
                         ids=["exact", "pattern"])
def test_a_publisher_met_later_keeps_its_first_messages_for_a_durable_subscriber(ring, tmp_path: Path,
                                                                                  monkeypatch, subscribed, topic):
    """A durable subscriber that meets a new publisher tells it its position before it connects: the
    publisher's first messages wait for the subscriber's filter (pubsub/advertising.py), so they go out
    only once the publisher keeps them for it. Here the publisher holds the acknowledgement back for a
    second: nothing comes meanwhile, and what comes after is kept (a restart could fetch it again).

    The same holds for a durable pattern's topic announced while it runs.

    To see it fail, connect to such a publisher at once (`_reconcile` without `met_later`): the first
    messages come before the acknowledgement is taken, and the publisher keeps none of them."""
    via = ring.nodes[1].endpoint
    with Client(via, heartbeat=HB, data_dir=tmp_path / "sub") as sub_client, Client(via, heartbeat=HB) as pub:
        sub = sub_client.subscribe(subscribed, durable="books")
        server, held = pub.io.service.server, []
        handle_frames = server.handle_frames

        def hold_acks(frames: list[bytes], principal: str | None = None) -> list[bytes] | None:
            body = msgpack.unpackb(frames[-1], raw=False)
            if body.get("op") == "acks" and not held:
                held.append(body["items"])
                return None  # answered by nobody: the subscriber's request times out
            return handle_frames(frames, principal)

        monkeypatch.setattr(server, "handle_frames", hold_acks)
        for i in range(3):
            pub.publish(topic, f"entry {i + 1}")
        wait_for(lambda: held, 20, what="the subscriber's position at the new publisher")
        assert sub.get(timeout=1.0) is None, "nothing comes before the publisher has our position"
        pub.io.publishing.ack([tuple(item) for item in held[0]])  # taken, late
        got = [sub.get(timeout=20) for _ in range(3)]
        assert [m.text for m in got if m is not None] == ["entry 1", "entry 2", "entry 3"]
        kept = pub.io.publishing.serve(topic, "range", lo=1)
        assert [m.seq for m in map(Envelope.decode, kept["messages"])] == [1, 2, 3], "kept for the subscriber"
