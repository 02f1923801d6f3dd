"""Idempotent publishing (pubsub/dedup.py): a message sent again with a msg id already sent within the
dedup window is not sent twice, within one process and across a publisher's SIGKILL and restart from
its data directory. Real node processes, a real `chordpub pub` process killed mid-stream.

To see it fail: keep the window only in memory (the journal writing no msg ids: `ids = []` in
`DataDir.journal`), and the restarted publisher sends again what its first run had sent."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from chordpub import Client
from chordpub.launcher import wait_for
from pubsub.dedup import DEDUP_BYTES, DEDUP_IDS
from tests.conftest import one_error_line, run_cli, start_module_ring
from tests.helpers.prometheus import scrape, value

HB = 0.3


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from start_module_ring(tmp_path_factory, "exactly-once", 3)


def lines(ids: range) -> bytes:
    return b"".join(json.dumps({"id": f"o{i}", "amount": i}).encode() + b"\n" for i in ids)


def test_a_publisher_killed_and_restarted_resends_with_the_same_ids_and_nothing_arrives_twice(ring, tmp_path: Path):
    """Orders o1..o400 go to `pub --stdin --msg-id-field id --data-dir D`, which is SIGKILLed after the
    subscriber has 150 of them (some lines read and not yet sent, some sent and not yet known to the
    feeder); a restarted publisher is fed again from o100: every order arrives once."""
    via = ring.nodes[0].endpoint
    data = tmp_path / "pub-data"
    cmd = [sys.executable, "-m", "chordpub", "pub", "--via", via, "--topic", "orders", "--stdin",
           "--msg-id-field", "id", "--data-dir", str(data), "--reliable", "--heartbeat", str(HB)]
    got: list[dict] = []
    with Client(via, heartbeat=HB) as sub_client:
        sub = sub_client.subscribe("orders", reliable=True, callback=lambda m: got.append(json.loads(m.payload)))
        first = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=open(tmp_path / "run1.err", "w"))  # noqa: SIM115
        try:
            first.stdin.write(lines(range(1, 301)))
            first.stdin.flush()
            wait_for(lambda: len(got) >= 150, 60, what="150 orders from the first run")
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        finally:
            first.kill()
        # the restarted publisher stays to serve repairs until the subscriber has everything (CI run 32:
        # on a loaded machine, one that left as soon as its input ended took unrepaired gaps with it)
        err_path = tmp_path / "run2.err"
        second = subprocess.Popen([*cmd, "--linger", "120"], stdin=subprocess.PIPE,
                                  stderr=open(err_path, "w"))  # noqa: SIM115
        try:
            second.stdin.write(lines(range(100, 401)))
            second.stdin.close()
            wait_for(lambda: len(got) >= 400, 60, what="all 400 orders")
            second.terminate()
            second.wait(30)
        finally:
            second.kill()
        err = err_path.read_bytes()
        assert second.returncode == 0, err
        assert sub.lost == 0
    counts = Counter(o["id"] for o in got)
    assert set(counts) == {f"o{i}" for i in range(1, 401)} and max(counts.values()) == 1, \
        [k for k, n in counts.items() if n > 1][:10]
    assert b"duplicate" in err, err  # the second run says how many it did not send again


def test_a_duplicate_is_not_sent_and_an_id_past_the_window_is(ring):
    """In one Client: the same id twice within the window sends once (the second publish returns the
    first one's number, flagged); past the window it is a new message, as documented."""
    via = ring.nodes[1].endpoint
    got: list[str] = []
    with Client(via, heartbeat=HB, dedup_window=0.5) as pub, Client(via, heartbeat=HB) as sub_client:
        sub_client.subscribe("payments", reliable=True, callback=lambda m: got.append(m.text))
        first = pub.publish("payments", "p1", msg_id="pay-1")
        again = pub.publish("payments", "p1 again", msg_id="pay-1")
        assert (first, first.duplicate, again, again.duplicate) == (1, False, 1, True)
        pub.publish("payments", "p2", msg_id="pay-2")
        wait_for(lambda: len(got) >= 2, 20, what="the two payments")
        window = pub.publications["payments"].dedup

        def forgotten() -> bool:
            window.expire(time.time_ns())
            return "pay-1" not in window

        wait_for(forgotten, 5, what="the id past its window")
        late = pub.publish("payments", "p1 late", msg_id="pay-1")
        assert not late.duplicate and late == 3
        wait_for(lambda: len(got) >= 3, 20, what="the id reused after the window")
    assert got == ["p1", "p2", "p1 late"]
    assert window.duplicates == 1


def test_a_get_users_transaction_commits_its_messages_with_its_writes_or_gives_them_back(ring, tmp_path):
    """`with sub.transaction() as conn:` (commit_with, no callback): what get() returned inside a block
    commits with the block's rows; a block that raises leaves no row and its message comes again,
    flagged; a subscriber started again on the same database resumes after the last committed block.
    To see it fail: give nothing back (`_give_back` a no-op), and the message of the failed block is
    never applied."""
    via = ring.nodes[0].endpoint
    db = sqlite3.connect(tmp_path / "app.db", check_same_thread=False)
    db.execute("CREATE TABLE got (seq INTEGER PRIMARY KEY)")
    with Client(via, heartbeat=HB) as pub:
        pub.advertise("invoices")  # known when the subscription is made: it retains for "books" from the start
        with Client(via, heartbeat=HB) as sub_client:  # (a publisher met later retains from the subscriber's
            # first acknowledgement on, which can come after its first messages: CI run 39 lost 3 so)
            sub = sub_client.subscribe("invoices", durable="books", commit_with=db)
            with pytest.raises(RuntimeError, match="commit_with"):
                with sub_client.subscribe("credit-notes").transaction():
                    pass
            for i in range(1, 4):
                pub.publish("invoices", f"i{i}")
            with sub.transaction() as conn:
                for _ in range(2):
                    m = sub.get(timeout=20)
                    conn.execute("INSERT INTO got VALUES (?)", (m.seq,))
            with pytest.raises(ZeroDivisionError), sub.transaction() as conn:
                m = sub.get(timeout=20)
                conn.execute("INSERT INTO got VALUES (?)", (m.seq,))
                raise ZeroDivisionError("the application fails after writing")
            assert [s for (s,) in db.execute("SELECT seq FROM got")] == [1, 2]
            again = sub.get(timeout=20)
            assert (again.seq, again.redelivered) == (3, True)
            # taken outside a block: never committed, so it comes again after a restart
        pub.publish("invoices", "i4")
        with Client(via, heartbeat=HB) as restarted:
            sub = restarted.subscribe("invoices", durable="books", commit_with=db)
            with sub.transaction() as conn:
                for _ in range(2):
                    m = sub.get(timeout=20)
                    conn.execute("INSERT INTO got VALUES (?)", (m.seq,))
            assert sub.get(timeout=0.5) is None
    assert [s for (s,) in db.execute("SELECT seq FROM got")] == [1, 2, 3, 4]


def test_a_window_over_its_bound_evicts_the_oldest_ids_and_topic_info_counts_them(ring):
    """100,005 msg ids within the window: its bound of 100,000 pushes the 5 oldest out, and `topic info`
    says so (the window, what it holds, the duplicates it did not send, the ids evicted), and so do the
    publisher's metrics; an evicted id
    is sent again (documented). To see it fail: evict without counting (`self.evicted += 1` gone in
    pubsub/dedup.py)."""
    via = ring.nodes[2].endpoint
    with Client(via, heartbeat=HB, metrics_port=0) as pub:
        for i in range(DEDUP_IDS + 5):
            pub.publish("receipts", b"r", msg_id=f"r{i}")
        assert pub.publish("receipts", b"r", msg_id=f"r{DEDUP_IDS}").duplicate
        info = run_cli("topic", "info", "receipts", "--via", via, "--json")
        assert info.returncode == 0, info.stderr
        (entry,) = json.loads(info.stdout)["publishers"]
        assert entry["dedup"] == {"window_s": 120.0, "max_ids": DEDUP_IDS, "max_bytes": DEDUP_BYTES,
                                  "ids": DEDUP_IDS, "bytes": entry["dedup"]["bytes"], "evicted": 5, "duplicates": 1}
        human = run_cli("topic", "info", "receipts", "--via", via)
        assert "1 duplicates not sent, 5 ids evicted" in human.stdout, human.stdout
        samples = scrape(pub.metrics_endpoint)
        assert value(samples, "chordpub_dedup_evicted_total", topic="receipts") == 5, samples
        assert value(samples, "chordpub_publish_duplicates_total", topic="receipts") == 1
        assert not pub.publish("receipts", b"r", msg_id="r0").duplicate  # evicted: a new message


def test_bad_terms_are_one_clear_error_and_subscribe_or_send_nothing(ring, tmp_path):
    via = ring.nodes[0].endpoint
    conn = sqlite3.connect(tmp_path / "app.db", check_same_thread=False)
    with Client(via, heartbeat=HB) as client:
        with pytest.raises(ValueError, match="sqlite3.Connection, not str"):
            client.subscribe("refunds", durable="books", commit_with="app.db")
        with pytest.raises(ValueError, match="commit_with goes with durable=NAME"):
            client.subscribe("refunds", commit_with=conn)
        client.subscribe("refunds", durable="books", commit_with=conn)  # nothing was subscribed before
        for bad in ("", "x" * 257):
            with pytest.raises(ValueError, match="a msg_id is 1..256 characters"):
                client.publish("credits", b"c", msg_id=bad)
        assert client.publish("credits", b"c", msg_id="c-1") == 1  # nothing was sent (or numbered) before
    for bad in ("", "x" * 257):
        one_error_line(run_cli("pub", "--via", via, "--topic", "credits", "--message", "m", "--msg-id", bad),
                       "--msg-id must be 1..256 characters")
