"""Exactly once into the application's database (pubsub/tx_positions.py): a durable subscriber whose
callback writes each message into its SQLite table, with `commit_with` its position committing in the
same transaction, is SIGKILLed 20 times, each at the first of random moments that finds it inside its
callback (each message has a fifth of a millisecond of work after its insert), while a publisher sends
50,000 messages with msg ids and is itself SIGKILLed and restarted 5 times (re-sending its last
messages with the same ids): the table holds every message once, in order. Without `commit_with`, the
same run leaves duplicates in the table, each flagged `redelivered`: the difference is the
transaction. Real processes throughout.

To see it fail: run the callbacks outside the transactions (`run_callbacks` not taking
`positions.run`): nothing commits the position, and every restart applies the messages again. (A
position committed apart from the callback's writes is caught here only when a kill falls between
the two; tests/unit/test_tx_positions.py dies there every time.)"""

from __future__ import annotations

import json
import os
import platform
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import closing
from pathlib import Path

import pytest

from chordpub import Client
from chordpub.launcher import wait_for
from tests.conftest import start_module_ring, start_ready

HB = 0.3
TOTAL = 50_000
SUB_KILLS = 20
PUB_RESTARTS = 5
SLICE, AHEAD = 250, 1_000  # the publisher's input is fed this far ahead of the table, so that the kills,
# spread over the table's rows, fall while messages flow (fed at once, it had all 50,000 in the table
# before the third kill, and the other 17 found an idle subscriber)
RESENT = 400  # a restarted publisher sends again its last messages, with the same ids


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from start_module_ring(tmp_path_factory, "exactly-once-consumer", 3)


def rows(db: Path) -> list[tuple[str, str, int, int]]:
    if not db.exists():
        return []
    with closing(sqlite3.connect(db, timeout=10)) as conn:
        try:
            return conn.execute("SELECT id, publisher, seq, redelivered FROM got ORDER BY rowid").fetchall()
        except sqlite3.OperationalError:  # the table is not made yet
            return []


class TableTail:
    """The rows the subscriber has committed to its table, read from where the last look stopped (by
    rowid: the table is only ever appended to): the feeder and the killer poll it every 20 ms, and a
    `count(DISTINCT id)` of 50,000 rows at that pace cost the test process more CPU than the run's
    subscribers. Shared by both threads."""

    def __init__(self, db: Path) -> None:
        self.db, self.last, self.rows, self.ids = db, 0, 0, set()
        self.lock = threading.Lock()

    def taken(self, distinct: bool = False) -> int:
        """Rows in the table (distinct orders with `distinct`)."""
        with self.lock:
            if self.db.exists():
                with closing(sqlite3.connect(self.db, timeout=10)) as conn:
                    try:
                        new = conn.execute("SELECT rowid, id FROM got WHERE rowid > ? ORDER BY rowid",
                                           (self.last,)).fetchall()
                    except sqlite3.OperationalError:  # the table is not made yet
                        new = []
                if new:
                    self.last = new[-1][0]
                    self.rows += len(new)
                    self.ids.update(order for _, order in new)
            return len(self.ids) if distinct else self.rows


CLOCK_NANOSLEEP = {"x86_64": "230", "aarch64": "115"}[platform.machine()]  # the syscall of time.sleep


def stopped_mid_callback(p: subprocess.Popen, rng: random.Random, deadline_s: float = 5.0) -> bool:
    """SIGSTOP the subscriber at random moments until one finds it inside its callback's work, after
    the insert (a thread in the clock_nanosleep of `--work-ms`: nothing else in a subscriber sleeps so),
    and leave it stopped there: True. False, and still stopped, when none did within the deadline."""
    end = time.monotonic() + deadline_s
    while True:
        p.send_signal(signal.SIGSTOP)
        while Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("T", "t"):
            pass  # the signal is taken at once; the state says when
        calls = {(Path(f"/proc/{p.pid}/task") / t / "syscall").read_text().split()[0]
                 for t in os.listdir(f"/proc/{p.pid}/task")}
        if CLOCK_NANOSLEEP in calls or time.monotonic() > end:
            return CLOCK_NANOSLEEP in calls
        p.send_signal(signal.SIGCONT)
        time.sleep(rng.uniform(0, 0.003))  # the next random moment to look at


def lines(ids: range) -> bytes:
    return b"".join(json.dumps({"id": f"o{i}"}).encode() + b"\n" for i in ids)


def crash_run(ring, tmp_path: Path, commit_with: bool) -> list[tuple[str, str, int, int]]:  # noqa: ANN001
    """The run both tests share; it checks that the subscriber was killed SUB_KILLS times, at least one
    of them mid-callback, and the publisher PUB_RESTARTS times before the table was full."""
    via = ring.nodes[0].endpoint
    db, topic = tmp_path / "app.sqlite3", f"ledger-{int(commit_with)}"
    table = TableTail(db)
    sub_args = ["--via", via, "--topic", topic, "--db", str(db), "--name", "books", "--work-ms", "0.2",
                *(["--commit-with"] if commit_with else ["--data-dir", str(tmp_path / "sub")])]
    pub_cmd = [sys.executable, "-m", "chordpub", "pub", "--via", via, "--topic", topic, "--stdin", "--reliable",
               "--msg-id-field", "id", "--data-dir", str(tmp_path / "pub"), "--heartbeat", str(HB), "--linger", "60"]
    rng = random.Random(7)
    subs: list[subprocess.Popen] = []
    pubs: list[subprocess.Popen] = []
    done = threading.Event()
    mid_callback: list[bool] = []

    def start_sub() -> subprocess.Popen:
        return start_ready("tests.helpers.tx_subscriber", sub_args, tmp_path / f"sub{len(subs)}.out",
                           tmp_path / "sub.err", "subscribed", subs)

    errors: list[BaseException] = []

    def killer() -> None:
        """The subscriber SIGKILLed once in each of SUB_KILLS + 1 even stretches of the run, at a random
        point of it, at the first random moment that finds it inside its callback (a kill at any other
        moment can leave nothing to apply again: CI run 36 had no duplicate in 20 such kills), and
        restarted."""
        try:
            stretch = TOTAL // (SUB_KILLS + 1)
            for k in range(1, SUB_KILLS + 1):
                at = k * stretch + rng.randint(-stretch // 3, stretch // 3)
                wait_for(lambda a=at: done.is_set() or table.taken() >= a, 120, interval=0.02,
                         what=f"the subscriber past {at} rows")
                if done.is_set():
                    return
                victim = subs[-1]
                mid_callback.append(stopped_mid_callback(victim, rng))
                victim.send_signal(signal.SIGKILL)
                victim.wait(10)
                start_sub()
        except BaseException as exc:  # noqa: BLE001 - said by the test's assertion
            errors.append(exc)

    with Client(via, heartbeat=HB):
        start_sub()
        killing = threading.Thread(target=killer, daemon=True)
        try:
            chunk = TOTAL // (PUB_RESTARTS + 1)
            fed_to = 0
            for run in range(PUB_RESTARTS + 1):
                pub = subprocess.Popen(pub_cmd, stdin=subprocess.PIPE, stderr=open(tmp_path / "pub.err", "a"))  # noqa: SIM115
                pubs.append(pub)
                start = max(1, fed_to - RESENT)  # its last messages sent again, with the same ids
                fed_to = TOTAL if run == PUB_RESTARTS else fed_to + chunk
                for lo in range(start, fed_to + 1, SLICE):
                    wait_for(lambda lo=lo: table.taken(distinct=True) >= lo - AHEAD, 90, interval=0.02,
                             what=f"the table within {AHEAD} orders of the publisher's input")
                    pub.stdin.write(lines(range(lo, min(lo + SLICE, fed_to + 1))))
                    pub.stdin.flush()
                    if run == 0 and lo == start:
                        killing.start()
                if run < PUB_RESTARTS:  # the table this close: the publisher has read all but the resent
                    wait_for(lambda f=fed_to: table.taken(distinct=True) >= f - RESENT // 2, 90,
                             what="the table near the end of this run's orders")
                    pub.send_signal(signal.SIGKILL)
                    pub.wait(10)
            killing.join(180)
            assert not errors, errors
            wait_for(lambda: table.taken(distinct=True) >= TOTAL, 120, interval=0.5,
                     what=f"all {TOTAL} orders in the table")
            assert (len(subs), len(pubs)) == (SUB_KILLS + 1, PUB_RESTARTS + 1), "fewer kills than the run is for"
            assert any(mid_callback), "no kill found the subscriber inside its callback"
        finally:
            done.set()
            for p in subs + pubs:
                if p.poll() is None:
                    p.kill()
                p.wait(10)
    return rows(db)


def test_with_commit_with_every_message_is_in_the_table_once_in_order(ring, tmp_path):
    got = crash_run(ring, tmp_path, commit_with=True)
    counts = Counter(r[0] for r in got)
    assert set(counts) == {f"o{i}" for i in range(1, TOTAL + 1)}
    assert max(counts.values()) == 1, [k for k, n in counts.items() if n > 1][:10]
    for publisher in {r[1] for r in got}:
        seqs = [r[2] for r in got if r[1] == publisher]
        assert seqs == sorted(seqs), "in order per publisher"
    assert not any(r[3] for r in got), "nothing comes back flagged: nothing was handed outside a transaction"


def test_without_commit_with_the_same_run_leaves_flagged_duplicates(ring, tmp_path):
    got = crash_run(ring, tmp_path, commit_with=False)
    counts = Counter(r[0] for r in got)
    assert set(counts) == {f"o{i}" for i in range(1, TOTAL + 1)}
    twice = {k for k, n in counts.items() if n > 1}
    assert twice, "at least once: the kills left messages delivered again"
    seen: set[str] = set()
    for order, _, _, redelivered in got:
        assert order not in seen or redelivered, f"{order} delivered again without the redelivered flag"
        seen.add(order)


GROUP_TOTAL = 10_000
MEMBER_KILLS = 5


def test_a_group_acking_with_commit_with_applies_each_message_once_while_a_member_is_killed(ring, tmp_path):
    """Three members of a consumer group insert each message they take into one shared SQLite table and
    ack with `commit_with` (pubsub/group_tx.py); one of them is SIGKILLed 5 times while they take
    10,000 messages, and restarted: what it had applied and not acked comes again to a member, finds
    its row, and is rolled back, so the table holds each message once. (Whether a kill falls between a
    member's commit and its ack is chance here: CI run 34 had none in 5 kills; tests/unit/test_group_tx.py
    applies a message twice every time, and catches an ack that commits whether or not its row was
    there.)"""
    via, topic = ring.nodes[1].endpoint, "invoices"
    db = tmp_path / "shared.sqlite3"
    members: list[subprocess.Popen] = []

    def start(i: int) -> subprocess.Popen:
        return start_ready("tests.helpers.worker", ["--via", via, "--topic", topic, "--group", "billing", "--out",
                                                    str(tmp_path / f"m{i}.jsonl"), "--db", str(db), "--heartbeat",
                                                    str(HB), "--prefetch", "50"],
                           tmp_path / f"m{i}-{len(members)}.out", tmp_path / f"m{i}.err", "ready", members)

    def applied() -> list[str]:
        if not db.exists():
            return []
        with closing(sqlite3.connect(db, timeout=30)) as conn:
            return [p for (p,) in conn.execute("SELECT payload FROM orders")]

    def taken(i: int) -> int:
        path = tmp_path / f"m{i}.jsonl"
        return path.read_text().count("\n") if path.exists() else 0

    try:
        victim = start(0)
        start(1)
        start(2)
        with Client(via, heartbeat=HB) as pub:
            feeding = threading.Thread(target=lambda: [pub.publish(topic, f"o{i}") for i in range(GROUP_TOTAL)])
            feeding.start()
            rng = random.Random(11)
            for _ in range(MEMBER_KILLS):
                before = taken(0)
                wait_for(lambda b=before: taken(0) >= b + rng.randint(20, 200) or len(applied()) >= GROUP_TOTAL,
                         60, interval=0.02, what="the member taking messages")
                victim.send_signal(signal.SIGKILL)
                victim.wait(10)
                victim = start(0)
            feeding.join(120)
            wait_for(lambda: len(set(applied())) >= GROUP_TOTAL, 120, interval=0.5,
                     what=f"all {GROUP_TOTAL} messages in the shared table")
    finally:
        for p in members:
            if p.poll() is None:
                p.kill()
            p.wait(10)
    got = Counter(applied())
    assert set(got) == {f"o{i}" for i in range(GROUP_TOTAL)}
    assert max(got.values()) == 1, [k for k, n in got.items() if n > 1][:10]
    skipped = sum((tmp_path / f"m{i}.jsonl").read_text().count('"skipped"') for i in range(3))
    print(f"{skipped} messages came again after they were applied, and were rolled back")
