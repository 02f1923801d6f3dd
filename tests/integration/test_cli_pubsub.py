"""`chordpub pub` and `chordpub sub` carry real messages: text from --message and --stdin, printed."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import pytest
import zmq

from chordpub import Client
from chordpub.launcher import wait_for
from dht.client import DhtClient
from pubsub.directory import topic_info
from tests.conftest import one_error_line, run_cli, start_module_ring


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from start_module_ring(tmp_path_factory, "cli-pubsub-ring", 3)


def registered(via: str, topics: list[str]) -> bool:
    with DhtClient(via) as client:
        return all(topic_info(client, t)["subscribers"] >= 1 for t in topics)


# a subscriber ends at its --count; its --seconds only bounds a failure, generously: under a loaded
# machine starting a publisher's process alone can take seconds, and it all counts from the subscriber's start
UNTIL = "120"


def finished(proc, log) -> None:  # noqa: ANN001 - a Popen and the Path of its log
    """The subscriber ended by itself with status 0; its log otherwise."""
    code = proc.wait(timeout=float(UNTIL) + 30)
    assert code == 0, f"exit status {code}; its log:\n{log.read_text()}"


def test_stdin_lines_arrive_in_order_on_two_topics_as_json(ring, procs, tmp_path):
    via = ring.nodes[0].endpoint
    topics = ["logs/app", "logs/audit"]
    sub = procs("sub", "sub", "--via", ring.nodes[1].endpoint, "--topic", topics[0], "--topic", topics[1],
                "--print", "--format", "json", "--count", "6", "--seconds", UNTIL)
    wait_for(lambda: registered(via, topics), timeout=20, what="the subscriber registered")
    pub = subprocess.run([sys.executable, "-m", "chordpub", "pub", "--via", via, "--topic", topics[0],
                          "--topic", topics[1], "--stdin"], input="a\nb\nc\n", capture_output=True, text=True,
                         timeout=60)
    assert pub.returncode == 0, pub.stderr
    assert "published 3 messages" in pub.stderr
    finished(sub, tmp_path / "sub.log")
    out = (tmp_path / "sub.log").read_text().splitlines()
    rows = [json.loads(x) for x in out if x.startswith('{"topic"')]
    for topic in topics:
        mine = [r for r in rows if r["topic"] == topic]
        assert [r["payload"] for r in mine] == ["a", "b", "c"], out
        assert [r["seq"] for r in mine] == [1, 2, 3]
        assert all(set(r) == {"topic", "publisher", "seq", "latency_ms", "recovered", "redelivered", "payload"}
                   for r in mine)


def test_messages_and_binary_payloads_print_as_text_and_base64(ring, procs, tmp_path):
    via = ring.nodes[2].endpoint
    text = procs("text", "sub", "--via", via, "--topic", "greetings", "--print", "--count", "2", "--seconds", UNTIL)
    binary = procs("bin", "sub", "--via", via, "--topic", "bytes", "--print", "--format", "json", "--count", "1",
                   "--seconds", UNTIL)
    wait_for(lambda: registered(via, ["greetings", "bytes"]), timeout=20, what="subscribers registered")
    sent = run_cli("pub", "--via", via, "--topic", "greetings", "--message", "hello", "--message", "wörld")
    assert sent.returncode == 0, sent.stderr
    with Client(via) as client:
        client.publish("bytes", b"\xff\x00\xfe")
    finished(text, tmp_path / "text.log")
    finished(binary, tmp_path / "bin.log")
    lines = (tmp_path / "text.log").read_text().splitlines()
    assert lines[:2] == ["hello", "wörld"]
    summary = lines[2]
    assert summary.startswith("greetings: received 2 of 2 expected from 1 publisher (")
    row = json.loads((tmp_path / "bin.log").read_text().splitlines()[0])
    assert row["base64"] is True and base64.b64decode(row["payload"]) == b"\xff\x00\xfe"


@pytest.mark.parametrize("args,words", [
    (("pub", "--via", "127.0.0.1:5555", "--topic", "t", "--message", "x", "--stdin"), "one of --message"),
    (("pub", "--via", "127.0.0.1:5555", "--topic", "t", "--stdin", "--count", "3"), "one of --message"),
    (("sub", "--via", "127.0.0.1:5555", "--topic", "t", "--print", "--format", "xml"), "--format"),
    (("sub", "--via", "127.0.0.1:5555", "--topic", "t", "--topic", "t"), "twice"),
    (("sub", "--via", "127.0.0.1:5555", "--topic", "t", "--seconds", "1", "--trace", "/nonexistent/d/t.jsonl"),
     "does not exist"),
])
def test_pub_sub_usage_errors_are_one_line(args, words):
    one_error_line(run_cli(*args), words)


def test_a_dead_via_is_one_line_quickly():
    dead = zmq.Context.instance().socket(zmq.ROUTER)
    port = dead.bind_to_random_port("tcp://127.0.0.1")
    dead.close(linger=0)
    for cmd in ("pub", "sub"):
        quick = ("--via", f"127.0.0.1:{port}", "--topic", "t", "--connect-timeout", "0.5")
        proc = run_cli(cmd, *quick, "--seconds", "1", timeout=60) if cmd == "sub" else run_cli(cmd, *quick,
                                                                                                "--message", "x")
        one_error_line(proc, "no reply from")


def test_node_start_on_a_port_in_use_is_one_line(ring):
    port = ring.nodes[0].endpoint.rsplit(":", 1)[1]
    proc = run_cli("node", "start", "--port", port)
    one_error_line(proc, "Address already in use", "--port")


def test_asking_more_history_than_a_publisher_keeps_names_it_and_up_to_takes_what_it_keeps(ring, procs, tmp_path):
    via = ring.nodes[0].endpoint
    procs("pub", "pub", "--via", via, "--topic", "short-memory", "--history", "10", "--count", "20",
          "--rate", "200", "--linger", "60")
    with DhtClient(via) as client:
        wait_for(lambda: topic_info(client, "short-memory")["publishers"], timeout=20, what="the publisher")
    strict = run_cli("sub", "--via", via, "--topic", "short-memory", "--history", "50", "--seconds", "2")
    assert strict.returncode == 1
    last = strict.stderr.strip().splitlines()[-1]
    assert "0 publishers delivered from; 1 publisher not matched, as said above" in last, last
    assert "--history-up-to" in last
    said = [line for line in strict.stderr.splitlines() if "offers history 10 < requested 50: not matched" in line]
    assert len(said) == 1, strict.stderr
    lenient = run_cli("sub", "--via", via, "--topic", "short-memory", "--history", "50", "--history-up-to",
                      "--count", "10", "--seconds", "20", "--json")
    assert lenient.returncode == 0, lenient.stderr
    assert "not matched" not in lenient.stderr
    summary = json.loads(lenient.stdout)
    assert summary["received"] == 10 and summary["recovered"] == 10 and summary["publishers"] == 1, summary


def test_a_publisher_without_a_message_is_refused_and_a_file_is_sent_as_one_binary_message(ring, procs, tmp_path):
    one_error_line(run_cli("pub", "--via", ring.nodes[0].endpoint, "--topic", "x"), "--message", "--file",
                   "--synthetic")
    via = ring.nodes[1].endpoint
    blob = tmp_path / "blob.bin"
    blob.write_bytes(bytes(range(256)) * 3)
    sub = procs("blob", "sub", "--via", via, "--topic", "blobs", "--print", "--format", "json", "--count", "1",
                "--seconds", UNTIL)
    wait_for(lambda: registered(via, ["blobs"]), timeout=20, what="the subscriber registered")
    sent = run_cli("pub", "--via", via, "--topic", "blobs", "--file", str(blob))
    assert sent.returncode == 0 and "published 1 message on" in sent.stderr, sent.stderr
    finished(sub, tmp_path / "blob.log")
    row = json.loads((tmp_path / "blob.log").read_text().splitlines()[0])
    assert row["base64"] is True and base64.b64decode(row["payload"]) == blob.read_bytes()


def test_stdout_carries_only_the_data_asked_for(ring, tmp_path):
    """--print --format json: every stdout line is one message's JSON object; the summary goes to stderr
    (as JSON with --json); --quiet prints none."""
    via = ring.nodes[0].endpoint
    with Client(via) as client:
        client.advertise("plain-out", history=5)
        for i in range(5):
            client.publish("plain-out", f"m{i}")
        common = ["sub", "--via", via, "--topic", "plain-out", "--history", "5", "--count", "5", "--seconds", "20"]
        printed = run_cli(*common, "--print", "--format", "json", "--json")
        quiet = run_cli(*common, "--print", "--quiet")
        words = run_cli(*common)
    assert printed.returncode == 0, printed.stderr
    rows = [json.loads(line) for line in printed.stdout.splitlines()]
    assert [r["payload"] for r in rows] == [f"m{i}" for i in range(5)]
    assert json.loads(printed.stderr.strip().splitlines()[-1])["received"] == 5
    assert quiet.returncode == 0 and quiet.stdout.splitlines() == [f"m{i}" for i in range(5)]
    assert "received" not in quiet.stderr
    assert words.returncode == 0 and words.stdout == "" and "received 5 of 5" in words.stderr
