"""Node.js with @grpc/grpc-js and @grpc/proto-loader, for the tests that call the gateway from
JavaScript: installed from the npm registry once per machine into .venv/node-grpc (under a file lock:
test workers may ask at once)."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import IN_CI

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("@grpc/grpc-js@1", "@grpc/proto-loader@0.8")


def node_grpc_modules() -> Path:
    """The node_modules directory holding the packages (fails under CI=true without node; else skips)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        if IN_CI:
            pytest.fail("node and npm are not installed: the Node.js gRPC tests need them (Node.js 20)")
        pytest.skip("node is not installed")
    prefix = ROOT / ".venv" / "node-grpc"
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (prefix / "node_modules" / "@grpc" / "proto-loader").is_dir():
            proc = subprocess.run(["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", *PACKAGES],
                                  capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, f"npm install {' '.join(PACKAGES)} failed: {proc.stderr[-2000:]}"
    return prefix / "node_modules"
