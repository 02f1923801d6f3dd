"""`chordpub` commands on emulated hosts, forked from a warm template inside each host.

A command started on a Mininet host (`host.popen`) is a fresh interpreter that imports a node's or a
client's modules: about half a CPU-second before its first socket, and an experiment or a partition
test starts hundreds of them. dht/spawner.py forks local commands from a warm template instead; a
template started inside a host's namespaces (through `host.popen`, as any command there) forks
commands that are on that host too. One template per host, started with the host's first command and
ended by `close`.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from dht.spawner import COMMAND_ARGV, TEMPLATE_ARGV, ForkedProcess, Spawner


class HostTemplates:
    """The templates of one network's hosts (a Mininet Host each: `name`, `popen`)."""

    def __init__(self) -> None:
        self._spawners: dict[str, Spawner] = {}

    def start(self, host, argv: list[str], log: str | os.PathLike,  # noqa: ANN001 - a mininet Host
              err: str | os.PathLike | None = None) -> ForkedProcess | None:
        """`argv` (a `python -m chordpub ...` command line) forked on `host`, its output appended to
        `log` and its errors to `err` (None: to `log`); None when it is not such a command or forking is
        off (CHORDPUB_FORK=0): the caller starts it the ordinary way."""
        if argv[: len(COMMAND_ARGV)] != COMMAND_ARGV or os.environ.get("CHORDPUB_FORK", "1") == "0":
            return None
        spawner = self._spawners.get(host.name)
        if spawner is None or not spawner.usable():
            if spawner is not None:
                spawner.close()
            # no new session for the template: mnexec would fork away from the pipes (topologies/hosts.py)
            spawner = Spawner(host.popen(TEMPLATE_ARGV, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         text=True, bufsize=1))
            self._spawners[host.name] = spawner
        return spawner.spawn(argv[len(COMMAND_ARGV):], os.fspath(Path(log)), os.getcwd(),
                             None if err is None else os.fspath(Path(err)))

    def close(self) -> None:
        """End every template (the commands they forked are their callers' to stop)."""
        for spawner in self._spawners.values():
            spawner.close()
        self._spawners.clear()
