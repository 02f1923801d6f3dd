"""A run directory written again under the same name holds the new run's traces only."""

from __future__ import annotations

import json

from traces.writer import JsonlWriter, make_run_dir, run_complete


def test_a_run_written_again_under_its_name_replaces_the_old_traces_and_keeps_other_files(tmp_path):
    """A notebook run twice in one tree once counted its keys twice: live writers append.

    To see it fail: drop the `shutil.rmtree` of `make_run_dir` (the first run's row is kept)."""
    rows = {"run": "r", "source": "live", "nodes": 4, "key_id": "1", "origin": "2", "owner": "3", "hops": 1,
            "timeouts": 0, "latency_ms": 0.5, "ok": True, "ts": 1.0}
    for _ in range(2):
        run_dir = make_run_dir(tmp_path, "r", {"n": 1})
        (run_dir / "load").mkdir(exist_ok=True)
        (run_dir / "load" / "keys.parquet").write_bytes(b"old")
        with JsonlWriter(run_dir / "lookups" / "live.jsonl", "lookups") as w:
            w.write(rows)
    assert (run_dir / "lookups" / "live.jsonl").read_text().count("\n") == 1, "the first run's row was kept"
    (run_dir / "notes.txt").write_text("mine")
    make_run_dir(tmp_path, "r", {"n": 2})
    assert not (run_dir / "load").exists() and not list((run_dir / "lookups").iterdir())
    assert (run_dir / "notes.txt").read_text() == "mine", "a file the user keeps there is not ours to remove"
    assert json.loads((run_dir / "manifest.json").read_text())["config"] == {"n": 2}
    assert not run_complete(run_dir)
