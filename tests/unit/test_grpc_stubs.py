"""The checked-in gRPC stubs are what grpcio-tools makes of the repository's .proto, byte for byte."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_stubs_match_the_proto(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", str(ROOT / "proto"),
                           f"--python_out={tmp_path}", f"--grpc_python_out={tmp_path}",
                           str(ROOT / "proto" / "chordpub" / "v1" / "pubsub.proto")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for name in ("pubsub_pb2.py", "pubsub_pb2_grpc.py"):
        fresh = (tmp_path / "chordpub" / "v1" / name).read_text()
        assert fresh == (ROOT / "chordpub" / "v1" / name).read_text(), \
            f"chordpub/v1/{name} is stale: regenerate it (chordpub/v1/__init__.py says how)"
