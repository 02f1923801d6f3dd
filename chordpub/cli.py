"""The `chordpub` command: one typer app, one sub-app per area. Thin: parse, call, print.

Every report command takes --json and then prints exactly one JSON object on stdout. Bad input
gives one clear line on stderr and a non-zero exit, never a traceback (DESIGN.md, CLI contract).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from dht import wire
from dht.client import DhtClient, DhtError
from dht.ids import check_bits, key_id

EXIT_ERROR = 2
F = TypeVar("F", bound=Callable[..., Any])

app = typer.Typer(help="chordpub: DHT-based publish/subscribe over a Chord ring on ZeroMQ.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
node_app = typer.Typer(help="Run one discovery node, or query a running one.", no_args_is_help=True)
ring_app = typer.Typer(help="Start a local ring of node processes, or check a running ring.",
                       no_args_is_help=True)
app.add_typer(node_app, name="node")
app.add_typer(ring_app, name="ring")


def fail(message: str, code: int = EXIT_ERROR) -> None:
    typer.echo(f"chordpub: error: {message}", err=True)
    raise typer.Exit(code)


def clean_errors(fn: F) -> F:
    """Turn the errors a user can cause into one line on stderr and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.BadParameter):
            raise  # typer's own exits and usage errors (Exit is a RuntimeError)
        except (DhtError, wire.WireError, ValueError, OSError, TimeoutError, RuntimeError) as exc:
            message = str(exc) or type(exc).__name__
            if "no reply from" in message:
                message += " (is it running? a ring started with --curve serves only clients holding its keys)"
            fail(message)

    return wrapper  # type: ignore[return-value]


def check_source(source: str) -> None:
    if source not in ("live", "mininet"):
        fail(f"--source must be live or mininet, got {source!r}")


CURVE_HELP = "CURVE keys directory (from `chordpub keys generate`): encrypt, and authenticate to the ring."


def curve_setup(curve: Path | None, role: str):  # -> SocketSetup | None
    """The socket hook for --curve DIR as `role`, with the ZAP authenticator running (None without)."""
    from dht.curve import socket_setup

    return socket_setup(curve, role)


def dht_client(endpoint: str, curve: Path | None) -> DhtClient:
    """A client for the one-shot commands; a ring that runs --curve answers only with the keys."""
    return DhtClient(endpoint_arg(endpoint), setup=curve_setup(curve, "client"))


def endpoint_arg(text: str) -> str:
    wire.parse_endpoint(text)
    return text


def emit(obj: dict, as_json: bool, human: Callable[[dict], str]) -> None:
    typer.echo(json.dumps(obj) if as_json else human(obj))


def _peer_text(p: dict | None) -> str:
    return "none" if p is None else f"{p['endpoint']} ({p['id']})"


# -- node -------------------------------------------------------------------------------------------
@node_app.command("start")
@clean_errors
def node_start(
    host: str = typer.Option("127.0.0.1", help="Address to bind and advertise."),
    port: int = typer.Option(5555, help="Port to bind; 0 picks a free one."),
    join: str = typer.Option(None, help="Join the ring through this node (H:P); omit to create a ring."),
    id: int = typer.Option(None, "--id", help="Node id; default key_id('host:port')."),
    bits: int = typer.Option(64, help="Identifier bits (8..128); every node of a ring must agree."),
    successors: int = typer.Option(8, help="Successor-list length r."),
    replicas: int = typer.Option(3, help="Copies of each key: owner + replicas-1 successors."),
    stabilize: float = typer.Option(0.5, help="Seconds between maintenance rounds."),
    data_dir: Path = typer.Option(None, help="Keep the store in DIR/store.sqlite3; restarted with the same id "
                                  "the node rejoins with its keys."),
    trace: Path = typer.Option(None, help="Append this node's own lookups (fix_fingers) as JSON Lines."),
    run: str = typer.Option("live", help="Run name written in trace rows."),
    source: str = typer.Option("live", help="Source written in trace rows: live, or mininet for `mininet run`."),
    curve: Path = typer.Option(None, help=CURVE_HELP),
    ready_file: Path = typer.Option(None, help="Write {endpoint,id,pid} as JSON here once serving."),
    relay: bool = typer.Option(True, help="Also run a relay for the topics this node owns (--mode relay)."),
    log_level: str = typer.Option("INFO", help="Logging level."),
) -> None:
    """Run a discovery node in the foreground until SIGINT/SIGTERM, then leave the ring gracefully."""
    from dht.node import ChordNode, NodeConfig

    check_source(source)
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if join:
        endpoint_arg(join)
    config = NodeConfig(host=host, port=port, join=join, id=id, bits=check_bits(bits),
                        successors=successors, replicas=replicas, stabilize=stabilize, data_dir=data_dir)
    writer = None
    if trace is not None:
        from traces.writer import JsonlWriter

        writer = JsonlWriter(trace, "lookups")
    # the server thread must not wait 5 ms for the GIL while the maintenance thread computes
    sys.setswitchinterval(0.0005)
    relay_service = None
    setup = curve_setup(curve, "node")
    if relay:
        from pubsub.relay import Relay

        relay_service = Relay(host, setup=setup).start()
        config.services.update(relay_service.services)
    node = ChordNode(config, setup=setup)
    if writer is not None:
        lock = threading.Lock()

        def record(found: Any) -> None:
            with lock:
                writer.write({"run": run, "source": source, "nodes": None, "key_id": found.key_id,
                              "origin": node.me.id, "owner": found.owner.id if found.owner else None,
                              "hops": found.hops, "timeouts": found.timeouts, "latency_ms": found.ms,
                              "ok": found.ok, "ts": time.time()})

        config.on_lookup = record
    stop_requested = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop_requested.set())
    node.start()
    if ready_file is not None:
        tmp = Path(f"{ready_file}.tmp")
        tmp.write_text(json.dumps({"endpoint": node.endpoint, "id": node.me.id, "pid": os.getpid()}))
        os.replace(tmp, ready_file)
    logging.getLogger("chordpub").info("node %s id %d serving", node.endpoint, node.me.id)
    while not stop_requested.is_set() and not node.stopped.is_set():
        stop_requested.wait(0.2)
    if not node.stopped.is_set():
        node.leave()
        node.wait(timeout=3 * node.timeout + 1)
    node.stop()
    if relay_service is not None:
        relay_service.close()
    if writer is not None:
        writer.close()


@node_app.command("info")
@clean_errors
def node_info(endpoint: str = typer.Argument(..., help="The node, H:P."),
              curve: Path = typer.Option(None, help=CURVE_HELP),
              as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Show a node's id, predecessor, successor list, fingers and key count."""
    with dht_client(endpoint, curve) as client:
        info = client.info()
    out = {k: info[k] for k in ("id", "endpoint", "predecessor", "successors", "fingers", "keys")}

    def human(o: dict) -> str:
        distinct = []
        for f in o["fingers"]:
            if f is not None and f not in distinct:
                distinct.append(f)
        return "\n".join([
            f"node        {o['endpoint']}  id {o['id']}",
            f"predecessor {_peer_text(o['predecessor'])}",
            "successors  " + ", ".join(s["endpoint"] for s in o["successors"]),
            f"fingers     {len(distinct)} distinct: " + ", ".join(f["endpoint"] for f in distinct),
            f"keys        {o['keys']} owned",
        ])

    emit(out, as_json, human)


@node_app.command("lookup")
@clean_errors
def node_lookup(endpoint: str = typer.Argument(..., help="Start the lookup at this node, H:P."),
                key: str = typer.Argument(..., help="The key (a topic name)."),
                curve: Path = typer.Option(None, help=CURVE_HELP),
                as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Find the node that owns KEY, iteratively from ENDPOINT, with the path taken."""
    with dht_client(endpoint, curve) as client:
        found = client.lookup(key)
    if not found.ok:
        fail(f"lookup of {key!r} failed: {found.error}")
    out = {"key": key, "key_id": found.key_id, "owner": found.owner.to_dict(), "hops": found.hops,
           "path": found.path, "ms": round(found.ms, 3)}
    emit(out, as_json, lambda o: (f"{o['key']} (id {o['key_id']}) -> {_peer_text(o['owner'])} "
                                  f"in {o['hops']} hops, {o['ms']:.2f} ms via {' > '.join(o['path'])}"))


@node_app.command("leave")
@clean_errors
def node_leave(endpoint: str = typer.Argument(..., help="The node that should leave, H:P."),
               curve: Path = typer.Option(None, help=CURVE_HELP)) -> None:
    """Ask a node to leave the ring gracefully (it hands its keys to its successor and exits)."""
    with dht_client(endpoint, curve) as client:
        client.leave()
    typer.echo(f"{endpoint} is leaving the ring")


# -- ring -------------------------------------------------------------------------------------------
@ring_app.command("up")
@clean_errors
def ring_up(
    nodes: int = typer.Option(..., "--nodes", min=1, max=1024, help="How many node processes."),
    host: str = typer.Option("127.0.0.1", help="Address the nodes bind."),
    base_port: int = typer.Option(5555, help="Ports base-port .. base-port+N-1; 0 picks free ports."),
    file: Path = typer.Option(Path("ring.json"), help="Where to write the nodes' endpoints and ids."),
    bits: int = typer.Option(64, help="Identifier bits."),
    successors: int = typer.Option(8, help="Successor-list length r."),
    replicas: int = typer.Option(3, help="Copies of each key."),
    stabilize: float = typer.Option(0.5, help="Seconds between maintenance rounds."),
    log_dir: Path = typer.Option(None, help="Node logs go here (default: a temporary directory)."),
    wait: float = typer.Option(60.0, help="Seconds to wait for a consistent ring (0: don't wait)."),
    curve: Path = typer.Option(None, help=CURVE_HELP),
) -> None:
    """Start N nodes on this host joined to the first; stop them all on Ctrl-C or SIGTERM."""
    from chordpub.launcher import LocalRing

    check_bits(bits)
    workdir = log_dir or Path(tempfile.mkdtemp(prefix="chordpub-ring-"))
    options = {"bits": bits, "successors": successors, "replicas": replicas, "stabilize": stabilize,
               "curve": curve}
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with LocalRing(workdir, host, base_port, options, setup=curve_setup(curve, "client")) as ring:
        ring.start(nodes)
        ring.write_file(file)
        for n in ring.nodes:
            typer.echo(f"{n.endpoint}  id {n.id}")
        if wait > 0:
            report, took = ring.wait_consistent(wait)
            typer.echo(f"ring of {report['nodes']} nodes consistent after {took:.1f}s; "
                       f"endpoints in {file}, logs in {workdir}; Ctrl-C stops it")
        while not stop.is_set():
            if not ring.live:
                fail("every node has exited; see the logs in " + str(workdir))
            stop.wait(0.5)
        typer.echo("stopping the ring", err=True)


@ring_app.command("check")
@clean_errors
def ring_check(endpoint: str = typer.Argument(..., help="Any node of the ring, H:P."),
               expect: int = typer.Option(None, help="Also require exactly this many nodes."),
               curve: Path = typer.Option(None, help=CURVE_HELP),
               as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Walk the ring by successor pointers and compare it with the ideal ring (exit 0 iff consistent)."""
    from dht.ringcheck import check_ring

    with dht_client(endpoint, curve) as client:
        report = check_ring(client, expected=expect)

    def human(o: dict) -> str:
        lines = [f"nodes {o['nodes']}  consistent {o['consistent']}  fingers correct "
                 f"{o['fingers_correct']:.1%}  successor lists correct {o['successors_correct']:.1%}"]
        lines += [f"  problem: {p}" for p in o["problems"]]
        return "\n".join(lines)

    emit(report, as_json, human)
    if not report["consistent"]:
        raise typer.Exit(1)


# -- demo -------------------------------------------------------------------------------------------
@app.command("demo")
@clean_errors
def demo(seconds: float = typer.Option(10.0, min=0.0, help="Seconds of publishing, split between direct and "
                                      "relay mode (0: lookups only)."),
         out: Path = typer.Option(Path("runs"), help="Where the run directory goes."),
         nodes: int = typer.Option(8, min=1, max=256, help="Ring size."),
         lookups: int = typer.Option(1000, min=1, help="Lookups of random topic names."),
         curve: Path = typer.Option(None, help=CURVE_HELP + " Every process of the demo runs --curve."),
         as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """The main job: a local ring, lookups from random nodes, then 3 publishers and 3 subscribers on
    overlapping topics (direct, then relay), and what they measured."""
    from chordpub.demo import run_demo

    run_demo(nodes=nodes, lookups=lookups, seconds=seconds, out=out, as_json=as_json, curve=curve)


@app.command("keyid", hidden=True)
def keyid(key: str, bits: int = 64) -> None:
    typer.echo(str(key_id(key, bits)))


from chordpub import cli_analyze, cli_keys, cli_mininet, cli_pubsub, cli_sim, cli_topo  # noqa: E402,F401 - register their commands


def main() -> None:
    app()


if __name__ == "__main__":
    main()
