"""`chordpub ring ...`: start a local ring, check a running one, measure its load, watch it live, draw it."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import typer

from chordpub.cli_common import (
    CURVE_HELP,
    acl_option,
    check_acl,
    check_vnodes,
    clean_errors,
    connect_timeout_option,
    curve_setup,
    dht_client,
    emit,
    fail,
    log_file_option,
    log_level_option,
    output_file,
    setup_logging,
)
from dht.ids import check_bits, process_of

SIM_TRIALS = 200  # random key sets the simulator draws for `ring load`'s keys per process

ring_app = typer.Typer(help="Start a local ring of node processes; check, load, watch or draw a running ring.",
                       no_args_is_help=True)


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
    vnodes: int = typer.Option(1, "--vnodes", help="Ring positions (virtual nodes) each node process holds."),
    log_dir: Path = typer.Option(None, help="The run directory: node logs and ready files go here "
                                 "(default: runs/ring-DATE-TIME)."),
    wait: float = typer.Option(60.0, help="Seconds to wait for a consistent ring (0: don't wait)."),
    curve: Path = typer.Option(None, help=CURVE_HELP),
    acl: Path = acl_option(),
    log_level: str = log_level_option(),
    log_file: Path = log_file_option(),
) -> None:
    """Start N nodes on this host joined to the first; stop them all on Ctrl-C or SIGTERM. Their logs
    go to the run directory it prints."""
    from chordpub.launcher import LocalRing

    setup_logging(log_level, log_file)

    check_bits(bits)
    check_acl(acl, curve)
    check_vnodes(vnodes)
    workdir = log_dir or Path("runs") / time.strftime("ring-%Y%m%d-%H%M%S")
    options = {"bits": bits, "successors": successors, "replicas": replicas, "stabilize": stabilize,
               "curve": curve, "acl": acl, "vnodes": vnodes if vnodes > 1 else None}
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
            typer.echo(f"ring of {report['nodes']} " + (f"positions on {report['processes']} " if vnodes > 1 else "")
                       + f"nodes consistent after {took:.1f}s; "
                       f"endpoints in {file}, logs in {workdir}; Ctrl-C stops it")
        while not stop.is_set():
            if not ring.live:
                fail("every node has exited; see the logs in " + str(workdir))
            stop.wait(0.5)
        typer.echo("stopping the ring", err=True)


@ring_app.command("check")
@clean_errors
def ring_check(endpoint: str = typer.Argument(..., help="Any node of the ring, H:P."),
               expect: int = typer.Option(None, help="Also require exactly this many nodes (ring positions, when "
                                          "nodes hold several: --vnodes)."),
               curve: Path = typer.Option(None, help=CURVE_HELP),
               connect_timeout: float = connect_timeout_option(),
               as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Walk the ring by successor pointers and compare it with the ideal ring (exit 0 iff consistent)."""
    from dht.ringcheck import check_ring

    with dht_client(endpoint, curve, connect_timeout) as client:
        report = check_ring(client, expected=expect)

    def human(o: dict) -> str:
        nodes = f"nodes {o['nodes']}" if o["processes"] == o["nodes"] else \
            f"positions {o['nodes']} on {o['processes']} nodes"
        lines = [f"{nodes}  consistent {o['consistent']}  fingers correct "
                 f"{o['fingers_correct']:.1%}  successor lists correct {o['successors_correct']:.1%}"]
        lines += [f"  {m['endpoint']} bound on {m['bind']}" for m in o["members"] if m["bind"] != m["endpoint"]]
        lines += [f"  problem: {p}" for p in o["problems"]]
        return "\n".join(lines)

    emit(report, as_json, human)
    if not report["consistent"]:
        raise typer.Exit(1)


@ring_app.command("load")
@clean_errors
def ring_load(endpoint: str = typer.Argument(..., help="Any node of the ring, H:P."),
              interval: float = typer.Option(2.0, help="Seconds between the two looks the rates come from."),
              curve: Path = typer.Option(None, help=CURVE_HELP),
              connect_timeout: float = connect_timeout_option(),
              as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """What each node carries: records and keys owned, and per second registrations, renewals, lookup
    steps, relay messages, bytes in and out (from two walks of the ring --interval seconds apart); then how
    evenly, as the ring's max/mean and p99/mean of each. Nodes that hold several ring positions (--vnodes)
    are also summed per process, beside what the simulator predicts for keys per process on the same ids."""
    from dht.load import FIGURES, report, spread
    from dht.ringcheck import walk

    if not 0.1 <= interval <= 3600:
        fail(f"--interval must be in 0.1..3600 seconds, got {interval:g}")
    with dht_client(endpoint, curve, connect_timeout) as client:
        first, _ = walk(client, endpoint)
        time.sleep(interval)  # the span the rates are measured over
        second, problems = walk(client, endpoint)
    out = {**report(first, second), "interval": interval, "problems": problems, "simulated": None}
    if any(p["positions"] > 1 for p in out["processes"]) and int(second[0].get("bits") or 64) <= 64:
        from sim.load import keys_per_process

        names = [p["process"] for p in out["processes"]]
        keys = sum(n["keys"] or 0 for n in out["nodes"])
        trials = keys_per_process([n["id"] for n in out["nodes"]],
                                  [names.index(process_of(n["endpoint"])) for n in out["nodes"]], keys,
                                  int(second[0].get("bits") or 64), trials=SIM_TRIALS)
        rows = [spread([int(c) for c in row]) for row in trials]
        out["simulated"] = {"keys": keys, "trials": SIM_TRIALS, "keys_per_process": {
            k: sum(r[k] for r in rows) / len(rows) if keys else None for k in ("max_over_mean", "p99_over_mean")}}

    def human(o: dict) -> str:
        def cell(v: float | None, fmt: str = ".1f") -> str:
            return "-" if v is None else format(v, "d" if isinstance(v, int) else fmt)

        def table(rows: list[dict], name: str, spreads: dict) -> list[str]:
            head = [name, "records", "keys", "reg/s", "renew/s", "steps/s", "relay/s", "in B/s", "out B/s"]
            lines = ["  ".join(f"{h:>10s}" if i else f"{h:22s}" for i, h in enumerate(head))]
            for n in rows:
                lines.append("  ".join([f"{n[name if name == 'process' else 'endpoint']:22s}"] +
                                       [f"{cell(n[k]):>10s}" for k in FIGURES]))
            for what in ("max_over_mean", "p99_over_mean"):
                lines.append("  ".join([f"{what.replace('_over_', '/'):22s}"] +
                                       [f"{cell(spreads[k][what], '.2f'):>10s}" for k in FIGURES]))
            return lines

        lines = table(o["nodes"], "node", o["ring"])
        if any(p["positions"] > 1 for p in o["processes"]):
            lines += [""] + table(o["processes"], "process", o["per_process"])
            sim = o["simulated"]
            if sim is not None and sim["keys"]:
                live = o["per_process"]["keys"]
                lines.append(f"keys per process p99/mean {live['p99_over_mean']:.2f} (max/mean "
                             f"{live['max_over_mean']:.2f}); the simulator, same ids, {sim['keys']} random keys, "
                             f"{sim['trials']} trials: {sim['keys_per_process']['p99_over_mean']:.2f} "
                             f"({sim['keys_per_process']['max_over_mean']:.2f})")
        lines += [f"problem: {p}" for p in o["problems"]]
        return "\n".join(lines)

    emit(out, as_json, human)


@ring_app.command("watch")
@clean_errors
def ring_watch(endpoint: str = typer.Argument(..., help="Any node of the ring, H:P."),
               interval: float = typer.Option(1.0, min=0.05, help="Seconds between looks at the ring."),
               seconds: float = typer.Option(None, min=0.0, help="Stop after this many seconds (default: Ctrl-C)."),
               once: bool = typer.Option(False, "--once", help="Look once, print the table and exit."),
               curve: Path = typer.Option(None, help=CURVE_HELP),
               connect_timeout: float = connect_timeout_option(),
               as_json: bool = typer.Option(False, "--json", help="Print one JSON object per look (JSON Lines)."),
               ) -> None:
    """A live table of the ring: its nodes in ring order with id, share of the circle, keys and topics
    owned, successor-list health and lookup steps served per second; joins, leaves and deaths are
    marked as they happen. A node that went is listed as left when a neighbour was told so (a
    graceful leave), dead otherwise."""
    from chordpub.ring_watch import watch

    with dht_client(endpoint, curve, connect_timeout, timeout=min(0.5, interval), retries=0) as client:
        watch(client, endpoint, interval=interval, seconds=0.0 if once else seconds, as_json=as_json)


@ring_app.command("show")
@clean_errors
def ring_show(endpoint: str = typer.Argument(..., help="Any node of the ring, H:P."),
              png: Path = typer.Option(..., "--png", help="Write the picture to this PNG file."),
              fingers: str = typer.Option(None, help="Draw the fingers of this node, H:P (default: ENDPOINT)."),
              topics: int = typer.Option(20, min=0, max=1000, help="Draw up to this many topics of each node, "
                                         "at their key ids, joined to their owners."),
              curve: Path = typer.Option(None, help=CURVE_HELP),
              connect_timeout: float = connect_timeout_option(),
              as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Draw the ring: its nodes on a circle at their ids, the fingers of one node, and the topics
    the nodes own at their key ids, joined to their owners."""
    from chordpub.ring_picture import draw_ring
    from dht.ringcheck import walk

    output_file(png, "--png")
    with dht_client(endpoint, curve, connect_timeout) as client:
        infos, problems = walk(client, endpoint, topics=topics)
    of = fingers or endpoint
    if of not in {i["endpoint"] for i in infos}:
        fail(f"--fingers: {of} is not on the ring walked from {endpoint}")
    drawn = draw_ring(infos, of, png)
    out = {"file": str(png), "nodes": len(infos), "fingers_of": of, "fingers": drawn["fingers"],
           "topics": drawn["topics"], "problems": problems}
    emit(out, as_json, lambda o: f"wrote {o['file']}: {o['nodes']} nodes, {o['fingers']} distinct fingers of "
                                 f"{o['fingers_of']}, {o['topics']} topics" +
                                 "".join(f"\n  problem: {p}" for p in o["problems"]))


@ring_app.command("autoscale")
@clean_errors
def ring_autoscale(
    endpoint: str = typer.Argument(..., help="Any node of the ring, H:P."),
    high: float = typer.Option(..., help="Grow when a node stays above this (in --metric)."),
    low: float = typer.Option(0.0, help="Shrink when the ring's mean stays below this (in --metric)."),
    metric: str = typer.Option("records", help="What load is: records, registrations_per_s, renewals_per_s, "
                               "lookup_steps_per_s, relay_messages_per_s, bytes_in_per_s or bytes_out_per_s."),
    min_nodes: int = typer.Option(1, "--min", help="Never fewer nodes than this."),
    max_nodes: int = typer.Option(16, "--max", help="Never more nodes than this."),
    patience: int = typer.Option(3, help="Looks in a row a threshold must be passed before a change."),
    cooldown: float = typer.Option(10.0, help="Seconds after a change before the next."),
    interval: float = typer.Option(2.0, help="Seconds between looks at the ring (rates are over this span)."),
    seconds: float = typer.Option(None, help="Stop after this many seconds (default: Ctrl-C)."),
    spawn: str = typer.Option(None, help="Command that starts a node, with {port} and any of {host} {join} {id} "
                              "{bits} {successors} {replicas} {python}; default: a local `chordpub node "
                              "start` with the ring's bits, successors and replicas."),
    hosts: str = typer.Option("127.0.0.1", help="Hosts for new nodes ({host}), comma-separated, used in turn."),
    base_port: int = typer.Option(0, help="Ports for new nodes from here upwards (default: free ports of "
                                  "this machine)."),
    log_dir: Path = typer.Option(Path("autoscale-logs"), help="Where the started nodes' logs go."),
    curve: Path = typer.Option(None, help=CURVE_HELP),
    connect_timeout: float = connect_timeout_option(),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per look (JSON Lines)."),
) -> None:
    """Keep the ring's load in bounds. Every --interval seconds: when a node has stayed above --high for
    --patience looks, start a node whose id splits that node's load in two (the median of the keys
    it owns), so that it takes half; when the ring's mean has stayed below --low, ask the least-loaded
    node to leave gracefully. One change at a time, --cooldown apart, between --min and --max nodes.
    Each look prints its decision and the figures that made it. Nodes it started keep running after
    it stops."""
    from chordpub.autoscale import DEFAULT_SPAWN, Autoscaler, Spawner, check_template
    from dht.scaling import Policy, Scaler

    policy = Policy(high=high, low=low, metric=metric, min_nodes=min_nodes, max_nodes=max_nodes,
                    patience=patience, cooldown=cooldown)
    policy.validate()
    check_template(spawn or DEFAULT_SPAWN)
    if not 0.1 <= interval <= 3600:
        fail(f"--interval must be in 0.1..3600 seconds, got {interval:g}")
    if seconds is not None and seconds < 0:
        fail(f"--seconds must be 0 or more, got {seconds:g}")
    if not 0 <= base_port < 65536:
        fail(f"--base-port must be in 0..65535, got {base_port}")
    host_list = [h.strip() for h in hosts.split(",") if h.strip()]
    if not host_list:
        fail("--hosts names no host")

    def show(look: dict) -> None:
        if as_json:
            typer.echo(json.dumps(look))
            return
        ratio = "-" if look.get("max_over_mean") is None else f"{look['max_over_mean']:.2f}"
        line = (f"{time.strftime('%H:%M:%S', time.localtime(look['time']))}  {look['action']:6s} "
                f"nodes {look.get('nodes') or '-'}  {metric} max {look.get('max')} max/mean {ratio}  {look['reason']}")
        if look["action"] == "grow":
            line += f"; started {look['started']} (pid {look['pid']}) id {look['new_id']}"
        if look["action"] != "hold":
            line += f"; settled in {look['settled_s']:.1f} s" if look["ok"] else f"; FAILED: {look['error']}"
        typer.echo(line)

    spawner = Spawner(spawn or DEFAULT_SPAWN, host_list, log_dir, base_port)
    with dht_client(endpoint, curve, connect_timeout) as client:
        scaler = Autoscaler(client, endpoint, Scaler(policy), spawner, show)
        try:
            scaler.run(interval, seconds)
        except KeyboardInterrupt:
            pass
