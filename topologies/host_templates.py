"""`chordpub` commands (and the tree's other `python -m` scripts) on emulated hosts, forked from this
process's warm template.

A command started on a Mininet host (`host.popen`, i.e. `mnexec -a`) is a fresh interpreter that
imports a node's or a client's modules: about half a CPU-second before its first socket, and an
experiment or a partition test starts hundreds of them. dht/spawner.py forks local commands from a warm
template instead; here the fork then joins the host's network and mount namespaces (what `mnexec -a`
does), so the command binds and connects on that host. One template serves every host (a template
per host costs as much as it saves on a host that runs one or two commands).
"""

from __future__ import annotations

import os
from pathlib import Path

from dht.spawner import COMMAND_ARGV, ForkedProcess, shared


def fork_on_host(host, argv: list[str], log: str | os.PathLike,  # noqa: ANN001 - a mininet Host (`pid`: its shell's)
                 err: str | os.PathLike | None = None) -> ForkedProcess | None:
    """`argv` (a `python -m MODULE ...` command line: `chordpub`, or another module of this tree) forked
    on `host`, its output appended to `log` and its errors to `err` (None: to `log`); None when it is not
    such a command, or forking is off (CHORDPUB_FORK=0) or cannot serve: the caller starts it the
    ordinary way."""
    python_m = COMMAND_ARGV[:2]  # [this interpreter, "-m"]
    if argv[:2] != python_m or len(argv) < 3:
        return None
    spawner = shared()
    if spawner is None:
        return None
    return spawner.spawn(argv[3:], os.fspath(Path(log)), os.getcwd(), None if err is None else os.fspath(Path(err)),
                         namespaces_of=host.pid, module=argv[2])
