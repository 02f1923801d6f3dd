"""What every `chordpub` command shares: one-line errors, --json output, endpoints, --curve.

Bad input gives one clear line on stderr and a non-zero exit, never a traceback (the CLI contract,
docs/contracts.md); a report command given --json prints exactly one JSON object on stdout.
"""

from __future__ import annotations

import functools
import json
import signal
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

if TYPE_CHECKING:  # imported where used: `--help` and `--version` need neither ZeroMQ nor the ring
    import zmq

    from dht.client import DhtClient

EXIT_ERROR = 2
F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = EXIT_ERROR) -> None:
    typer.echo(f"chordpub: error: {message}", err=True)
    raise typer.Exit(code)


def plural(n: int, word: str) -> str:
    """'1 message', '2 messages': counts a person reads."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def clean_errors(fn: F) -> F:
    """Turn the errors a user can cause into one line on stderr and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.BadParameter):
            raise  # typer's own exits and usage errors (Exit is a RuntimeError)
        except Exception as exc:
            if _is(exc, "zmq", "ZMQError"):  # a bind that cannot happen: a port in use, an address not ours
                fail(f"{exc.strerror or exc}" + (f" ({zmq_hint(exc)})" if zmq_hint(exc) else ""))
            if not (_is(exc, "dht.client", "DhtError")
                    or isinstance(exc, ValueError | OSError | TimeoutError | RuntimeError)):
                raise  # dht.wire.WireError is a ValueError
            message = str(exc) or type(exc).__name__
            if "no reply from" in message and "--curve" not in message:
                message += " (is it running? a ring started with --curve serves only clients holding its keys)"
            fail(message)

    return wrapper  # type: ignore[return-value]


def _is(exc: BaseException, module: str, name: str) -> bool:
    """Whether `exc` is module.name, without importing the module: an error of a module that was
    never imported cannot have been raised."""
    loaded = sys.modules.get(module)
    return loaded is not None and isinstance(exc, getattr(loaded, name))


def check_source(source: str) -> None:
    if source not in ("live", "mininet"):
        fail(f"--source must be live or mininet, got {source!r}")


def check_vnodes(vnodes: int) -> None:
    from dht.ids import MAX_VNODES

    if not 1 <= vnodes <= MAX_VNODES:
        fail(f"--vnodes must be in 1..{MAX_VNODES} (ring positions in each node process), got {vnodes}")


CURVE_HELP = "CURVE keys directory (from `chordpub keys generate`): encrypt, and authenticate to the ring."


def curve_setup(curve: Path | None, role: str):  # -> SocketSetup | None
    """The socket hook for --curve DIR as `role`, with the ZAP authenticator running (None without)."""
    if curve is None:
        return None  # (dht.curve imports pyzmq's authenticator, and asyncio with it: 30 ms of a start)
    from dht.curve import socket_setup

    return socket_setup(curve, role)


CONNECT_TIMEOUT = 5.0


def connect_timeout_option() -> Any:
    return typer.Option(CONNECT_TIMEOUT, "--connect-timeout", min=0.01,
                        help="Seconds to wait for the first node to answer before giving up with an error.")


def dht_client(endpoint: str, curve: Path | None, connect_timeout: float = CONNECT_TIMEOUT,
               **client_options: Any) -> DhtClient:
    """A client for the one-shot commands, once `endpoint` has answered within `connect_timeout`
    seconds; a ring that runs --curve answers only with the keys. `client_options` go to DhtClient
    (timeout, retries)."""
    from dht.client import DhtClient, DhtError, contact

    client = DhtClient(endpoint_arg(endpoint), setup=curve_setup(curve, "client"), **client_options)
    try:
        contact(client.rpc, endpoint, connect_timeout)
    except DhtError:
        client.close()
        raise
    return client


def endpoint_arg(text: str, resolve: bool = True) -> str:
    """A H:P the user gave: well formed, and (unless `resolve` is False: a seed may not be in the DNS
    yet when a deployment starts) a host name that resolves, said at once rather than after a timeout."""
    from dht import wire

    host, _ = wire.parse_endpoint(text)
    if resolve:
        try:
            socket.getaddrinfo(host, None)
        except (socket.gaierror, UnicodeError) as exc:
            raise wire.WireError(f"cannot resolve host {host!r} of {text!r}: {getattr(exc, 'strerror', exc)}") from None
    return text


def output_file(path: Path | None, option: str) -> None:
    """Refuse, before any work, a file to write whose directory does not exist."""
    if path is not None and not path.parent.is_dir():
        fail(f"{option} {path}: the directory {path.parent} does not exist")


def emit(obj: dict, as_json: bool, human: Callable[[dict], str]) -> None:
    typer.echo(json.dumps(obj) if as_json else human(obj))


def peer_text(p: dict | None) -> str:
    return "none" if p is None else f"{p['endpoint']} ({p['id']})"


def zmq_hint(exc: zmq.ZMQError) -> str:
    import zmq

    if exc.errno == zmq.EADDRINUSE:
        return "another process listens on that port: pick another --port, or 0 for a free one"
    if exc.errno == zmq.EADDRNOTAVAIL:
        return "that address is not one of this machine's: check --host"
    return ""


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def log_level_option(default: str = "WARNING") -> Any:
    return typer.Option(default, "--log-level", help=f"Least severe log records kept: {', '.join(LOG_LEVELS)}.")


def log_file_option() -> Any:
    return typer.Option(None, "--log-file", help="Append log records to this file instead of standard error.")


def setup_logging(level: str, file: Path | None) -> None:
    """Logging for a long-running command: records at `level` and above, to `file` or standard error."""
    import logging
    import sys

    if level.upper() not in LOG_LEVELS:
        fail(f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    output_file(file, "--log-file")
    handler = logging.FileHandler(file) if file is not None else logging.StreamHandler(sys.stderr)
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


HOST_HELP = ("Address to bind and advertise: the one other machines reach this process at (0.0.0.0: bind every "
             "interface, advertise this machine's outward address).")


def bind_option() -> Any:
    return typer.Option(None, "--bind", metavar="ADDR", help="Bind here instead of --host (e.g. 0.0.0.0 in a "
                        "container); others are still told --advertise, else ADDR, else this machine's outward "
                        "address when ADDR is 0.0.0.0.")


def advertise_option() -> Any:
    return typer.Option(None, "--advertise", metavar="HOST[:PORT]", help="Tell others this address (and port, "
                        "when NAT or a container maps it) whatever is bound; a node's id is the hash of it.")


def listen_addresses(host: str, bind: str | None, advertise: str | None):  # -> dht.address.Listen
    """--host, --bind and --advertise resolved (dht/address.py), or one line and exit 2."""
    from dht.address import resolve

    try:
        return resolve(host, bind, advertise)
    except ValueError as exc:
        fail(str(exc))


def acl_option() -> Any:
    return typer.Option(None, "--acl", help="A policy file (TOML; docs/security.md): who may publish and subscribe "
                        "which topics, enforced here by each peer's CURVE key (needs --curve); read again "
                        "when it changes.")


def check_acl(acl: Path | None, curve: Path | None) -> None:
    """A policy needs keys, and must be readable and right before anything starts: one line, exit 2."""
    if acl is None:
        return
    from dht.policy import Policy, PolicyError

    if curve is None:
        fail("--acl needs --curve: without keys no peer has a name the policy could judge")
    try:
        Policy.load(acl)
    except PolicyError as exc:
        fail(str(exc))


def reload_on_sighup(policies: list) -> None:  # dht.policy.PolicyFile
    """SIGHUP reads the policy files again now (they are also read again whenever they change)."""
    if policies and hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, lambda *_: [p.reload() for p in policies])


def client_ports_option() -> Any:
    return typer.Option(0, min=0, max=65534, help="Listen on BASE (history, repair and probes) and BASE+1 (the PUB "
                        "socket) instead of free ports: for a firewall or a container's port map.")


def metrics_port_option() -> Any:
    return typer.Option(None, "--metrics-port", min=0, max=65535,
                        help="Serve Prometheus metrics on http://HOST:PORT/metrics (0: a free port, named in the "
                             "log); off by default.")


MODES = ("direct", "relay")


def check_mode(mode: str) -> None:
    if mode not in MODES:
        fail(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")


def stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def say_metrics(client) -> None:  # noqa: ANN001 - a chordpub.Client
    if client.metrics_endpoint:
        typer.echo(f"metrics on http://{client.metrics_endpoint}/metrics", err=True)
