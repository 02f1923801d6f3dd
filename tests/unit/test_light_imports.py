"""A node's and a client's start imports only what they use: numpy, numba, pyspark, grpc, matplotlib and
hypothesis belong to the simulator, the analysis, the gateway and the tests, and each costs a node or a
`chordpub sub` tens of milliseconds before its first socket (benchmarks/startup.py). A simulator command
given bad input says so before it loads the simulator (numba, networkx: a second and more).

To see it fail: `import numpy as np` back at the top of pubsub/stats.py (a subscription's histogram), or
drop `check_ring(nodes, bits, virtual)` from `sim lookups` in chordpub/cli_sim.py (its bad --bits is then
found by the ring, after the simulator's imports)."""

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


def test_a_simulator_command_refuses_bad_input_before_it_loads_the_simulator():
    # `chordpub.cli.run` in a fresh interpreter: what it imported by the time it said what was wrong
    code = ("import sys\n"
            "from chordpub.cli import run\n"
            "for args in (('lookups', '--nodes', '10', '--lookups', '5', '--bits', '65'),\n"
            "             ('failures', '--nodes', '10', '--keys', '10', '--fail', '1'),\n"
            "             ('churn', '--rate', '0.1', '--stabilize', '0'), ('stretch', '--nodes', '1')):\n"
            "    try:\n"
            "        run('sim', *args)\n"
            "    except (RuntimeError, SystemExit) as exc:\n"
            "        print(repr(exc)[:80], file=sys.stderr)\n"
            "    else:\n"
            "        raise AssertionError(f'sim {args} was accepted')\n"
            "print(' '.join(m for m in ('numba', 'networkx') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [], f"imported before the error: {out.stdout.strip()} ({out.stderr.strip()})"
