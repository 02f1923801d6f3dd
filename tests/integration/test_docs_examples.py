"""Every code block of README.md and docs/*.md marked `<!-- runs against a ring at 127.0.0.1:5555 -->`
runs as written against a real ring (the address replaced by the test ring's), exits 0 and prints no
traceback. A block that names a gRPC gateway at 127.0.0.1:50051 gets one (`chordpub gateway` on a free
port, put in its place); a JavaScript block runs under Node.js from the repository's root, with
@grpc/grpc-js and @grpc/proto-loader (tests/helpers/node_grpc.py). To see it fail, put back the
README's old first example (a subscription asking more history than the publisher keeps, then
`msg.topic` on the None that `get()` returns)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from chordpub.launcher import stop_processes
from tests.conftest import start_module_ring
from tests.helpers.node_grpc import node_grpc_modules
from tests.helpers.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- runs against a ring at 127.0.0.1:5555 -->"
GATEWAY = "127.0.0.1:50051"
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


@pytest.fixture(scope="module")
def gateway(ring, tmp_path_factory):
    """`chordpub gateway` on a free port, for the examples that call one."""
    port = free_ports(1)[0]
    log = tmp_path_factory.mktemp("docs-gateway") / "gateway.log"
    proc = subprocess.Popen([sys.executable, "-m", "chordpub", "gateway", "--via", ring.nodes[0].endpoint, "--listen",
                             f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=open(log, "w"),  # noqa: SIM115
                            start_new_session=True)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
        yield f"127.0.0.1:{port}"
    finally:
        stop_processes([proc], grace=5)


@pytest.mark.parametrize("where,lang,code", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_a_marked_example_runs_as_written(request, ring, tmp_path, where, lang, code):
    code = code.replace("127.0.0.1:5555", ring.nodes[0].endpoint)
    if GATEWAY in code:
        code = code.replace(GATEWAY, request.getfixturevalue("gateway"))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    cwd = tmp_path
    if lang == "python":
        argv = [sys.executable, "-c", code]
    elif lang == "javascript":
        argv, cwd = ["node", "-e", code], ROOT  # (it loads the repository's .proto by its relative path)
        env["NODE_PATH"] = str(node_grpc_modules())
    else:
        argv = ["bash", "-euo", "pipefail", "-c", code]
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                          env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, f"{where}:\n{proc.stdout}\n{proc.stderr}"
    if lang == "javascript":
        assert proc.stdout.count("hello") == 3, proc.stdout
