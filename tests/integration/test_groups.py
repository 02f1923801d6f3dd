"""Consumer groups (work queues): each message of a topic to one live member of each group, by credit,
acknowledged, redelivered when a member fails or dies, key-ordered, prioritised, durable. Real node
processes, real Clients; members that are killed or restarted are processes of their own
(tests/helpers/worker.py).

To see them fail: make `GroupDispatch._most_free` return any member with free credit regardless of
prefetch (`m.free > -1`): a slow member then holds more than its prefetch; make `GroupDispatch.leave`
keep what the member held (return before `_take_back`): a killed member's messages come back only
after ack_wait, and the test's two heartbeats are exceeded; make `GroupDispatch.target` ignore
`_pinned`: a key's messages overtake each other when members change.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from chordpub import Client
from chordpub.launcher import stop_processes, wait_for
from tests.conftest import jsonl, start_module_ring

HB = 0.5


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from start_module_ring(tmp_path_factory, "groups-ring", 3)


@pytest.fixture
def workers(tmp_path: Path):
    """start(name, via, topic, group, **options) -> (process, output file); all stopped at teardown."""
    started: list[subprocess.Popen] = []

    def start(name: str, via: str, topic: str, group: str, **options: object) -> tuple[subprocess.Popen, Path]:
        out = tmp_path / f"{name}.jsonl"
        args = [sys.executable, "-m", "tests.helpers.worker", "--via", via, "--topic", topic, "--group", group,
                "--out", str(out), "--heartbeat", str(HB)]
        for k, v in options.items():
            args += [f"--{k.replace('_', '-')}"] + ([] if v is True else [str(v)])
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=open(tmp_path / f"{name}.log", "w"),  # noqa: SIM115
                             text=True, start_new_session=True)
        started.append(p)
        assert p.stdout.readline().strip() == "ready", (tmp_path / f"{name}.log").read_text()
        return p, out

    yield start
    stop_processes(started, grace=5)


def test_each_message_goes_to_one_member_and_every_plain_subscriber_gets_all(ring):
    via = [n.endpoint for n in ring.nodes]
    got: dict[str, list[tuple[str, int, bool]]] = defaultdict(list)
    plain: list[tuple[str, int]] = []
    lock = threading.Lock()

    def member(name: str):  # noqa: ANN202
        def take(m) -> None:  # noqa: ANN001
            with lock:
                got[name].append((m.publisher, m.seq, m.redelivered))
        return take

    clients = [Client(via[i % 3], heartbeat=HB) for i in range(6)]
    try:
        pubs, members, watcher = clients[:2], clients[2:5], clients[5]
        for p in pubs:
            p.advertise("orders", reliable=True)
        for i, c in enumerate(members):
            c.subscribe("orders", group="billing", callback=member(f"m{i}"))
        watcher.subscribe("orders", reliable=True, callback=lambda m: plain.append((m.publisher, m.seq)))
        for i in range(10_000):
            for p in pubs:
                p.publish("orders", f"order {i}")
        wait_for(lambda: sum(map(len, got.values())) >= 20_000 and len(plain) >= 20_000, 60,
                 what="20,000 messages to the group and to the plain subscriber")
    finally:
        for c in clients:
            c.close()
    everything = {(p.id, s) for p in pubs for s in range(1, 10_001)}
    delivered = [(pub, seq) for taken in got.values() for pub, seq, _ in taken]
    assert len(delivered) == len(set(delivered)) == 20_000 and set(delivered) == everything, "each to one member"
    assert not any(r for taken in got.values() for *_, r in taken), "no failure, so no redelivery"
    assert sorted(plain) == sorted(everything)
    shares = [len(got[f"m{i}"]) for i in range(3)]
    assert max(shares) <= 1.25 * min(shares), shares
    print(f"groups: 20,000 messages from 2 publishers shared {shares} by 3 members; the plain subscriber got all")


def test_a_slow_member_gets_less_never_more_than_its_prefetch_and_the_group_keeps_its_pace(ring):
    via = ring.nodes[0].endpoint
    prefetch, total = 20, 1500
    work = {"fast": 0.004, "slow": 0.040}  # seconds of work a message: the slow one is 10x slower
    got: Counter[str] = Counter()
    most_held: Counter[str] = Counter()
    subs = {}
    done = threading.Event()

    def member(name: str):  # noqa: ANN202
        def take(m) -> None:  # noqa: ANN001
            most_held[name] = max(most_held[name], subs[name]._state.held)
            time.sleep(work[name])  # the work
            got[name] += 1
            if sum(got.values()) >= total:
                done.set()
        return take

    with Client(via, heartbeat=HB) as publisher, Client(via, heartbeat=HB) as fast, \
            Client(via, heartbeat=HB) as slow:
        publisher.advertise("jobs")
        for name, c in (("fast", fast), ("slow", slow)):
            subs[name] = c.subscribe("jobs", group="crunch", prefetch=prefetch, callback=member(name))
        t0 = time.monotonic()
        for i in range(total):
            publisher.publish("jobs", str(i))
        assert done.wait(60), got
        took = time.monotonic() - t0
    capacity = sum(1 / w for w in work.values())
    rate = total / took
    assert max(most_held.values()) <= prefetch, most_held
    assert 0.05 <= got["slow"] / got["fast"] <= 0.2, got
    assert rate >= 0.8 * capacity, f"{rate:.0f} msg/s against {capacity:.0f} the members can handle"
    print(f"groups: fast {got['fast']}, slow {got['slow']} (0.1 expected), {rate:.0f} msg/s of {capacity:.0f} "
          f"({rate / capacity:.2f}); most held {dict(most_held)} (prefetch {prefetch})")


def test_a_member_killed_mid_stream_loses_nothing_and_its_messages_go_on_within_two_heartbeats(ring, workers):
    via = ring.nodes[1].endpoint
    victim, victim_out = workers("victim", via, "tasks", "w", delay=0.01, prefetch=50)
    _, a_out = workers("a", via, "tasks", "w", delay=0.002)
    _, b_out = workers("b", via, "tasks", "w", delay=0.002)
    total = 3000
    with Client(via, heartbeat=HB) as publisher:
        publisher.advertise("tasks")
        for i in range(total // 2):
            publisher.publish("tasks", str(i))
        wait_for(lambda: len(jsonl(victim_out)) >= 20, 30, what="the victim at work")
        victim.send_signal(signal.SIGKILL)
        killed_at = time.time()
        victim.wait(10)
        for i in range(total // 2, total):
            publisher.publish("tasks", str(i))

        def seen() -> set[int]:
            return {r["seq"] for f in (victim_out, a_out, b_out) for r in jsonl(f)}

        wait_for(lambda: seen() >= set(range(1, total + 1)), 60, what=f"all {total} taken by a member")
    records = sorted((r for f in (victim_out, a_out, b_out) for r in jsonl(f)), key=lambda r: r["t"])
    first: set[int] = set()
    unflagged = []
    for r in records:
        if r["seq"] in first and not r["redelivered"]:
            unflagged.append(r["seq"])
        first.add(r["seq"])
    assert not unflagged, f"delivered again without the redelivered flag: {unflagged[:10]}"
    again = [r for r in records if r["redelivered"]]
    assert again and all(r["deliveries"] >= 2 for r in again), "the victim died holding messages: they came again"
    lag = max(min(r["t"] for r in again if r["seq"] == s) for s in {r["seq"] for r in again}) - killed_at
    assert lag <= 2 * HB, f"the victim's messages went on {lag:.2f}s after its death (ack_wait is 30 s)"
    print(f"groups: {len({r['seq'] for r in again})} messages the killed member held went to the others within "
          f"{lag * 1000:.0f} ms of its death, all flagged; {total} of {total} delivered")
