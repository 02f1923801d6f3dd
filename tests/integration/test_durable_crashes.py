"""Nothing lost across crashes: a durable subscriber SIGKILLed mid-stream behind a lossy link, and a
publisher SIGKILLed and restarted from its data directory. Real `chordpub sub`/`pub` processes."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from chordpub import Client
from chordpub.launcher import wait_for
from dht.spawner import start as start_command
from pubsub.delivery import COMMIT_EVERY
from pubsub.durable import DataDir
from tests.conftest import JsonlTail, jsonl, start_module_ring
from tests.helpers.lossy import LossyLink, TcpForward
from tests.helpers.ports import free_consecutive

HB = 0.3


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from start_module_ring(tmp_path_factory, "crash-ring", 3)


def sub_args(via: str, topic: str, data: Path) -> list[str]:
    return ["sub", "--via", via, "--topic", topic, "--durable", "crashy", "--data-dir", str(data), "--print",
            "--format", "json", "--heartbeat", str(HB),
            "--log-level", "INFO"]  # (a publisher leaving the topic's record, or coming back, is said)


def committed(data: Path) -> int:
    """The durable subscription's committed position, read from its data directory (one publisher)."""
    reader = DataDir(data, create=False)  # the database and the log its writer had not folded
    try:
        ((position, _handed),) = reader.positions("crashy").values()
    finally:
        reader.close()
    return position


def test_a_durable_subscriber_killed_twice_behind_a_lossy_link_misses_nothing(ring, tmp_path: Path):
    """100,000 messages through a link that drops 5%, the subscriber SIGKILLed twice: every message
    once per run, in order, and nothing at or below the position committed at a kill comes again. To
    see it fail, make `Positions.start` forget what was handed (`return committed, 0`): the messages
    handed but not committed at a kill come again unflagged, when a kill falls between a hand and its
    commit, as it nearly always does (tests/unit/test_positions.py shows it every time). (Forgetting
    the committed position too goes unseen here: the publisher let go of what its durable subscriber
    acknowledged.)"""
    total = 100_000
    via = ring.nodes[0].endpoint
    data = tmp_path / "sub-data"
    outs = [tmp_path / f"run{i}.jsonl" for i in range(3)]
    runs: list[subprocess.Popen] = []
    committed_at_kill: list[int] = []

    def start(i: int) -> subprocess.Popen:
        p = start_command(sub_args(via, "crash", data), outs[i], tmp_path / f"run{i}.err")  # (forked: dht/spawner.py)
        runs.append(p)
        return p

    with Client(via, heartbeat=HB) as publisher:
        publisher.advertise("warm")  # binds the PUB socket, so that the link can sit in front of it
        link = LossyLink(publisher.publishing.endpoint, "crash", rate=0.05)
        try:
            publisher.publishing.endpoint = link.endpoint
            publisher.advertise("crash", reliable=True)
            history = publisher.publications["crash"].history
            start(0)
            wait_for(lambda: history.acked, 30, what="the durable subscriber's first ack")
            kills = {total * 3 // 10: 1, total * 6 // 10: 2}
            rate, t0 = 20_000, time.monotonic()
            for i in range(1, total + 1):
                publisher.publish("crash", f"{i}".encode())
                if i in kills:
                    runs[-1].send_signal(signal.SIGKILL)
                    runs[-1].wait(10)
                    committed_at_kill.append(committed(data))
                    start(kills[i])
                if i % 1000 == 0:
                    time.sleep(max(t0 + i / rate - time.monotonic(), 0))  # pacing the publisher, not syncing

            tails, seen_seqs = [JsonlTail(o) for o in outs], set()

            def delivered() -> set[int]:
                for tail in tails:
                    seen_seqs.update(r["seq"] for r in tail.new())
                return seen_seqs

            try:
                wait_for(lambda: len(delivered()) >= total, 120, interval=0.5, what=f"all {total} delivered")
            except TimeoutError as exc:  # what a stuck run needs to be understood
                got = delivered()
                missing = sorted(set(range(1, total + 1)) - got)
                said = [(tmp_path / f"run{i}.err").read_text(errors="replace")[-600:] for i in range(len(runs))]
                raise AssertionError(f"{exc}: {len(got)} delivered, missing {len(missing)} from {missing[:5]} to "
                                     f"{missing[-5:]}; the runs' stderr ends {said}") from None
        finally:
            for p in runs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in runs:
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
            link.close()
    rows = [jsonl(o) for o in outs]
    assert {r["seq"] for run in rows for r in run} == set(range(1, total + 1))
    for run in rows:
        seqs = [r["seq"] for r in run]
        assert seqs == sorted(seqs) and len(seqs) == len(set(seqs)), "in order, once, within a run"
    assert all(r["payload"] == str(r["seq"]) for run in rows for r in run)
    seen: set[int] = set()
    again, unflagged = 0, []
    for run in rows:
        for r in run:
            if r["seq"] in seen:
                again += 1
                if not r["redelivered"]:
                    unflagged.append(r["seq"])
            seen.add(r["seq"])
    assert not unflagged, f"delivered twice without the redelivered flag (a committed message): {unflagged[:10]}"
    for i, position in enumerate(committed_at_kill, 1):  # what was committed at a kill never comes again
        assert position > 0 and not [r["seq"] for r in rows[i] if r["seq"] <= position], (i, position)
    assert again <= 2 * COMMIT_EVERY, "redeliveries stay within the uncommitted window (one per kill)"
    assert link.dropped, "the link dropped messages: repairs happened"
    print(f"durable crash test: {total} delivered; {len(link.dropped)} dropped by the link and repaired; "
          f"{again} redelivered after 2 kills")


def test_a_publisher_killed_and_restarted_continues_its_sequence_and_repairs_the_gap(ring, procs,
                                                                                     tmp_path: Path):
    """The network between the publisher and its durable subscriber goes down, the publisher goes on
    sending for a while and is SIGKILLed; the network comes back and the publisher is restarted from
    its data directory. What it sent just before it died never reached the subscriber live: the
    restarted process must serve it from its journal, as a repair (recovered), in one sequence.

    The publisher binds 127.0.0.1 and advertises 127.0.0.2, where a LossyLink (its PUB socket) and a
    TcpForward (its history and repair service) stand in for the network. To see it fail, make
    `Publication.restore` keep none of the messages the data directory returns
    (`self.history.restore(last_seq, [])`): the missed range is then dead-lettered as "no longer
    retained by the publisher" and the sequence has a hole."""
    via = ring.nodes[1].endpoint
    base = free_consecutive(2, hosts=("127.0.0.1", "127.0.0.2"))
    link = LossyLink(f"127.0.0.1:{base + 1}", "phoenix", rate=0.0, bind=f"127.0.0.2:{base + 1}")
    service = TcpForward(("127.0.0.2", base), ("127.0.0.1", base))
    pub = ["pub", "--via", via, "--topic", "phoenix", "--count", "0", "--rate", "2000", "--size", "64",
           "--data-dir", str(tmp_path / "pub-data"), "--name", "phoenix-pub", "--heartbeat", str(HB),
           "--bind", "127.0.0.1", "--advertise", "127.0.0.2", "--ports", str(base)]
    try:
        with Client(via, heartbeat=HB, data_dir=tmp_path / "sub-data") as client:
            sub = client.subscribe("phoenix", durable="watcher")
            got: list = []

            def take(n: int) -> bool:
                """Drains at most a batch: the publisher sends for as long as the test runs, so draining
                until a pause would wait for one that may not come."""
                for _ in range(500):
                    if (m := sub.get(timeout=0.05)) is None:
                        break
                    got.append(m)
                return len(got) >= n

            first = procs("pub1", *pub)
            wait_for(lambda: take(3000), 30, what="3000 messages from the first publisher")
            link.cut = True  # the network goes down: nothing live, no repair
            service.hold()
            wait_for(lambda: len(link.dropped) >= 500, 30, what="500 messages sent into the cut")
            first.send_signal(signal.SIGKILL)
            first.wait(10)

            def caught_up() -> bool:  # what passed the link before the cut may still be on its way to us
                take(0)
                return max(m.seq for m in got) >= link.last_passed

            wait_for(caught_up, 30, what="every message that passed the link before the cut")
            last_before = max(m.seq for m in got)
            missed = set(link.dropped)
            link.cut = False
            service.release()
            procs("pub2", *pub)

            def restart_at() -> int | None:
                """Where the restarted process's live messages begin: it counts its synthetic payloads
                from 0 again."""
                ids = [int.from_bytes(m.payload[:8], "big") for m in got]
                return ids.index(0, 1) if 0 in ids[1:] else None

            def flowing_again() -> bool:
                take(0)
                at = restart_at()
                return at is not None and len(got) - at >= 2000

            wait_for(flowing_again, 60, what="2000 messages from the restarted publisher")
    finally:
        link.close()
        service.close()
    seqs = [m.seq for m in got]
    assert seqs == list(range(1, len(seqs) + 1)), "one sequence across the crash, no gap, no repeat"
    assert {m.publisher for m in got} == {"phoenix-pub"}
    assert min(missed) == last_before + 1, "the cut began after the last message that arrived live"
    repaired = [m for m in got if m.seq in missed]
    assert len(repaired) == len(missed) >= 500 and all(m.recovered for m in repaired), \
        "what the first process sent into the cut came from the restarted one's journal, as a repair"
    restart = restart_at()
    assert seqs[restart] > max(missed), "the restarted publisher numbers after everything it had sent"
    assert all(int.from_bytes(m.payload[:8], "big") == m.seq - 1 for m in repaired), "the first process's payloads"
    print(f"publisher restart: {len(missed)} messages sent into the cut before the kill, all repaired by the "
          f"restarted publisher ({sub.stats.recovered} recovered)")
