"""`chordpub mininet run`: the real processes on an emulated network, one command, one run directory."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from chordpub.cli_common import clean_errors, fail, log_file_option, log_level_option, setup_logging

mininet_app = typer.Typer(help="Run ring, publishers and subscribers on Mininet hosts (needs root).",
                          no_args_is_help=True)


@mininet_app.command("run")
@clean_errors
def run(
    topo: str = typer.Option(..., help="Topology spec: single,4 | linear,4 | tree,fanout=2,depth=2 | waxman,n=8 ..."),
    dht: int = typer.Option(None, min=1, help="Discovery nodes (default 2; from the file with --dht-json)."),
    pubs: int = typer.Option(1, min=0, help="Publishers."),
    subs: int = typer.Option(1, min=0, help="Subscribers."),
    delay: str = typer.Option(None, help="Delay of every link, e.g. 5ms (default: the spec's, 1ms for "
                              "single/linear/tree)."),
    seconds: float = typer.Option(10.0, min=0.1, help="Seconds of publishing."),
    mode: str = typer.Option("direct", help="direct (subscribers connect to publishers) | relay (via the owner)."),
    placement: str = typer.Option("roundrobin", help="roundrobin (one process per host while hosts last) | "
                                  "random (hosts shuffled with --seed, then dealt out)."),
    seed: int = typer.Option(None, help="Seed for random topologies, random placement and link loss."),
    out: Path = typer.Option(Path("runs"), help="Root of run directories."),
    run_name: str = typer.Option(None, "--run", help="Run name (default mininet-DATE-TIME)."),
    dht_json: Path = typer.Option(None, help='The course\'s {"dht": [{"id","hash","IP","port","host"}]} file: '
                                  "exactly those node ids on those hosts."),
    bits: int = typer.Option(64, min=8, max=128, help="Identifier bits (match the --dht-json hash width)."),
    rate: float = typer.Option(10.0, min=0.1, help="Messages per second per publisher."),
    size: int = typer.Option(100, min=8, max=512 * 1024, help="Payload bytes."),
    topics: int = typer.Option(1, min=1, help="Topics; publishers and subscribers are dealt out over them."),
    topics_per_pub: int = typer.Option(1, min=1, help="Topics each publisher process publishes (one client "
                                       "for all of them), consecutive from its own first one."),
    topics_per_sub: int = typer.Option(1, min=1, help="Topics each subscriber process follows."),
    stabilize: float = typer.Option(0.5, min=0.05, help="Seconds between the nodes' maintenance rounds."),
    emulation: str = typer.Option("auto", help="Link delay/loss by auto | netem (TCLink) | userspace "
                                  "(topologies.delay_switch; what auto picks on kernels without sch_netem)."),
    curve: Path = typer.Option(None, help="CURVE keys directory (`chordpub keys generate`): every process "
                               "runs --curve."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    log_level: str = log_level_option("INFO"),
    log_file: Path = log_file_option(),
) -> None:
    """Place DHT nodes, publishers and subscribers on the hosts of TOPO, start them with this CLI inside
    the hosts, wait for a consistent ring, publish for SECONDS, stop everything and gather one run
    directory (manifest.json, lookups/ and deliveries/ JSON Lines, logs/ with every process's log at
    --log-level). Analyse it with `chordpub analyze RUN`."""
    from topologies.experiment import Experiment, ExperimentConfig
    from topologies.graphs import parse_delay

    setup_logging(log_level, log_file)
    if dht is not None and dht_json is not None:
        fail("give --dht or --dht-json, not both (the file says how many nodes)")
    config = ExperimentConfig(
        topo=topo, dht=dht or 2, pubs=pubs, subs=subs, delay_ms=parse_delay(delay) if delay else None,
        seconds=seconds, mode=mode, placement=placement, seed=seed, out=out, run=run_name, dht_json=dht_json,
        bits=bits, rate=rate, size=size, topics=topics, topics_per_pub=topics_per_pub,
        topics_per_sub=topics_per_sub, stabilize=stabilize, emulation=emulation,
        curve=curve, log_level=log_level.upper())

    def progress(message: str) -> None:  # for people; scripts get one line on error, as everywhere
        if sys.stderr.isatty():
            typer.echo(f"chordpub: {message}", err=True)

    summary = Experiment(config, progress=progress).run()
    if as_json:
        typer.echo(json.dumps(summary))
        return
    lat = summary["latency_ms"]
    typer.echo(f"run {summary['dir']} ({summary['emulation']} link emulation, {summary['wall_s']:g} s)\n"
               f"ring: {summary['ring']['nodes']} nodes consistent after {summary['ring']['seconds']:g} s\n"
               f"deliveries: {summary['deliveries']} (publishers sent {summary['sent']}); "
               + _latency(lat, "min") + "\n"
               f"lookups: {summary['lookups']}, mean hops {summary['mean_hops']}")
    if len(summary["topics"]) > 1:
        for topic, t in summary["topics"].items():
            typer.echo(f"  {topic}: sent {t['sent']}, delivered {t['deliveries']}, " + _latency(t["latency_ms"]))


def _latency(lat: dict, *first: str) -> str:
    if lat.get("p50") is None:
        return "no latency (nothing delivered)"
    return "latency " + " ".join(f"{k} {lat[k]}" for k in (*first, "p50", "p99")) + " ms"


@mininet_app.command("pns")
@clean_errors
def pns_cmd(
    topo: str = typer.Option("waxman,n=10,max_delay=30", help="Topology spec whose links have differing delays "
                             "(waxman, transit_stub, barabasi_albert ...)."),
    pns: int = typer.Option(4, min=2, max=64, help="PNS samples K for the second ring."),
    prs: bool = typer.Option(False, "--prs", help="Also a third ring with PNS K and proximity route selection "
                             "for the last hop (node start --prs), beside the simulator's prediction for it."),
    keys: int = typer.Option(30, min=1, help="Keys each host looks up (the same keys from every host)."),
    stabilize: float = typer.Option(2.0, min=0.05, help="Seconds between the nodes' maintenance rounds (a call "
                                    "times out after half of it, at most 1 s)."),
    successors: int = typer.Option(2, min=1, help="Successor-list length r: short, so that on a small ring "
                                   "lookups route by fingers as on a large one."),
    seed: int = typer.Option(1, help="Seed of the topology."),
    emulation: str = typer.Option("auto", help="Link delay by auto | netem | userspace."),
    repeat: int = typer.Option(3, min=1, max=100, help="Times each lookup is timed; the fastest counts (the "
                               "links' latency, not this machine's scheduling: the simulator knows only links)."),
    out: Path = typer.Option(None, help="Directory for logs and the result (default runs/pns-DATE-TIME)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Live lookup latency with and without proximity neighbour selection, beside the simulator's
    prediction for the same graph, ring and keys.

    One node per host; the ring runs first as plain Chord, then with --pns K (same ids: an id is
    the hash of the node's address). Every host looks up the same keys iteratively at its own node.
    The simulator routes the same lookups over the same network (the tree Mininet emulates) and
    predicts the fraction PNS takes off the median latency (and, with --prs, PNS and PRS together)."""
    import time

    from dht.ids import key_id, owner_of
    from sim.proximity import predict_live
    from topologies.hosts import MininetHosts, graph_for
    from topologies.mininet_net import emulated_graph, mininet_network
    from topologies.proximity_run import run_ring_lookups

    g = graph_for(topo, None, seed)
    emu = emulated_graph(g)
    run_dir = out or Path("runs") / time.strftime("pns-%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    names = [f"pns-key-{i}" for i in range(keys)]
    keys_file = run_dir / "keys.txt"
    keys_file.write_text("\n".join(names) + "\n")

    def progress(message: str) -> None:
        if sys.stderr.isatty():
            typer.echo(f"chordpub: {message}", err=True)

    with mininet_network(g, workdir=run_dir / "switches", emulation=emulation, seed=seed) as net:
        hosts = MininetHosts(net)
        graph_node = {name: v for v, name in net.names.items()}
        runs = {k: run_ring_lookups(hosts, k, keys_file, run_dir / "logs", stabilize, successors, progress=progress,
                                    repeat=repeat) for k in (0, pns)}
        if prs:
            runs["prs"] = run_ring_lookups(hosts, pns, keys_file, run_dir / "logs", stabilize, successors,
                                           progress=progress, prs=True, repeat=repeat)
    nodes = runs[0]["nodes"]
    ids = [n["id"] for n in nodes]
    live = {}
    for k, r in runs.items():
        bad = [x for x in r["lookups"] if not x["ok"] or x["owner"] != owner_of(sorted(ids), key_id(x["key"]))]
        if bad:
            fail(f"with PNS {k}, {len(bad)} lookups failed or missed the owner, e.g. {bad[0]}")
        ms = sorted(x["ms"] for x in r["lookups"])
        live[k] = {"p50_ms": ms[len(ms) // 2], "mean_hops": sum(x["hops"] for x in r["lookups"]) / len(ms),
                   "settle_s": r["settle_s"]}
    rows = runs[0]["lookups"]
    predicted = predict_live(emu, [graph_node[n["host"]] for n in nodes], ids, [x["origin"] for x in rows],
                             [key_id(x["key"]) for x in rows], pns, successors=successors, prs=prs)
    reduction = 1 - live[pns]["p50_ms"] / live[0]["p50_ms"]
    # where the simulator had a choice to make, did the live nodes make the same one?
    same = total = 0
    for n, fingers in zip(nodes, runs[pns]["fingers"], strict=True):
        for j, want in predicted["fingers"][n["id"]].items():
            total += 1
            same += fingers[j] == want
    agreement = same / total if total else 1.0
    result = {"topo": topo, "pns": pns, "successors": successors, "nodes": len(nodes), "lookups": len(rows),
              "emulation": net.emulation,
              "live": {"plain_p50_ms": live[0]["p50_ms"], "pns_p50_ms": live[pns]["p50_ms"],
                       "plain_mean_hops": live[0]["mean_hops"], "pns_mean_hops": live[pns]["mean_hops"],
                       "reduction": reduction, "settle_s": [live[0]["settle_s"], live[pns]["settle_s"]]},
              "predicted": {k: v for k, v in predicted.items() if k not in ("owners", "fingers")},
              "finger_agreement": agreement,
              "difference": reduction - predicted["reduction"], "dir": str(run_dir)}
    if prs:  # the same figure for PNS + PRS, both off plain Chord's median
        prs_reduction = 1 - live["prs"]["p50_ms"] / live[0]["p50_ms"]
        result["live"].update(prs_p50_ms=live["prs"]["p50_ms"], prs_mean_hops=live["prs"]["mean_hops"],
                              prs_reduction=prs_reduction)
        result["prs_difference"] = prs_reduction - predicted["prs_reduction"]
    (run_dir / "pns.json").write_text(json.dumps(result, indent=2) + "\n")
    if as_json:
        typer.echo(json.dumps(result))
        return
    p = result["predicted"]
    typer.echo(f"{len(nodes)} nodes on {topo} ({net.emulation} link emulation), {len(rows)} lookups each way\n"
               f"{'':22}{'plain p50 ms':>14}{'PNS(' + str(pns) + ') p50 ms':>16}{'reduction':>11}\n"
               f"{'live (Mininet)':22}{live[0]['p50_ms']:>14.1f}{live[pns]['p50_ms']:>16.1f}{reduction:>11.2f}\n"
               f"{'simulator':22}{p['plain_p50_ms']:>14.1f}{p['pns_p50_ms']:>16.1f}{p['reduction']:>11.2f}\n"
               + (f"{'PNS+PRS live':22}{'':>14}{live['prs']['p50_ms']:>16.1f}{result['live']['prs_reduction']:>11.2f}\n"
                  f"{'PNS+PRS simulator':22}{'':>14}{p['prs_p50_ms']:>16.1f}{p['prs_reduction']:>11.2f}\n"
                  if prs else "") +
               f"difference {result['difference']:+.2f}"
               + (f" (PNS+PRS {result['prs_difference']:+.2f})" if prs else "")
               + f"; the live nodes chose the simulator's finger in "
               f"{agreement:.0%} of the levels PNS decides; results in {run_dir}/pns.json")
