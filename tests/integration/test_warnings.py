"""No silent mismatch: a subscriber told of a publisher it will not receive (another mode) says so once
on stderr and in --json; a pattern on the command line is a pattern, and a malformed one is one line."""

from __future__ import annotations

import json

import pytest

from chordpub import Client
from tests.conftest import run_cli, start_module_ring


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from start_module_ring(tmp_path_factory, "warnings-ring", 3)


def test_a_publisher_of_another_mode_is_named_once(ring):
    topic = "mode-mismatch"
    with Client(ring.nodes[0].endpoint) as publisher:
        publisher.advertise(topic, mode="relay")
        publisher.publish(topic, "hello")
        proc = run_cli("sub", "--via", ring.nodes[1].endpoint, "--topic", topic, "--mode", "direct",
                       "--seconds", "2", "--json")
    assert proc.returncode == 1  # and nothing received
    out = json.loads(proc.stdout)
    (warning,) = out["warnings"]
    assert "relay mode" in warning and "direct" in warning
    said = [line for line in proc.stderr.splitlines() if "relay mode" in line]
    assert len(said) == 1, proc.stderr


def test_a_pattern_on_the_command_line_receives_its_topics_each_row_naming_its_topic(ring):
    with Client(ring.nodes[0].endpoint) as publisher:
        for topic in ("sports/tennis", "sports/golf", "news/tennis"):
            publisher.advertise(topic, reliable=True)
            publisher.publish(topic, topic)
        proc = run_cli("sub", "--via", ring.nodes[1].endpoint, "--topic", "sports/+", "--count", "2",
                       "--history", "1", "--print", "--format", "json", "--seconds", "20")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert sorted((r["topic"], r["payload"]) for r in rows) == [("sports/golf", "sports/golf"),
                                                            ("sports/tennis", "sports/tennis")]


@pytest.mark.parametrize("args", [("sub", "--topic", "sports/*x"), ("sub", "--topic", "*/x"),
                                  ("pub", "--topic", "sports/*", "--count", "1")])
def test_a_bad_pattern_or_a_wildcard_topic_published_is_one_line_and_exit_2(ring, args):
    proc = run_cli(args[0], "--via", ring.nodes[0].endpoint, *args[1:])
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr


def test_a_plain_subscription_has_no_warnings(ring):
    with Client(ring.nodes[0].endpoint) as publisher:
        publisher.publish("plain", "x")
        proc = run_cli("sub", "--via", ring.nodes[2].endpoint, "--topic", "plain", "--seconds", "1", "--json")
    assert json.loads(proc.stdout)["warnings"] == []
    assert "WARNING" not in proc.stderr
