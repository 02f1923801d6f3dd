"""Each CLI command's --json output and its error path, run as a user would run them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
import zmq

from chordpub.launcher import stop_processes, wait_for
from dht.ids import key_id, owner_of
from tests.conftest import one_error_line, run_cli, start_module_ring


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from start_module_ring(tmp_path_factory, "cli-ring", 5)


def dead_endpoint() -> str:
    """A loopback port nobody listens on (bound, then released)."""
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    sock.close(linger=0)
    return f"127.0.0.1:{port}"


def test_node_info_json(ring):
    node = ring.nodes[2]
    proc = run_cli("node", "info", node.endpoint, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {"id", "endpoint", "process", "positions", "bind", "predecessor", "successors", "fingers",
                        "keys", "pns", "records", "lookups_served", "neighbours_left", "remembered", "probes",
                        "probe_bytes", "merges", "services", "denials", "consensus"}
    assert out["process"] == node.endpoint and out["positions"] == [node.endpoint]  # one ring position
    assert out["denials"] == {}  # no policy, nothing refused
    assert set(out["services"]) == {"events", "relay_in", "relay_out", "consensus"}
    assert out["consensus"]["member"] == out["services"]["consensus"] and out["consensus"]["failures"] == 0
    assert out["pns"] == 8  # proximity neighbour selection is on by default
    assert all(set(f) == {"id", "endpoint", "rtt_ms"} for f in out["fingers"] if f is not None)
    ids = sorted(n.id for n in ring.nodes)
    pos = ids.index(node.id)
    assert out["id"] == node.id and out["endpoint"] == node.endpoint
    assert out["predecessor"]["id"] == ids[pos - 1]
    assert [s["id"] for s in out["successors"]] == [ids[(pos + j) % 5] for j in range(1, 5)]
    assert len(out["fingers"]) == 64 and isinstance(out["keys"], int)


def test_node_lookup_json(ring):
    proc = run_cli("node", "lookup", ring.nodes[0].endpoint, "sports/football", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {"key", "key_id", "owner", "hops", "path", "ms"}
    assert out["key_id"] == key_id("sports/football")
    assert out["owner"]["id"] == owner_of(sorted(n.id for n in ring.nodes), out["key_id"])
    assert out["hops"] == len(out["path"]) - 1 and out["ms"] > 0


def test_ring_check_json(ring):
    proc = run_cli("ring", "check", ring.nodes[3].endpoint, "--json", "--expect", "5")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["nodes"] == 5 and out["consistent"] is True and out["problems"] == []
    assert out["fingers_correct"] == 1.0
    wrong = run_cli("ring", "check", ring.nodes[3].endpoint, "--json", "--expect", "6")
    assert wrong.returncode == 1 and json.loads(wrong.stdout)["consistent"] is False


@pytest.mark.parametrize("args,words", [
    (("node", "info", "not-an-endpoint"), ("malformed endpoint",)),
    (("node", "lookup", "127.0.0.1:99999", "k"), ("port",)),
    (("ring", "check", "localhost"), ("malformed endpoint",)),
    (("node", "leave", "x:y"), ("malformed endpoint",)),
    (("node", "start", "--bits", "200", "--port", "0"), ("bits",)),
    (("node", "start", "--join", "nope", "--port", "0"), ("malformed endpoint",)),
])
def test_bad_input_gives_one_clear_line(args, words):
    one_error_line(run_cli(*args), *words)


@pytest.mark.parametrize("args", [("node", "info"), ("node", "lookup"), ("ring", "check"), ("node", "leave")])
def test_a_dead_node_gives_one_clear_line(args):
    endpoint = dead_endpoint()
    extra = ("key",) if args[1] == "lookup" else ()
    one_error_line(run_cli(*args, endpoint, *extra, "--connect-timeout", "0.5"), endpoint)  # (the default's
    # wait: test_bounded_waits)


def test_node_leave_and_start(tmp_path):
    ready = tmp_path / "n.ready"
    proc = subprocess.Popen([sys.executable, "-m", "chordpub", "node", "start", "--port", "0",
                             "--ready-file", str(ready), "--stabilize", "0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(ready.exists, timeout=30, what="node ready")
        endpoint = json.loads(ready.read_text())["endpoint"]
        out = run_cli("node", "leave", endpoint)
        assert out.returncode == 0 and "leaving" in out.stdout
        assert proc.wait(timeout=10) == 0
    finally:
        stop_processes([proc])


def test_ring_up_writes_the_file_and_stops_everything_on_sigterm(tmp_path):
    ring_file = tmp_path / "ring.json"
    log = open(tmp_path / "up.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "chordpub", "ring", "up", "--nodes", "4",
                             "--base-port", "0", "--file", str(ring_file), "--stabilize", "0.2",
                             "--log-dir", str(tmp_path / "logs")], stdout=log, stderr=subprocess.STDOUT)
    pids: list[int] = []
    try:
        wait_for(ring_file.exists, timeout=60, what="ring.json")
        nodes = json.loads(ring_file.read_text())["nodes"]
        assert len(nodes) == 4
        pids = [n["pid"] for n in nodes]
        wait_for(lambda: "consistent" in (tmp_path / "up.log").read_text(), timeout=60, what="consistent")
        check = run_cli("ring", "check", nodes[0]["endpoint"], "--json")
        assert check.returncode == 0 and json.loads(check.stdout)["nodes"] == 4
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        stop_processes([proc])
        log.close()

    def all_gone() -> bool:
        import os

        for pid in pids:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            return False
        return True

    wait_for(all_gone, timeout=10, what="node processes gone")


def test_demo_measures_lookups_and_both_dissemination_modes(tmp_path):
    from traces.schema import normalize

    proc = run_cli("demo", "--nodes", "4", "--lookups", "100", "--seconds", "3", "--json",
                   "--out", str(tmp_path), timeout=180)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["lookups"] == 100 and out["failed"] == 0
    assert set(out["pubsub"]) == {"direct", "relay"}
    for mode, topics in out["pubsub"].items():
        assert set(topics) == {"alpha", "beta"}
        for topic, r in topics.items():
            assert r["sent"] > 0 and r["delivered"] + r["lost"] == r["expected"]
            assert r["delivered"] >= 0.9 * r["expected"], (mode, topic, r)
            assert r["duplicates"] == 0
    run_dir = tmp_path / out["run_dir"].rsplit("/", 1)[-1]
    rows = [json.loads(line) for f in sorted((run_dir / "deliveries").glob("*.jsonl"))
            for line in f.read_text().splitlines()]
    assert {r["mode"] for r in rows} == {"direct", "relay"}
    for r in rows:
        assert normalize("deliveries", r) == r
    assert len(rows) == sum(t["delivered"] + t["duplicates"] for m in out["pubsub"].values() for t in m.values())
    # the demo ends with the Spark summary of the run it just made, and it agrees with the demo's own
    (lk,) = out["analysis"]["lookups"]
    assert lk["count"] == 100 and lk["nodes"] == 4 and lk["mean_hops"] == pytest.approx(out["mean_hops"], abs=1e-3)
    spark_counts = {(d["mode"], d["topic"]): d["count"] for d in out["analysis"]["deliveries"]}
    assert spark_counts == {(m, t): r["delivered"] + r["duplicates"] for m, ts in out["pubsub"].items()
                            for t, r in ts.items()}
    assert out["analysis"]["bad_rows"]["deliveries"]["count"] == 0


def test_help_shows_what_it_was_given_and_no_value_type_on_flags():
    """Every command's --help: flags carry no `<bool>` (they take no value) and square brackets in a
    help text are shown, not read as markup."""
    from typer.main import get_command
    from typer.testing import CliRunner

    from chordpub.cli import app

    def walk(cmd, path: list[str]):  # noqa: ANN001, ANN202 - a (typer-vendored) click command
        yield path
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, [*path, name])

    runner = CliRunner()
    root = get_command(app)
    paths = list(walk(root, []))
    assert len(paths) > 30
    for path in paths:
        out = runner.invoke(app, [*path, "--help"]).output
        assert "<bool>" not in out, (path, out)
    assert "[topic]" in runner.invoke(app, ["sub", "--help"]).output


def test_a_trace_in_a_missing_directory_and_a_host_that_does_not_resolve_are_said_at_once(tmp_path):
    started = time.monotonic()
    one_error_line(run_cli("node", "start", "--port", "0", "--trace", str(tmp_path / "nodir" / "t.jsonl")),
                   "does not exist")
    assert not (tmp_path / "nodir").exists()
    for cmd in (["sub", "--topic", "t", "--seconds", "1"], ["pub", "--topic", "t", "--message", "m"]):
        one_error_line(run_cli(*cmd, "--via", "no-such-host.invalid:5555"), "cannot resolve host")
    assert time.monotonic() - started < 15  # no connect timeout waited out (each is a fresh Python process)
