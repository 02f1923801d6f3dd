"""Every code block of README.md and docs/*.md marked `<!-- runs against a ring at 127.0.0.1:5555 -->`
runs as written against a real ring (the address replaced by the test ring's), exits 0 and prints no
traceback. To see it fail, put back the README's old first example (a subscription asking more history
than the publisher keeps, then `msg.topic` on the None that `get()` returns)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import start_module_ring

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- runs against a ring at 127.0.0.1:5555 -->"
BLOCK = re.compile(re.escape(MARK) + r"\n```(\w+)\n(.*?)\n```", re.S)
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def runnable_blocks() -> list[tuple[str, str, str]]:
    """(where, language, code) of each marked block; a mark not followed by a fenced block is an error."""
    found = []
    for doc in DOCS:
        text = doc.read_text()
        blocks = BLOCK.findall(text)
        assert len(blocks) == text.count(MARK), f"{doc.name}: a runnable mark without a fenced block right after it"
        for i, (lang, code) in enumerate(blocks):
            found.append((f"{doc.name}#{i + 1}", lang, code))
    return found


BLOCKS = runnable_blocks()


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from start_module_ring(tmp_path_factory, "docs-ring", 3)


def test_the_readme_marks_its_python_examples_runnable():
    assert sum(1 for where, lang, _ in BLOCKS if where.startswith("README.md") and lang == "python") >= 2


@pytest.mark.parametrize("where,lang,code", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_a_marked_example_runs_as_written(ring, tmp_path, where, lang, code):
    code = code.replace("127.0.0.1:5555", ring.nodes[0].endpoint)
    argv = [sys.executable, "-c", code] if lang == "python" else ["bash", "-euo", "pipefail", "-c", code]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                          env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, f"{where}:\n{proc.stdout}\n{proc.stderr}"
