"""Settings from a TOML file for any option of any command; the command line wins; bad keys are one line."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import one_error_line, run_cli


def test_config_show_has_the_flag_win_over_the_file(tmp_path):
    cfg = tmp_path / "site.toml"
    cfg.write_text('[sub]\nvia = "10.0.0.1:7000"\nconnect-timeout = 3\ntopic = ["a", "b"]\n'
                   '[node.start]\nport = 6001\n')
    proc = run_cli("--config", str(cfg), "config", "show", "--json", "sub", "--via", "127.0.0.1:9")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    options = {o["option"]: o for o in out["options"]}
    assert options["--via"] == {"option": "--via", "value": "127.0.0.1:9", "from": "command line"}
    assert options["--connect-timeout"]["value"] == 3 and options["--connect-timeout"]["from"] == "config file"
    assert options["--topic"]["value"] == ["a", "b"]
    assert options["--mode"] == {"option": "--mode", "value": "direct", "from": "default"}
    nested = json.loads(run_cli("--config", str(cfg), "config", "show", "--json", "node", "start").stdout)
    assert {o["option"]: o["value"] for o in nested["options"]}["--port"] == 6001


def test_seeds_in_the_file_as_one_endpoint_or_a_list(tmp_path):
    for text, seeds in (('"10.0.0.1:5555"', ["10.0.0.1:5555"]),
                        ('["10.0.0.1:5555", "10.0.0.2:5555"]', ["10.0.0.1:5555", "10.0.0.2:5555"])):
        cfg = tmp_path / "seeds.toml"
        cfg.write_text(f"[node.start]\njoin = {text}\n")
        proc = run_cli("--config", str(cfg), "config", "show", "--json", "node", "start")
        assert proc.returncode == 0, proc.stderr
        assert {o["option"]: o["value"] for o in json.loads(proc.stdout)["options"]}["--join"] == seeds


def test_the_file_supplies_a_real_commands_options(tmp_path):
    """`sim lookups` with its required sizes from ./chordpub.toml, and one overridden on the command line."""
    (tmp_path / "chordpub.toml").write_text("[sim.lookups]\nnodes = 64\nlookups = 200\njson = true\n")
    proc = subprocess.run([sys.executable, "-m", "chordpub", "sim", "lookups", "--lookups", "300"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["nodes"], out["lookups"]) == (64, 300)


def test_a_bad_config_key_or_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[sub]\nvai = \"127.0.0.1:5555\"\n")
    one_error_line(run_cli("--config", str(bad), "sub"), "[sub] has no option 'vai'", "via")
    bad.write_text("[subscribe]\nvia = 1\n")
    one_error_line(run_cli("--config", str(bad), "config", "show"), "[subscribe] is not a command")
    bad.write_text("[sub\n")
    one_error_line(run_cli("--config", str(bad), "config", "show"), "not valid TOML")
    one_error_line(run_cli("--config", str(tmp_path / "none.toml"), "config", "show"), "does not exist")


def test_a_node_logs_to_its_log_file_at_its_level(procs, tmp_path):
    from chordpub.launcher import wait_for

    log, ready = tmp_path / "chord.log", tmp_path / "node.ready"
    node = procs("node", "node", "start", "--port", "0", "--ready-file", str(ready), "--log-file", str(log),
                 "--log-level", "INFO")
    wait_for(lambda: log.exists() and "INFO" in log.read_text() and "serving" in log.read_text(), 30,
             what="the node's log line in its log file")
    node.terminate()
    node.wait(timeout=20)
    assert "serving" not in (tmp_path / "node.log").read_text()  # its standard error: nothing went there
    one_error_line(run_cli("node", "start", "--port", "0", "--log-level", "LOUD"), "--log-level")
    one_error_line(run_cli("sub", "--via", "127.0.0.1:9", "--topic", "t", "--log-file", "/nonexistent/d/x.log"),
                   "--log-file")
