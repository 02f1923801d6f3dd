"""`chordpub mininet run` / topologies.experiment on real Mininet: real processes in emulated hosts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from dht.curve import generate
from tests.conftest import one_error_line, run_cli
from topologies.experiment import Experiment, ExperimentConfig, ExperimentError
from traces.schema import normalize

pytestmark = pytest.mark.mininet


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(path.glob("*.jsonl")) for line in f.read_text().splitlines() if line]


def assert_complete(run_dir: Path, slots: int) -> dict:
    """manifest.json with topology, placement, versions and command; traces in the schema; one log per process."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["source"] == "mininet" and manifest["command"]
    assert {"spec", "hosts", "links", "diameter_ms", "emulation"} <= manifest["topology"].keys()
    assert {"chordpub", "pyzmq", "mininet", "kernel"} <= manifest["versions"].keys()
    assert len(manifest["placement"]) == slots and all(p["exit"] is not None for p in manifest["placement"])
    for table in ("lookups", "deliveries"):
        found = rows(run_dir / table)
        assert found, f"no {table} traced"
        for row in found:
            assert normalize(table, row)["source"] == "mininet"
    assert {f"{p['name']}.log" for p in manifest["placement"]} <= {f.name for f in (run_dir / "logs").iterdir()}
    return manifest


def test_single_4_with_5ms_links_every_delivery_crosses_two_links(clean_host, tmp_path):
    cfg = ExperimentConfig(topo="single,4", dht=2, pubs=1, subs=1, delay_ms=5.0, seconds=4, out=tmp_path, run="r")
    summary = Experiment(cfg).run()
    manifest = assert_complete(tmp_path / "r", slots=4)
    hosts = {p["role"]: p["host"] for p in manifest["placement"]}
    assert hosts["pub"] != hosts["sub"]
    deliveries = rows(tmp_path / "r" / "deliveries")
    assert len(deliveries) >= 20 and summary["deliveries"] == len(deliveries)
    assert min(d["latency_ms"] for d in deliveries) >= 10.0  # two 5 ms links one way
    assert summary["ring"]["consistent"] and summary["ring"]["nodes"] == 2


@pytest.mark.parametrize("mode", ["direct", "relay"])
def test_tree_with_four_nodes_two_publishers_two_subscribers(clean_host, tmp_path, mode):
    cfg = ExperimentConfig(topo="tree,fanout=2,depth=2", dht=4, pubs=2, subs=2, seconds=3, mode=mode,
                           out=tmp_path, run=mode)
    summary = Experiment(cfg).run()
    assert_complete(tmp_path / mode, slots=8)
    deliveries = rows(tmp_path / mode / "deliveries")
    assert {d["mode"] for d in deliveries} == {mode}
    assert {d["subscriber"] for d in deliveries} and len({d["publisher"] for d in deliveries}) == 2
    assert summary["modes"] == [mode] and summary["ring"]["nodes"] == 4


def test_the_acceptance_command_from_the_cli(clean_host, tmp_path):
    t0 = time.monotonic()
    proc = run_cli("mininet", "run", "--topo", "single,8", "--dht", "4", "--pubs", "2", "--subs", "2", "--delay",
                   "5ms", "--seconds", "12", "--out", str(tmp_path), "--run", "acc", "--json", timeout=90)
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    deliveries = rows(tmp_path / "acc" / "deliveries")
    assert summary["deliveries"] == len(deliveries) >= 2 * 2 * 100  # 2 publishers x 2 subscribers, 10/s
    assert min(d["latency_ms"] for d in deliveries) >= 10.0
    assert wall <= 90


def test_the_courses_shape_each_process_one_client_on_several_topics(clean_host, tmp_path):
    cfg = ExperimentConfig(topo="single,6", dht=2, pubs=2, subs=2, topics=3, topics_per_pub=2, topics_per_sub=2,
                           seconds=3, out=tmp_path, run="course")
    summary = Experiment(cfg).run()
    assert_complete(tmp_path / "course", slots=6)
    deliveries = rows(tmp_path / "course" / "deliveries")
    by_sub: dict[str, set[str]] = {}
    for d in deliveries:
        by_sub.setdefault(d["subscriber"], set()).add(d["topic"])
    assert sorted(map(sorted, by_sub.values())) == [["topic0", "topic1"], ["topic1", "topic2"]]
    assert set(summary["topics"]) == {"topic0", "topic1", "topic2"}
    assert all(t["deliveries"] > 0 and t["sent"] > 0 for t in summary["topics"].values())
    for name in ("sub1", "sub2"):
        report = json.loads((tmp_path / "course" / "logs" / f"{name}.json").read_text())
        assert len(report["topics"]) == 2 and report["received"] == sum(t["received"] for t in report["topics"])


def test_a_course_dht_json_forms_the_ring_with_its_ids(clean_host, tmp_path):
    """...with every process under --curve too (the course's hosts, our keys)."""
    course = {"dht": [{"id": f"dht{i}", "hash": h, "IP": f"10.0.0.{i}", "port": 5555, "host": f"h{i}"}
                      for i, h in ((1, 51000), (2, 7), (3, 30211), (4, 65535))]}
    (tmp_path / "dht.json").write_text(json.dumps(course))
    cfg = ExperimentConfig(topo="single,4,delay=1ms", pubs=1, subs=1, seconds=2, out=tmp_path, run="c",
                           dht_json=tmp_path / "dht.json", bits=16, curve=tmp_path / "keys")
    generate(tmp_path / "keys")
    summary = Experiment(cfg).run()
    manifest = json.loads((tmp_path / "c" / "manifest.json").read_text())
    nodes = [p for p in manifest["placement"] if p["role"] == "dht"]
    assert {(p["host"], p["id"]) for p in nodes} == {(e["host"], str(e["hash"])) for e in course["dht"]}
    assert {p["endpoint"] for p in nodes} == {f"{e['IP']}:{e['port']}" for e in course["dht"]}
    assert summary["ring"]["consistent"] and summary["ring"]["nodes"] == 4
    origins = {r["origin"] for r in rows(tmp_path / "c" / "lookups")}
    assert origins <= {str(e["hash"]) for e in course["dht"]} and origins
    assert summary["deliveries"] > 0


def test_a_failure_after_the_processes_started_leaves_nothing_behind(clean_host, tmp_path):
    cfg = ExperimentConfig(topo="single,3", dht=3, pubs=0, subs=0, seconds=1, out=tmp_path, run="f",
                           ring_timeout=0.0)
    with pytest.raises(ExperimentError, match="not consistent"):
        Experiment(cfg).run()
    assert len(list((tmp_path / "f" / "logs").glob("dht*.log"))) == 3  # they had started


def test_a_course_file_that_disagrees_with_the_network_is_refused(clean_host, tmp_path):
    (tmp_path / "dht.json").write_text(json.dumps(
        {"dht": [{"id": "dht1", "hash": 5, "IP": "10.0.0.9", "port": 5555, "host": "h1"}]}))
    proc = run_cli("mininet", "run", "--topo", "single,2", "--dht-json", str(tmp_path / "dht.json"), "--bits", "8",
                   "--out", str(tmp_path))
    one_error_line(proc, "10.0.0.9 is not h1's address 10.0.0.1")


@pytest.mark.parametrize("args, words", [
    (["--topo", "ring,4"], "unknown topology 'ring'"),
    (["--topo", "single,4", "--mode", "broadcast"], "mode must be one of"),
    (["--topo", "single,4", "--placement", "spread"], "placement must be one of"),
    (["--topo", "single,4", "--delay", "fast"], "delay must be a number"),
    (["--topo", "single,4", "--dht", "2", "--dht-json", "x.json"], "not both"),
    (["--topo", "single,4", "--topics", "2", "--topics-per-sub", "3"], "between 1 and --topics"),
])
def test_bad_options_get_one_line_and_start_nothing(clean_host, tmp_path, args, words):
    one_error_line(run_cli("mininet", "run", *args, "--out", str(tmp_path)), words)
    assert not any(tmp_path.iterdir())


def test_a_2x2x2_study_on_mininet_reports_every_point_with_spark(clean_host, tmp_path):
    from topologies.study import StudySpec, run_study

    spec = StudySpec.make({"pubs": [1, 2], "subs": [1, 2], "mode": ["direct", "relay"], "delay": ["2ms"]},
                          {"backend": "mininet", "seconds": 1, "stabilize": 0.3})
    summary = run_study(spec, tmp_path / "st")
    assert (summary["points"], summary["ran"], summary["skipped"]) == (8, 8, 0)
    again = run_study(spec, tmp_path / "st")
    assert (again["ran"], again["skipped"]) == (0, 8), "a finished study is not run again"
    report = run_cli("study", "report", str(tmp_path / "st"), "--json", timeout=300)
    assert report.returncode == 0, report.stderr
    points = json.loads(report.stdout)["points"]
    assert len(points) == 8 and all(p["topo"] == f"single,{2 + p['pubs'] + p['subs']}" for p in points)
    for p in points:
        manifest = json.loads((tmp_path / "st" / "runs" / p["runs"][0] / "manifest.json").read_text())
        assert manifest["source"] == "mininet" and manifest["summary"]["deliveries"] == p["deliveries"] > 0
        assert p["latency_p50_ms"] >= 4.0, "every delivery crosses two 2 ms links"
