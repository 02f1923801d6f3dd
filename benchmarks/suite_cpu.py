"""The CPU-seconds of a command and of every process it starts, orphans included.

`/usr/bin/time make test` counts what the command's processes waited for. A process whose parent
exits without waiting for it is reparented to init, and its CPU is counted nowhere under `time`:
pyspark never waits for the driver JVM it starts (the JVM exits when its Python's pipe closes), so
every local Spark session's 15-25 CPU-seconds went uncounted. This runs the command as a child
subreaper (Linux's PR_SET_CHILD_SUBREAPER): the orphans are reparented here, reaped, and counted.

    python benchmarks/suite_cpu.py [--json] -- make test

prints the wall time, the CPU-seconds `time` would report ("waited"), those of the orphans, and
their sum, and exits with the command's status.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
DRAIN_S = 120.0  # how long to wait, after the command, for orphans still running


def _cpu(usage: object) -> float:
    return usage.ru_utime + usage.ru_stime  # type: ignore[attr-defined]


def run(argv: list[str]) -> dict:
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    t0 = time.monotonic()
    main = subprocess.Popen(argv)
    waited = orphans = 0.0
    code = None
    n_orphans = 0
    while code is None:
        pid, status, usage = os.wait4(-1, 0)
        if pid == main.pid:
            code, waited = os.waitstatus_to_exitcode(status), _cpu(usage)
        else:
            orphans, n_orphans = orphans + _cpu(usage), n_orphans + 1
    wall = time.monotonic() - t0
    deadline = time.monotonic() + DRAIN_S
    while time.monotonic() < deadline:
        try:
            pid, _, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid:
            orphans, n_orphans = orphans + _cpu(usage), n_orphans + 1
        else:
            time.sleep(0.5)
    return {"command": argv, "status": code, "wall_s": round(wall, 1), "cpu_s_waited": round(waited, 1),
            "cpu_s_orphans": round(orphans, 1), "orphans": n_orphans, "cpu_s": round(waited + orphans, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="Print one JSON object.")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="The command (after --), default: make test.")
    args = ap.parse_args()
    argv = [a for a in args.command if a != "--"] or ["make", "test"]
    result = run(argv)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{' '.join(argv)}: exit {result['status']}, {result['wall_s']} s; CPU-s {result['cpu_s']} = "
              f"{result['cpu_s_waited']} waited for + {result['cpu_s_orphans']} of {result['orphans']} orphans",
              file=sys.stderr)
    sys.exit(result["status"] if result["status"] >= 0 else 128 - result["status"])


if __name__ == "__main__":
    main()
