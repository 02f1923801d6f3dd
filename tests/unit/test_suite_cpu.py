"""benchmarks/suite_cpu.py counts the CPU of a process its parent never waited for (as pyspark never
waits for its driver JVM), which `/usr/bin/time` leaves out. To see it fail: drop the subreaper
(`prctl(PR_SET_CHILD_SUBREAPER, 1)` not called): the orphan goes to init and is counted nowhere."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "suite_cpu.py"
BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass"


def test_an_orphans_cpu_is_counted_beside_what_was_waited_for():
    busy = f"{sys.executable} -c '{BUSY.format(s=0.6)}'"
    command = f"({busy} &) ; {sys.executable} -c '{BUSY.format(s=0.1)}'"  # the subshell exits at once: an orphan
    proc = subprocess.run([sys.executable, str(SCRIPT), "--json", "--", "sh", "-c", command],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["orphans"] >= 1 and out["cpu_s_orphans"] >= 0.55, out
    assert 0.1 <= out["cpu_s_waited"] < 0.55 and abs(out["cpu_s"] - out["cpu_s_waited"] - out["cpu_s_orphans"]) <= 0.11
