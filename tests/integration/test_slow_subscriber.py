"""A subscriber slower than its publishers: what it loses is counted and said, and its memory holds
flat however much it is sent (README, "A subscriber slower than its publishers is told").

Three limits take the strain, each tested here with its feature's line named:
- the high-water marks (publisher's SNDHWM, 10,000 frames, and subscriber's RCVHWM, 1000): an
  application that holds the io loop loses what overflows them (a frame carries a run of up to 64
  messages or 4 KiB when the publisher sends fast: 5 of these 1 kB messages); the gap is counted in
  `lost`/`gaps` when the next message shows it, and a warning says so once a heartbeat with the loss
  since the last one. To see it fail, remove the warning in `IoLoop._beat`, or make `SeqWindow.add`
  report no gaps;
- the subscription's `pending_limit`: an application that never takes its messages has what exceeds
  it dropped, counted in `dropped` and warned of. To see it fail, make `Subscription.deliver` keep
  every message (`room = len(messages)`): the count stays 0 and the process grows by the whole stream.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from chordpub import Client
from chordpub.launcher import stop_processes, wait_for
from tests.conftest import start_module_ring

HB = 0.2
PAYLOAD = b"x" * 1000  # 1 kB
BURST = 150_000  # 1 kB messages: more than the high-water marks' 11,000 frames of 5 and the socket buffers


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from start_module_ring(tmp_path_factory, "slow-ring", 2)


def test_a_subscriber_that_holds_its_loop_loses_at_the_high_water_marks_counts_it_and_says_so(ring, caplog):
    via = ring.nodes[0].endpoint
    gate = threading.Event()
    gate.set()
    seen: list[int] = []

    def slow(msg) -> None:  # noqa: ANN001
        seen.append(msg.seq)
        gate.wait(60)  # the application holds the io loop until the test lets it go

    with Client(via, heartbeat=HB) as publisher, Client(via, heartbeat=HB) as subscriber, \
            caplog.at_level(logging.WARNING, logger="pubsub.io_loop"):
        sub = subscriber.subscribe("slow", callback=slow)
        last = 0

        def settled() -> bool:
            """The subscriber has our newest message; else send one more (the newest may itself have
            been lost at a high-water mark, and only a later one shows the gap)."""
            nonlocal last
            if seen and seen[-1] == last:
                return True
            last = publisher.publish("slow", PAYLOAD)
            return False

        def loss_warnings() -> list[str]:
            return [r.getMessage() for r in caplog.records if "messages lost so far" in r.getMessage()]

        t0 = time.monotonic()
        for burst in (1, 2):
            gate.clear()
            last = publisher.publish("slow", PAYLOAD)  # the loop takes this one and stays in the callback
            wait_for(lambda n=last: seen and seen[-1] == n, 30, what="the callback holding the loop")
            for _ in range(BURST):
                last = publisher.publish("slow", PAYLOAD)
            gate.set()
            wait_for(settled, 60, interval=0.2, what="the newest message after the burst")

            def told_all() -> bool:
                said = loss_warnings()
                return bool(said) and f"{sub.lost} messages lost so far" in said[-1]

            wait_for(told_all, 10 * HB + 5, what=f"the loss warning of burst {burst}")
        elapsed = time.monotonic() - t0
        warnings = loss_warnings()
        summary = sub.summary()
    # each warning says the loss so far and the loss since the one before: once a heartbeat at most
    # (a burst drained across a heartbeat's edge is told in two), never once per message
    told = [tuple(map(int, re.search(r"(\d+) messages lost so far \((\d+) since", w).groups())) for w in warnings]
    assert 2 <= len(told) <= elapsed / HB + 1, (len(told), elapsed, warnings)
    assert all(since == total - before for (total, since), (before, _) in zip(told, [(0, 0), *told], strict=False))
    assert all(since > 0 for _, since in told), "no warning without new losses"
    told = told[-1][0]
    assert summary["lost"] == summary["gaps"] == told > 0
    assert summary["received"] == len(seen) and summary["received"] + summary["lost"] == last, \
        "every message either delivered or counted lost"
    assert summary["expected"] == last and summary["duplicates"] == 0
    print(f"slow subscriber: {summary['lost']} of {last} lost at the high-water marks in two bursts, "
          f"warned as {warnings}")


SUBSCRIBER = """
import json, sys
from chordpub import Client
with Client(sys.argv[1], heartbeat=0.2) as client:
    sub = client.subscribe(sys.argv[2], pending_limit=1000)  # and never takes a message
    print("ready", flush=True)
    for _ in sys.stdin:  # each line the test writes asks for the figures
        print(json.dumps({**sub.summary(), "queued": sub.pending}), flush=True)
"""


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def test_an_application_that_never_takes_its_messages_has_them_dropped_counted_and_its_memory_flat(ring):
    via = ring.nodes[1].endpoint
    proc = subprocess.Popen([sys.executable, "-c", SUBSCRIBER, via, "hoard"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()

        def figures() -> dict:
            proc.stdin.write("?\n")
            proc.stdin.flush()
            return json.loads(proc.stdout.readline())

        with Client(via, heartbeat=HB) as publisher:
            publisher.advertise("hoard")
            sent, rss = 0, []
            for target in (50_000, 150_000, 350_000):
                while sent < target:
                    sent += 1
                    publisher.publish("hoard", PAYLOAD)
                last = sent

                def through(last: int = last) -> dict | None:
                    nonlocal sent
                    f = figures()
                    if f["received"] + f["lost"] >= sent:
                        # the io loop counts a batch received before it hands it over or drops it:
                        # the figures are read from another thread, so wait until they agree
                        return f if f["received"] == f["dropped"] + f["queued"] else None
                    sent += 1  # the last message may be lost at a high-water mark: send another
                    publisher.publish("hoard", PAYLOAD)
                    return None

                f = wait_for(through, 60, interval=0.2, what=f"message {last} seen by the subscriber")
                rss.append(rss_mb(proc.pid))
    finally:
        stop_processes([proc], grace=5)
    stderr = proc.stderr.read()
    assert f["queued"] == 1000, "the queue holds pending_limit messages"
    assert f["dropped"] == f["received"] - 1000 > 100_000, "what did not fit was dropped and counted"
    assert "the application is not keeping up" in stderr and "messages dropped so far" in stderr
    assert f["received"] + f["lost"] == sent
    # flat: the allocator settles in the first messages; after, 200,000 more (200 MB of payloads, had
    # they been kept) move RSS by a few MB, whatever else the machine is doing
    assert rss[2] - rss[1] < 24 and rss[2] - rss[0] < 64, f"RSS {rss} MB at 50,000, 150,000 and 350,000 messages"
    print(f"hoarding subscriber: {f['dropped']} dropped of {f['received']} received, {f['lost']} lost at the "
          f"high-water marks; RSS {', '.join(f'{r:.1f}' for r in rss)} MB at 50,000, 150,000 and {sent} messages "
          f"of 1 kB")
