"""What a new user meets first: the version, the licence, and one clear line when Java is missing."""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.conftest import one_error_line, run_cli

ROOT = Path(__file__).resolve().parents[2]


def cli_without_java(args: list[str], env_java: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    """`chordpub ARGS` with PATH holding no java and JAVA_HOME as given, and a local master (not the suite's
    Spark Connect server's, whose JVM is not this process's: tests/plugin_spark.py)."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PATH", "SPARK_MASTER")}
    empty = tmp_path / "bin"
    empty.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "chordpub", *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, env={**env, "PATH": str(empty), **env_java}, cwd=tmp_path)


def test_version_is_the_packages():
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"chordpub {version('chordpub')}"


def test_the_licence_file_matches_setup_cfg():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert cfg["metadata"]["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run directory holding one valid lookup row."""
    run = tmp_path / "run"
    (run / "lookups").mkdir(parents=True)
    row = {"run": "r", "source": "live", "nodes": 2, "key_id": "5", "origin": "1", "owner": "7", "hops": 1,
           "timeouts": 0, "latency_ms": 0.5, "ok": True, "ts": time.time()}
    (run / "lookups" / "a.jsonl").write_text(json.dumps(row) + "\n")
    return run


@pytest.mark.parametrize("java", [{"JAVA_HOME": "/nonexistent/jdk"}, {}], ids=["JAVA_HOME-nowhere", "no-java"])
def test_analyze_without_java_says_so_in_one_line(run_dir, tmp_path, java):
    proc = cli_without_java(["analyze", str(run_dir)], java, tmp_path)
    one_error_line(proc, "Java", "install")
    assert "JAVA_GATEWAY" not in proc.stderr


def test_the_demo_checks_for_java_before_starting_anything(tmp_path):
    t0 = time.monotonic()
    proc = cli_without_java(["demo", "--out", str(tmp_path / "runs")], {"JAVA_HOME": "/nonexistent/jdk"}, tmp_path)
    one_error_line(proc, "Java", "/nonexistent/jdk")
    assert time.monotonic() - t0 < 30 and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command", [
    ("topo", "show", "single,3", "--png", "{missing}/t.png"),
    ("analyze", "{tmp}", "--out", "{missing}/out"),
    ("sub", "--via", "127.0.0.1:1", "--topic", "t", "--trace", "{missing}/t.jsonl"),
    ("pub", "--via", "127.0.0.1:1", "--topic", "t", "--message", "x", "--trace", "{missing}/t.jsonl"),
    ("sim", "stretch", "--png", "{missing}/s.png"),
])
def test_a_file_output_goes_only_where_its_directory_exists(command, tmp_path):
    missing = tmp_path / "no" / "such"
    proc = run_cli(*(a.format(missing=missing, tmp=tmp_path) for a in command))
    one_error_line(proc, "does not exist")
    assert not (tmp_path / "no").exists()
