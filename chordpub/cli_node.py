"""`chordpub node ...`: run one discovery node, or query a running one."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import typer

from chordpub.cli_common import (
    CURVE_HELP,
    HOST_HELP,
    acl_option,
    advertise_option,
    bind_option,
    check_acl,
    check_source,
    check_vnodes,
    clean_errors,
    connect_timeout_option,
    curve_setup,
    dht_client,
    emit,
    endpoint_arg,
    fail,
    listen_addresses,
    log_file_option,
    log_level_option,
    metrics_port_option,
    output_file,
    peer_text,
    reload_on_sighup,
    setup_logging,
)
from dht.ids import check_bits
from dht.pacing import QUIET_STRETCH

GO_WAIT = 600.0  # seconds `node lookups --go-file` waits for its turn

node_app = typer.Typer(help="Run one discovery node, or query a running one.", no_args_is_help=True)


@node_app.command("start")
@clean_errors
def node_start(
    host: str = typer.Option("127.0.0.1", help=HOST_HELP),
    port: int = typer.Option(5555, help="Port to bind; 0 picks a free one."),
    bind: str = bind_option(),
    advertise: str = advertise_option(),
    join: list[str] = typer.Option(None, help="Seeds: join the ring through the first of these nodes that "
                                   "answers (H:P, comma-separated or repeated). Give every node the same list: a "
                                   "node named in it starts a new ring when none of the others answers. Omit to "
                                   "create a ring (or, with --data-dir, to rejoin the one this node was in)."),
    connect_timeout: float = typer.Option(5.0, "--connect-timeout", min=0.01, help="With --join naming only "
                                          "other nodes: give up (exit status 2) when the ring cannot be joined "
                                          "within this many seconds."),
    probe_every: float = typer.Option(None, "--probe-every", min=0, max=3600, help="Seconds between probes of "
                                      "one remembered node outside the routing table, which find and merge a "
                                      "split ring (default: 2 stabilize periods; 0: never)."),
    quiet_stretch: int = typer.Option(QUIET_STRETCH, "--quiet-stretch", min=1, max=8, help="A position whose "
                                      "rounds change nothing doubles the gap between them up to this many "
                                      "stabilize periods, and is back to every period at the first closed "
                                      "connection, unanswered call or new neighbour (1: every period, which "
                                      "costs an idle node about four times the CPU; a silent peer is found up "
                                      "to that many periods later)."),
    id: int = typer.Option(None, "--id", help="Node id (of its first position, with --vnodes); default key_id of "
                           "the advertised 'host:port'."),
    vnodes: int = typer.Option(1, "--vnodes", help="Ring positions (virtual nodes) this process holds, 1..256: "
                               "position i > 0 is 'host:port/i' with the id of that string, all behind one socket; "
                               "they spread the process's share of the keys (Chord's Fig. 9)."),
    bits: int = typer.Option(64, help="Identifier bits (8..128); every node of a ring must agree."),
    successors: int = typer.Option(8, help="Successor-list length r."),
    replicas: int = typer.Option(3, help="Copies of each key: owner + replicas-1 successors."),
    stabilize: float = typer.Option(0.5, help="Seconds between maintenance rounds."),
    pns: int = typer.Option(8, min=0, max=64, help="Proximity neighbour selection: each finger is the node with "
                            "the lowest measured round trip among up to K of its interval (0: plain Chord)."),
    prs: bool = typer.Option(False, "--prs", help="Proximity route selection for the last hop: a key this node's "
                             "successor list covers is answered with its owner at once (one hop fewer)."),
    data_dir: Path = typer.Option(None, help="Keep the store in DIR/store.sqlite3; restarted with the same id "
                                  "the node rejoins with its keys."),
    trace: Path = typer.Option(None, help="Append this node's own lookups (fix_fingers) as JSON Lines."),
    run: str = typer.Option("live", help="Run name written in trace rows."),
    source: str = typer.Option("live", help="Source written in trace rows: live, or mininet for `mininet run`."),
    curve: Path = typer.Option(None, help=CURVE_HELP),
    acl: Path = acl_option(),
    ready_file: Path = typer.Option(None, help="Write {endpoint,id,pid} as JSON here once serving."),
    relay: bool = typer.Option(True, help="Also run a relay for the topics this node owns (--mode relay)."),
    ports: int = typer.Option(0, min=0, max=65532, help="Listen on BASE..BASE+3 for the node's other "
                              "sockets (events, relay in, relay out, consensus) instead of free ports: what a "
                              "firewall or a container's port map needs besides --port."),
    log_level: str = log_level_option("INFO"),
    log_file: Path = log_file_option(),
    metrics_port: int = metrics_port_option(),
) -> None:
    """Run a discovery node in the foreground until SIGINT/SIGTERM, then leave the ring gracefully."""
    from dht.host import ChordHost
    from dht.node_config import NodeConfig, seed_list

    check_vnodes(vnodes)
    check_source(source)
    output_file(trace, "--trace")
    setup_logging(log_level, log_file)
    seeds = seed_list(join)
    for seed in seeds:
        endpoint_arg(seed, resolve=False)
    listen = listen_addresses(host, bind, advertise)
    check_acl(acl, curve)
    config = NodeConfig(host=listen.host, port=port, bind=listen.bind, advertise_port=listen.port,
                        join=seeds or None, id=id, bits=check_bits(bits),
                        successors=successors, replicas=replicas, stabilize=stabilize, data_dir=data_dir,
                        pns=pns, prs=prs, join_timeout=connect_timeout, probe_every=probe_every, ports=ports,
                        acl=acl, vnodes=vnodes, quiet_stretch=quiet_stretch)
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

        relay_service = Relay(listen.bind, setup=setup, advertise=listen.host,
                              ports=(ports + 1, ports + 2) if ports else (0, 0), acl=acl).start()
        config.services.update(relay_service.services)
    node = ChordHost(config, setup=setup)
    node.relay = relay_service
    hops = None
    if metrics_port is not None:
        from dht.metrics import LookupHops

        hops = LookupHops()
    lock = threading.Lock()

    def record(found: Any, origin: int) -> None:
        if hops is not None:
            hops.add(found)
        if writer is not None:
            with lock:
                writer.write({"run": run, "source": source, "nodes": None, "key_id": found.key_id,
                              "origin": origin, "owner": found.owner.id if found.owner else None,
                              "hops": found.hops, "timeouts": found.timeouts, "latency_ms": found.ms,
                              "ok": found.ok, "ts": time.time()})

    if writer is not None or hops is not None:
        config.on_lookup = record
    metrics = None
    if hops is not None:
        from dht.metrics import NodeCollector, serve

        metrics = serve(NodeCollector(node, hops), metrics_port, listen.bind)[0]
    stop_requested = threading.Event()
    waiting = [False]  # the main thread sleeps until the node stops: a signal then ends the sleep

    def on_signal(*_: object) -> None:
        stop_requested.set()
        if waiting[0]:
            raise _StopRequested

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    reload_on_sighup([p for p in (node.policy, relay_service and relay_service.policy) if p is not None])
    node.start()
    while not (node.joined.wait(0.1) or node.stopped.is_set()):
        pass
    if node.join_error is not None:
        node.stop()
        if relay_service is not None:
            relay_service.close()
        fail(node.join_error)
    if ready_file is not None:
        tmp = Path(f"{ready_file}.tmp")
        tmp.write_text(json.dumps({"endpoint": node.endpoint, "id": node.me.id, "pid": os.getpid(),
                                   "positions": [p.me.to_dict() for p in node.positions]}
                                  | ({"metrics": f"{listen.host}:{metrics.server_port}"} if metrics else {})))
        os.replace(tmp, ready_file)
    logging.getLogger("chordpub").info("node %s id %d serving%s%s" + (
        f"; metrics on http://{listen.host}:{metrics.server_port}/metrics" if metrics else ""), node.endpoint,
        node.me.id, "" if vnodes == 1 else f", with {vnodes} ring positions",
        "" if listen.bind == listen.host else f" (bound on {listen.bind})")
    # a signal interrupts the wait at once (its handler raises), as does a node that stops by itself
    # (`node leave`): no timer wakes an idle node's main thread
    waiting[0] = True
    try:
        if not stop_requested.is_set():
            node.stopped.wait()
    except _StopRequested:
        pass
    waiting[0] = False
    if not node.stopped.is_set():
        node.leave()
        node.wait(timeout=3 * node.timeout * vnodes + 1)  # each position hands over and says goodbye
    node.stop()
    if relay_service is not None:
        relay_service.close()
    if writer is not None:
        writer.close()


class _StopRequested(Exception):
    """Raised by node start's signal handler to end the main thread's wait."""


@node_app.command("info")
@clean_errors
def node_info(endpoint: str = typer.Argument(..., help="The node, H:P."),
              curve: Path = typer.Option(None, help=CURVE_HELP),
              connect_timeout: float = connect_timeout_option(),
              as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Show a node's id, predecessor, successor list, fingers and key count."""
    with dht_client(endpoint, curve, connect_timeout) as client:
        info = client.info()
    out = {k: info[k] for k in ("id", "endpoint", "process", "positions", "bind", "predecessor", "successors",
                                "fingers", "keys", "pns", "records", "lookups_served", "neighbours_left",
                                "remembered", "probes", "probe_bytes", "merges", "services", "denials",
                                "consensus")}

    def human(o: dict) -> str:
        distinct = []
        for f in o["fingers"]:
            if f is not None and f not in distinct:
                distinct.append(f)
        return "\n".join([
            f"node        {o['endpoint']}  id {o['id']}" + (f"  (PNS, {o['pns']} samples)" if o["pns"] else "")
            + ("" if o["bind"] == o["endpoint"] else f"  bound on {o['bind']}"),
            *([f"process     {o['process']}: {len(o['positions'])} ring positions, "
               + ", ".join(o["positions"])] if len(o["positions"]) > 1 else []),
            f"predecessor {peer_text(o['predecessor'])}",
            "successors  " + ", ".join(s["endpoint"] for s in o["successors"]),
            f"fingers     {len(distinct)} distinct: " + ", ".join(
                f["endpoint"] + ("" if f.get("rtt_ms") is None else f" ({f['rtt_ms']:.1f} ms)") for f in distinct),
            f"keys        {o['keys']} owned (store entries); topics {o['records']} owned",
            f"lookups     {o['lookups_served']} steps served"
            + (f"; a policy refused {sum(o['denials'].values())} requests" if o["denials"] else ""),
            *([f"consensus   {c['groups']} groups, {c['led']} led, {c['awake']} awake"
               + (f"; {c['rejected']} messages rejected" if c["rejected"] else "")
               + (f"; {c['failures']} loop turns failed (see the log)" if c["failures"] else "")]
              if (c := o["consensus"]) else []),
            "listening   " + ", ".join([f"{o['bind']} (rpc)"]
                                       + [f"{v} ({k})" for k, v in sorted(o["services"].items())]),
        ])

    emit(out, as_json, human)


@node_app.command("lookup")
@clean_errors
def node_lookup(endpoint: str = typer.Argument(..., help="Start the lookup at this node, H:P."),
                key: str = typer.Argument(..., help="The key (a topic name)."),
                curve: Path = typer.Option(None, help=CURVE_HELP),
                connect_timeout: float = connect_timeout_option(),
                as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Find the node that owns KEY, iteratively from ENDPOINT, with the path taken."""
    with dht_client(endpoint, curve, connect_timeout) as client:
        found = client.lookup(key)
    if not found.ok:
        fail(f"lookup of {key!r} failed: {found.error}")
    out = {"key": key, "key_id": found.key_id, "owner": found.owner.to_dict(), "hops": found.hops,
           "path": found.path, "ms": round(found.ms, 3)}
    emit(out, as_json, lambda o: (f"{o['key']} (id {o['key_id']}) -> {peer_text(o['owner'])} "
                                  f"in {o['hops']} hops, {o['ms']:.2f} ms via {' > '.join(o['path'])}"))


@node_app.command("lookups")
@clean_errors
def node_lookups(endpoint: str = typer.Argument(..., help="Start every lookup at this node, H:P."),
                 keys: Path = typer.Option(..., help="A file of keys (topic names), one a line."),
                 curve: Path = typer.Option(None, help=CURVE_HELP),
                 connect_timeout: float = connect_timeout_option(),
                 repeat: int = typer.Option(1, min=1, max=100, help="Time every key this many times and report "
                                            "the fastest: on a busy machine one pass times the scheduler too."),
                 ready_file: Path = typer.Option(None, help="Touch this file once the connections are open (after "
                                                 "the first, untimed pass)."),
                 go_file: Path = typer.Option(None, help="Wait until this file exists before timing (several "
                                              "hosts start and open their connections together, then take turns)."),
                 as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Look up every key of a file from ENDPOINT, one after another: owners, hops and latencies.

    A first pass over the keys opens the connections (a TCP and a ZeroMQ handshake to each node on
    the paths) that a long-lived client already has and is not reported; then every key is timed
    --repeat times and its fastest lookup reported (a failed one if none succeeded).
    """
    try:
        names = [line.strip() for line in keys.read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"--keys: cannot read {keys}: {exc}")
    if not names:
        fail(f"--keys: {keys} holds no key")
    results = []
    with dht_client(endpoint, curve, connect_timeout) as client:
        for key in names:
            client.lookup(key)
        if ready_file is not None:
            ready_file.touch()
        if go_file is not None:
            from dht.processes import wait_for

            wait_for(go_file.exists, GO_WAIT, interval=0.02, what=f"--go-file {go_file}")
        for key in names:
            tries = [client.lookup(key) for _ in range(repeat)]
            found = min(tries, key=lambda f: (not f.ok, f.ms))
            results.append({"key": key, "ok": found.ok, "owner": found.owner.id if found.owner else None,
                            "hops": found.hops, "ms": round(found.ms, 3), "error": found.error})
    done = [r["ms"] for r in results if r["ok"]]
    done.sort()
    out = {"endpoint": endpoint, "lookups": len(results), "failed": len(results) - len(done),
           "p50_ms": done[len(done) // 2] if done else None, "results": results}
    emit(out, as_json, lambda o: f"{o['lookups']} lookups from {o['endpoint']}: {o['failed']} failed" +
                                 ("" if o["p50_ms"] is None else f", p50 {o['p50_ms']} ms"))


@node_app.command("leave")
@clean_errors
def node_leave(endpoint: str = typer.Argument(..., help="The node that should leave, H:P."),
               curve: Path = typer.Option(None, help=CURVE_HELP),
               connect_timeout: float = connect_timeout_option()) -> None:
    """Ask a node to leave the ring gracefully (it hands its keys to its successor and exits)."""
    with dht_client(endpoint, curve, connect_timeout) as client:
        client.leave()
    typer.echo(f"{endpoint} is leaving the ring")
