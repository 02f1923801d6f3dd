"""chordpub against the brokers a user would pick instead: NATS, Mosquitto and NATS JetStream, same
machine, same payloads, same run, a Python client for every system.

    make bench-peers                      # installs nats-server, mosquitto, nats-py and paho-mqtt, then runs this
    python benchmarks/peers.py [--messages 50000] [--paced 2000] [--fan 16] [--topics 1000] [--json]

Every publisher and subscriber is a process of its own, started fresh (benchmarks/peers_systems.py).
Messages are 100 bytes. Workloads:
  1->1        one publisher, one subscriber: --paced messages at 1000/s (latency p50/p99 where the
              subscribing application gets each message: its callback), then --messages as fast as
              the publisher goes (msg/s delivered, from the flood's first send to its last arrival);
  1->1-pattern  the same through a wildcard: the subscriber's one subscription matches the topic
              (chordpub `t/*`); chordpub's figure is also given against its exact 1->1 of the run;
  fan-out     one publisher, --fan subscriber processes: msg/s delivered, summed over them;
  fan-in      --fan publishers, one subscriber: msg/s delivered;
  topics      one client publishes one message on each of --topics topics, one client subscribed to
              all of them: seconds from the first publish to the last arrival (for chordpub, each
              topic's first publish registers it on the ring);
  pattern     the same --topics new topics, one level under a common first, and a subscriber of one
              wildcard matching them all (chordpub `t/*`, NATS `t.*`, MQTT `t/+`), subscribed before
              any of them exists;
  reliable    1->1 with delivery that repairs loss: chordpub --reliable against JetStream, memory
              storage (async publish with acks, a durable push consumer acking each message);
  durable     1->1 surviving restarts: chordpub with data directories on both sides and a durable
              subscription against JetStream, file storage.
Systems: chordpub (direct, best effort), NATS core, Mosquitto QoS 0 and QoS 1 in the first four;
chordpub and JetStream in the last two. What a system did not deliver is shown. Each chordpub figure
is printed with its ratio to the best peer's in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chordpub.launcher import LocalRing, stop_processes, wait_for  # noqa: E402

CHILD = [sys.executable, str(Path(__file__).resolve().parent / "peers_systems.py")]
BEST_EFFORT = ("chordpub", "nats", "mqtt0", "mqtt1")
WORKLOADS = {  # name: (systems, publishers, subscribers)
    "1->1": (BEST_EFFORT, 1, 1),
    "1->1-pattern": (BEST_EFFORT, 1, 1),  # 1->1, the subscriber's one subscription a wildcard matching it
    "fan-out": (BEST_EFFORT, 1, "fan"),
    "fan-in": (BEST_EFFORT, "fan", 1),
    "topics": (BEST_EFFORT, 1, 1),
    "pattern": (BEST_EFFORT, 1, 1),
    "reliable": (("chordpub-reliable", "jetstream-memory"), 1, 1),
    "durable": (("chordpub-durable", "jetstream-file"), 1, 1),
    # each message a row of the subscriber's SQLite database: at least once, and exactly once
    "exactly-once": (("chordpub-durable", "chordpub-exactly-once", "jetstream-exactly-once"), 1, 1),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Servers:
    """nats-server (with JetStream) and mosquitto on free loopback ports, and a chordpub ring."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen] = []
        nats_bin = shutil.which("nats-server") or "/usr/sbin/nats-server"
        mosquitto_bin = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        for binary in (nats_bin, mosquitto_bin):
            if not Path(binary).exists():
                raise SystemExit(f"{Path(binary).name} is not installed: `make bench-peers` installs it")
        self.nats_port, self.mqtt_port = free_port(), free_port()
        self.procs.append(subprocess.Popen([nats_bin, "-js", "-a", "127.0.0.1", "-p", str(self.nats_port),
                                            "-sd", str(tmp / "jetstream")], stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL, start_new_session=True))
        conf = tmp / "mosquitto.conf"
        conf.write_text(f"listener {self.mqtt_port} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 0\n"
                        "max_inflight_messages 1000\n")
        self.procs.append(subprocess.Popen([mosquitto_bin, "-c", str(conf)], stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL, start_new_session=True))
        for port in (self.nats_port, self.mqtt_port):
            wait_for(lambda p=port: _answers(p), 30, what=f"a server on port {port}")
        self.ring = LocalRing(tmp / "ring", options={"stabilize": 0.5})
        self.ring.start(2)
        self.ring.wait_consistent(timeout=60)

    def url(self, system: str) -> str:
        if system.startswith("chordpub"):
            return self.ring.nodes[0].endpoint
        if system.startswith("mqtt"):
            return f"127.0.0.1:{self.mqtt_port}"
        return f"nats://127.0.0.1:{self.nats_port}"

    def close(self) -> None:
        self.ring.stop()
        stop_processes(self.procs, grace=5)


def _answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


async def _stream(url: str, name: str, subjects: list[str], storage: str, delete: bool = False) -> None:
    import nats
    from nats.js.api import StorageType, StreamConfig

    nc = await nats.connect(url)
    js = nc.jetstream()
    if delete:
        await js.delete_stream(name)
    else:
        await js.add_stream(StreamConfig(name=name, subjects=subjects, storage=StorageType.MEMORY
                                         if storage == "memory" else StorageType.FILE))
    await nc.close()


def run_point(servers: Servers, system: str, workload: str, pubs: int, subs: int, args: argparse.Namespace,
              tag: str) -> dict:
    """One system on one workload: fresh processes; returns what the subscribers measured."""
    tmp = servers.tmp / tag.replace(">", "")
    tmp.mkdir()
    many = workload in ("topics", "pattern")
    topics = args.topics if many else 1
    count = 1 if many else (args.messages // pubs if workload == "fan-in" else args.messages)
    paced = args.paced if workload in ("1->1", "1->1-pattern", "reliable", "durable", "exactly-once") else 0
    pattern = ["--pattern"] if workload in ("pattern", "1->1-pattern") else []
    warm = not many
    topic = "t" + "".join(c for c in tag if c.isalnum())  # a subject every system takes
    names = [f"{topic}{i}" if topics > 1 else topic for i in range(topics)]
    url = servers.url(system)
    if system.startswith("jetstream"):
        asyncio.run(_stream(url, topic, names, system.split("-")[1]))
    expected = pubs * (count * topics + paced)
    sub_procs, pub_procs = [], []
    stop = tmp / "stop"
    try:
        for i in range(subs):
            sub_procs.append(subprocess.Popen(
                [*CHILD, "sub", system, url, "--topic", topic, "--topics", str(topics), "--expected", str(expected),
                 "--ready", str(tmp / f"ready{i}"), "--warm", str(tmp / f"warm{i}") if warm else "",
                 "--out", str(tmp / f"sub{i}.json"), "--data", str(tmp / f"sub-data{i}"),
                 "--limit", str(args.limit), *pattern,
                 *(["--app-db", str(tmp / f"app{i}.sqlite3")] if workload == "exactly-once" else [])],
                start_new_session=True))
        wait_for(lambda: all((tmp / f"ready{i}").exists() for i in range(subs)), 300,
                 what=f"{system} {workload}: subscribers ready")
        warm_files = ",".join(str(tmp / f"warm{i}") for i in range(subs)) if warm else ""
        for i in range(pubs):
            pub_procs.append(subprocess.Popen(
                [*CHILD, "pub", system, url, "--index", str(i), "--topic", topic, "--topics", str(topics),
                 "--count", str(count),
                 "--paced", str(paced), "--warm-files", warm_files, "--out", str(tmp / f"pub{i}.json"),
                 *(["--ready-file", str(tmp / f"pub-ready{i}"), "--go", str(tmp / "go")] if pubs > 1 else []),
                 "--stop", str(stop), "--data", str(tmp / f"pub-data{i}"), *pattern], start_new_session=True))
        if pubs > 1:  # the publishers flood together, once all are warm (their start-ups spread over 0.3 s,
            wait_for(lambda: all((tmp / f"pub-ready{i}").exists() for i in range(pubs)), 300,  # about the
                     what=f"{system} {workload}: publishers warm")  # time 16 of them take to send 50,000)
            (tmp / "go").write_text("1")
        for p in sub_procs:
            p.wait(args.limit + 60)
    finally:
        stop.write_text("1")
        stop_processes(sub_procs + pub_procs, grace=10)
        if system.startswith("jetstream"):
            asyncio.run(_stream(url, topic, names, "", delete=True))
    reports = [json.loads((tmp / f"sub{i}.json").read_text()) for i in range(subs)
               if (tmp / f"sub{i}.json").exists()]
    starts = [json.loads((tmp / f"pub{i}.json").read_text())["start_ns"] for i in range(pubs)
              if (tmp / f"pub{i}.json").exists()]
    flood = sum(r["flood"] for r in reports)
    lasts = [r["last_ns"] for r in reports if r["flood"]]
    latencies = [x for r in reports for x in r["latencies"]]
    row = {"system": system, "workload": workload, "publishers": pubs, "subscribers": subs,
           "sent": pubs * count * topics * subs, "delivered": flood}
    if many:
        row["seconds"] = (max(lasts) - min(starts)) / 1e9 if lasts and starts else None
    elif lasts and starts:  # from the flood's first send to its last arrival: what a system buffers or
        row["msg_per_s"] = flood / ((max(lasts) - min(starts)) / 1e9)  # batches before sending is counted
        row["start_spread_s"] = (max(starts) - min(starts)) / 1e9  # between the publishers' first sends
    if latencies:
        row.update(p50_ms=float(np.percentile(latencies, 50)), p99_ms=float(np.percentile(latencies, 99)),
                   paced_delivered=len(latencies), paced_sent=paced * pubs * subs)
    return row


def best(rows: list[dict], key: str, lower: bool) -> dict | None:
    peers = [r for r in rows if not r["system"].startswith("chordpub") and r.get(key) is not None]
    return (min if lower else max)(peers, key=lambda r: r[key]) if peers else None


def show(rows: list[dict]) -> None:
    for workload in WORKLOADS:
        mine = [r for r in rows if r["workload"] == workload]
        if not mine:
            continue
        print(f"\n{workload}")
        for r in mine:
            parts = [f"  {r['system']:18s} delivered {r['delivered']:>7} of {r['sent']:<7}"]
            if "msg_per_s" in r:
                parts.append(f"{r['msg_per_s']:>9.0f} msg/s")
            if r.get("seconds") is not None:
                parts.append(f"{r['seconds']:.3f} s")
            if "p50_ms" in r:
                parts.append(f"p50 {r['p50_ms']:.3f} ms p99 {r['p99_ms']:.3f} ms ({r['paced_delivered']} of "
                             f"{r['paced_sent']} paced)")
            print("  ".join(parts))
        ours = next((r for r in mine if r["system"].startswith("chordpub")), None)
        if ours is None:
            continue
        for key, lower, what in (("msg_per_s", False, "throughput"), ("seconds", True, "time"),
                                 ("p50_ms", True, "p50"), ("p99_ms", True, "p99")):
            peer = best(mine, key, lower)
            if peer is not None and ours.get(key):
                print(f"  {ours['system']} {what}: {ours[key] / peer[key]:.2f} x the best peer's ({peer['system']})")
        exact = next((r for r in rows if r["workload"] == "1->1" and r["system"] == ours["system"]), None)
        if workload == "1->1-pattern" and exact is not None and exact.get("msg_per_s") and ours.get("msg_per_s"):
            print(f"  {ours['system']} through a pattern: {ours['msg_per_s'] / exact['msg_per_s']:.2f} x its exact "
                  "1->1 of this run")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=50_000, help="flood messages per run (fan-in: in all)")
    ap.add_argument("--paced", type=int, default=2000, help="paced messages (1000/s) for latency")
    ap.add_argument("--fan", type=int, default=16, help="subscribers of fan-out, publishers of fan-in")
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--only", default="", help="comma-separated workloads to run (default: all)")
    ap.add_argument("--limit", type=float, default=120.0, help="seconds a subscriber waits at most")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout instead of the table")
    ap.add_argument("--png", type=Path, help="also draw the figures (throughput and p50 by workload) to this file")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a terminated run still stops its servers
    chosen = [w for w in WORKLOADS if not args.only or w in args.only.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        servers = Servers(Path(tmp_name))
        try:
            for workload in chosen:
                systems, pubs, subs = WORKLOADS[workload]
                for system in systems:
                    row = run_point(servers, system, workload, args.fan if pubs == "fan" else pubs,
                                    args.fan if subs == "fan" else subs, args, f"{workload}-{system}")
                    rows.append(row)
                    shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()
                             if k not in ("system", "workload")}
                    print(f"{workload:9s} {system:18s} {json.dumps(shown)}", file=sys.stderr, flush=True)
        finally:
            servers.close()
    if args.json:
        print(json.dumps({"rows": rows, "messages": args.messages, "fan": args.fan, "topics": args.topics}))
    else:
        show(rows)
    if args.png:
        draw(rows, args.png)
        print(f"figure: {args.png}", file=sys.stderr)


def draw(rows: list[dict], path: Path) -> None:
    """Two panels, a group of bars per workload, one bar per system measured in it: messages per
    second delivered (log scale), and p50 latency where the application got the message."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    systems = sorted({r["system"] for r in rows}, key=lambda s: (not s.startswith("chordpub"), s))
    colour = {s: f"C{i}" for i, s in enumerate(systems)}
    for ax, key, label in zip(fig.subplots(1, 2), ("msg_per_s", "p50_ms"),
                              ("messages/s delivered (log)", "p50 latency at the application, ms"), strict=True):
        x, ticks, names = 0.0, [], []
        for workload in WORKLOADS:
            group = [r for r in rows if r["workload"] == workload and r.get(key)]
            for r in group:
                ax.bar(x, r[key], 0.8, color=colour[r["system"]], label=r["system"])
                x += 1
            if group:
                ticks.append(x - (len(group) + 1) / 2)
                names.append(workload)
                x += 0.8
        ax.set_xticks(ticks, names)
        ax.set_ylabel(label)
        if key == "msg_per_s":
            ax.set_yscale("log")
    handles, labels = fig.axes[0].get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    fig.legend(unique.values(), unique.keys(), loc="outside right upper", fontsize=8)
    fig.savefig(path, dpi=110)

if __name__ == "__main__":
    main()
