"""A publisher that closes while a durable subscriber it knows is away hands what that subscriber lacks
to the ring (pubsub/archive.py, the hand-over): the subscriber returns to every message, or, where the
publisher's retention bounds let some go, to an exact range in its dead-letter queue. Real clients on a
live ring over loopback; the publisher has neither a data directory nor an archive.

To see it fail, make `Archives.hand_over` return at once: the returning subscriber gets nothing and
its dead-letter queue is empty.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from chordpub import Client
from chordpub.launcher import wait_for
from tests.conftest import run_cli, start_module_ring

HB = 0.3


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from start_module_ring(tmp_path_factory, "handover-ring", 3)


def drain(sub, got: list, n: int, timeout: float = 20) -> None:  # noqa: ANN001
    def enough() -> bool:
        while (m := sub.get(timeout=0.05)) is not None:
            got.append(m)
        return len(got) >= n

    wait_for(enough, timeout, what=f"{n} messages")


def away_while_published(via: str, topic: str, data: Path, **terms: object) -> str:
    """A durable subscriber takes 5 messages and leaves; the publisher sends 100 more and closes.
    Returns the publisher's id."""
    with Client(via, heartbeat=HB) as publisher:
        publisher.advertise(topic, **terms)
        with Client(via, heartbeat=HB, data_dir=data) as first:
            sub = first.subscribe(topic, durable="d")
            for i in range(1, 6):
                publisher.publish(topic, f"m{i}")
            drain(sub, [], 5)
            history = publisher.publications[topic].history
            wait_for(lambda: history.acked.get(f"{first.id}/d") == 5, 10, what="the publisher holding our ack of 5")
        for i in range(6, 106):
            publisher.publish(topic, f"m{i}")
        return publisher.id


def dead_letters(data: Path) -> list[dict]:
    shown = run_cli("dlq", "show", str(data), "--json")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)["letters"]


def test_a_returning_durable_subscriber_gets_every_message_its_gone_publisher_sent(ring, tmp_path: Path, caplog):
    data = tmp_path / "s"
    publisher = away_while_published(ring.nodes[0].endpoint, "handed", data)
    with Client(ring.nodes[1].endpoint, heartbeat=HB, data_dir=data) as again:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="pubsub"):
            sub = again.subscribe("handed", durable="d")
        # the archive serves a publisher that is gone: nothing live to confirm, and nothing said of it
        assert not [r for r in caplog.records if "confirm" in r.getMessage()], caplog.text
        got: list = []
        drain(sub, got, 100)
        assert sub.summary()["lost"] == 0
    assert [(m.publisher, m.seq) for m in got] == [(publisher, s) for s in range(6, 106)]
    assert got[0].text == "m6" and all(m.recovered for m in got)
    assert dead_letters(data) == []


def test_beyond_the_publishers_retention_the_dead_letter_queue_holds_the_exact_range(ring, tmp_path: Path):
    data = tmp_path / "s"
    publisher = away_while_published(ring.nodes[0].endpoint, "bounded", data, retain_messages=60)
    with Client(ring.nodes[2].endpoint, heartbeat=HB, data_dir=data) as again:
        sub = again.subscribe("bounded", durable="d")
        got: list = []
        drain(sub, got, 60)
        wait_for(lambda: dead_letters(data), 10, what="a dead letter")
        # a subscriber that never had a position with that publisher was owed nothing by it
        with Client(ring.nodes[0].endpoint, heartbeat=HB, data_dir=tmp_path / "new") as newcomer:
            fresh = newcomer.subscribe("bounded", durable="d")
            assert fresh.summary()["publishers"] == 0
    assert [m.seq for m in got] == list(range(46, 106)), "the 60 retained, archived at close"
    letters = dead_letters(data)
    assert [(x["publisher"], x["from_seq"], x["to_seq"], x["held"]) for x in letters] == [(publisher, 6, 45, False)]
    assert "archive" in letters[0]["reason"]
    assert dead_letters(tmp_path / "new") == []
