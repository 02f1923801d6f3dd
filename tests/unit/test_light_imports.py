"""A node's and a client's start imports only what they use: numpy, numba, pyspark, grpc, matplotlib and
hypothesis belong to the simulator, the analysis, the gateway and the tests, and each costs a node or a
`chordpub sub` tens of milliseconds before its first socket (benchmarks/startup.py).

To see it fail: `import numpy as np` back at the top of pubsub/stats.py (a subscription's histogram)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("numpy", "numba", "pyspark", "grpc", "matplotlib", "hypothesis", "pandas", "networkx")


def test_the_node_and_client_commands_import_no_heavy_library():
    # what `chordpub node start`, `chordpub sub` and `chordpub pub` build, and the Python API's Client
    code = ("import sys\n"
            "from chordpub.cli import build\n"
            "for name in ('node', 'sub', 'pub', 'topic', 'ring'):\n"
            "    build(name)\n"
            "from chordpub import Client\n"
            "import dht.host, pubsub.relay\n"
            f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == []
