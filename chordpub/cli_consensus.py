"""`chordpub elect`, `chordpub leader` and `chordpub kv`: leader election and linearizable keys through
the ring's consensus groups (dht/election.py, dht/consensus_client.py)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import time
from pathlib import Path

import typer

from chordpub.cli_common import (
    CURVE_HELP,
    clean_errors,
    connect_timeout_option,
    curve_setup,
    endpoint_arg,
    fail,
    log_file_option,
    log_level_option,
    setup_logging,
    stop_on_signals,
)
from dht.processes import die_with_parent_group, group_guard

VIA_HELP = "Any node of the ring, H:P."
TIMEOUT_HELP = "Seconds to wait for the name's group to answer (elections and retries included)."
kv_app = typer.Typer(help="Linearizable keys: put (compare-and-set with --if-version), get, delete.",
                     no_args_is_help=True)


def _client(via: str, curve: Path | None, connect_timeout: float, timeout: float = 5.0):  # noqa: ANN202
    from dht.client import contact
    from dht.consensus_client import ConsensusClient

    client = ConsensusClient(endpoint_arg(via), timeout=timeout, setup=curve_setup(curve, "client"))
    try:
        contact(client.rpc, via, connect_timeout)
    except BaseException:
        client.close()
        raise
    return client


def _say(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _kill(child: subprocess.Popen | None) -> None:
    if child is not None and child.poll() is None:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.wait()


@clean_errors
def elect(name: str = typer.Argument(..., help="The election's name (1..256 characters)."),
          via: str = typer.Option(..., help=VIA_HELP),
          lease: float = typer.Option(1.0, help="Seconds: a dead leader's name is free this long after its last "
                                      "renewal (renewed four times a lease). At least 0.2."),
          run: str = typer.Option(None, "--exec", help="A shell command to run while this process leads: started "
                                  "on each gain in its own process group, killed (SIGKILL, the whole group) before "
                                  "the lease can pass to anyone else, and never outliving this process."),
          candidate: str = typer.Option(None, help="This candidate's name (default: host:pid:random)."),
          curve: Path = typer.Option(None, help=CURVE_HELP),
          connect_timeout: float = connect_timeout_option(),
          log_level: str = log_level_option(),
          log_file: Path = log_file_option()) -> None:
    """Campaign for NAME until SIGINT/SIGTERM (then resign). Prints a JSON line on stdout each time this
    process gains or loses the name: {"event": "elected"|"lost", "name", "candidate", "epoch", "time"}.
    The epoch only grows: give it to what the leader writes to, so that an older leader is refused."""
    from dht.election import Election

    setup_logging(log_level, log_file)
    stop = stop_on_signals()
    client = _client(via, curve, connect_timeout, timeout=max(lease, 1.0))
    events: queue.Queue = queue.Queue()
    child: list[subprocess.Popen | None] = [None]

    def gained(epoch: int) -> None:
        _say({"event": "elected", "name": name, "candidate": e.candidate, "epoch": epoch, "time": time.time()})
        events.put("gain")

    def lost(epoch: int) -> None:
        _kill(child[0])  # here, at once: before the lease ends
        _say({"event": "lost", "name": name, "candidate": e.candidate, "epoch": epoch, "time": time.time()})
        events.put("loss")

    # the command is stopped a tenth of the lease before this process's lease ends, at most 0.1 s
    e = Election(client, name, candidate=candidate, lease=lease, on_gain=gained, on_loss=lost,
                 ahead=min(0.1, lease / 10))
    try:
        while not stop.is_set():
            try:
                what = events.get(timeout=0.2)
            except queue.Empty:
                if run is not None and child[0] is not None and child[0].poll() is not None and e.is_leader:
                    child[0] = None  # the command ended by itself while leading: it is not started again
                continue
            if what == "gain" and run is not None and e.is_leader:
                child[0] = subprocess.Popen(group_guard(run), preexec_fn=die_with_parent_group)  # noqa: PLW1509
    finally:
        e.resign()
        _kill(child[0])
        client.close()


@clean_errors
def leader(name: str = typer.Argument(..., help="The election's name."),
           via: str = typer.Option(..., help=VIA_HELP),
           as_json: bool = typer.Option(False, "--json", help='Print {"name", "leader", "epoch"} (leader null: none).'),
           timeout: float = typer.Option(5.0, min=0.01, help=TIMEOUT_HELP),
           curve: Path = typer.Option(None, help=CURVE_HELP),
           connect_timeout: float = connect_timeout_option()) -> None:
    """Who leads NAME now, read through its group's log (never an older leader than one already seen)."""
    with _client(via, curve, connect_timeout, timeout) as client:
        holder, epoch = client.leader(name)
    out = {"name": name, "leader": holder, "epoch": epoch}
    typer.echo(json.dumps(out) if as_json else f"{holder} (epoch {epoch})" if holder else "no leader")


def _refused(key: str, found: int, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps({"key": key, "version_found": found}))
    else:
        typer.echo(f"chordpub: refused: {key!r} is at version {found}" if found else
                   f"chordpub: refused: {key!r} does not exist", err=True)
    raise typer.Exit(1)


IF_HELP = "Compare-and-set: only if the key is at this version now (0: only if it does not exist); else exit 1."


@kv_app.command("put")
@clean_errors
def kv_put(key: str = typer.Argument(..., help="The key (1..256 characters)."),
           value: str = typer.Argument(..., help="The value (text; at most 64 KiB)."),
           via: str = typer.Option(..., help=VIA_HELP),
           if_version: int = typer.Option(None, "--if-version", help=IF_HELP),
           as_json: bool = typer.Option(False, "--json", help='Print {"key", "version"}.'),
           timeout: float = typer.Option(5.0, min=0.01, help=TIMEOUT_HELP),
           curve: Path = typer.Option(None, help=CURVE_HELP),
           connect_timeout: float = connect_timeout_option()) -> None:
    """Write KEY. Prints its new version (a refused compare-and-set: exit 1, {"key", "version_found"})."""
    from dht.consensus_client import VersionMismatch, check_name

    check_name(key, "key")
    if if_version is not None and if_version < 0:
        fail("--if-version is a version >= 0 (0: the key must not exist)")
    with _client(via, curve, connect_timeout, timeout) as client:
        try:
            version = client.put(key, value.encode(), if_version=if_version)
        except VersionMismatch as exc:
            _refused(key, exc.version_found, as_json)
    typer.echo(json.dumps({"key": key, "version": version}) if as_json else str(version))


@kv_app.command("get")
@clean_errors
def kv_get(key: str = typer.Argument(..., help="The key."),
           via: str = typer.Option(..., help=VIA_HELP),
           as_json: bool = typer.Option(False, "--json", help='Print {"key", "value", "version"} '
                                        '(value null: absent).'),
           timeout: float = typer.Option(5.0, min=0.01, help=TIMEOUT_HELP),
           curve: Path = typer.Option(None, help=CURVE_HELP),
           connect_timeout: float = connect_timeout_option()) -> None:
    """Read KEY through its group's log: its value on stdout (when absent: nothing there, a line on stderr)."""
    from dht.consensus_client import check_name

    check_name(key, "key")
    with _client(via, curve, connect_timeout, timeout) as client:
        value, version = client.get(key)
    if as_json:
        typer.echo(json.dumps({"key": key, "value": None if value is None else value.decode("utf-8", "replace"),
                               "version": version}))
        return
    if value is None:
        typer.echo(f"chordpub: {key!r} does not exist", err=True)
        return
    sys.stdout.buffer.write(value + b"\n")


@kv_app.command("delete")
@clean_errors
def kv_delete(key: str = typer.Argument(..., help="The key."),
              via: str = typer.Option(..., help=VIA_HELP),
              if_version: int = typer.Option(None, "--if-version", help=IF_HELP),
              as_json: bool = typer.Option(False, "--json", help='Print {"key", "deleted"}.'),
              timeout: float = typer.Option(5.0, min=0.01, help=TIMEOUT_HELP),
              curve: Path = typer.Option(None, help=CURVE_HELP),
              connect_timeout: float = connect_timeout_option()) -> None:
    """Delete KEY (a refused compare-and-set: exit 1, {"key", "version_found"})."""
    from dht.consensus_client import VersionMismatch, check_name

    check_name(key, "key")
    if if_version is not None and if_version < 0:
        fail("--if-version is a version >= 0")
    with _client(via, curve, connect_timeout, timeout) as client:
        try:
            deleted = client.delete(key, if_version=if_version)
        except VersionMismatch as exc:
            _refused(key, exc.version_found, as_json)
    typer.echo(json.dumps({"key": key, "deleted": deleted}) if as_json else "deleted" if deleted else "absent")

