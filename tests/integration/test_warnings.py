"""No silent mismatch: a subscriber told of a publisher it will not receive (another mode), or given a
topic that looks like a pattern, says so once on stderr and in --json."""

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


def test_a_topic_that_looks_like_a_pattern_is_taken_literally_and_said_so(ring):
    proc = run_cli("sub", "--via", ring.nodes[0].endpoint, "--topic", "sports/*", "--seconds", "1", "--json")
    out = json.loads(proc.stdout)
    (warning,) = out["warnings"]
    assert "'*'" in warning and "literally" in warning and "no wildcards" in warning
    assert sum("literally" in line for line in proc.stderr.splitlines()) == 1, proc.stderr


def test_a_plain_subscription_has_no_warnings(ring):
    with Client(ring.nodes[0].endpoint) as publisher:
        publisher.publish("plain", "x")
        proc = run_cli("sub", "--via", ring.nodes[2].endpoint, "--topic", "plain", "--seconds", "1", "--json")
    assert json.loads(proc.stdout)["warnings"] == []
    assert "WARNING" not in proc.stderr
