"""Fan-out: one publisher, S subscribers; what the topic's owner node pays per subscriber per heartbeat.

    python benchmarks/fanout.py [--subscribers 10,100,1000] [--procs 10] [--heartbeat 1.0]
                                [--seconds 10] [--messages 50] [--repeat 3] [--json]

A 4-node ring on loopback. For each S, S subscribing Clients (one chordpub.Client each, as S
applications would have) spread over --procs processes follow one topic; then one publishing Client
advertises it, waits until every subscriber's filter is at its PUB socket, and sends --messages
messages during a window of --seconds. Over the window the topic's owner node's CPU seconds
(/proc/PID/stat: user + system) and bytes sent (its `node info` traffic: replies, its own requests,
published record changes) are read, and divided by the heartbeats in the window and by S. The
owner does nothing per message in direct mode; what it does per subscriber is a lease renewal every
heartbeat (one request per subscribing client, since each client has one topic here).

Baselines, same run: S = 10 (the goal: the cost per subscriber at S = 1000 within 2x of it); the
owner idle (no subscriber), for the cost above idle ("marginal"); and raw pyzmq: a bare ROUTER echo
process answering S requests a second, spread like heartbeats, for what one request/reply costs a
process on this machine at all (waking libzmq's I/O thread and the receiving thread dominates).
Every subscriber must get every message (printed as deliveries of the expected).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.spread import said, verdict  # noqa: E402
from chordpub.launcher import LocalRing, stop_processes, wait_for  # noqa: E402

TOPIC = "fanout"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def owner_traffic(via: str, owner: str) -> int:
    from dht.client import DhtClient

    with DhtClient(via, timeout=10.0) as client:  # an owner under load may take a moment
        t = client.info(owner)["traffic"]
    return int(t["replies_bytes"] + t["requests_bytes"] + t["events_bytes"])


# -- raw pyzmq: a bare echo process, the floor of what a request costs ---------------------------------
def run_echo(port_file: str) -> None:
    import zmq

    sock = zmq.Context.instance().socket(zmq.ROUTER)
    Path(port_file).write_text(str(sock.bind_to_random_port("tcp://127.0.0.1")))
    while True:
        sock.send_multipart(sock.recv_multipart())


def echo_cpu_us(rate: float, seconds: float, tmp: Path) -> float:
    """CPU microseconds per request of a bare pyzmq ROUTER echo process at `rate` requests/s."""
    import zmq

    port_file = tmp / f"echo-{rate}.port"
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--echo", str(port_file)],
                            stdin=subprocess.DEVNULL)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        wait_for(lambda: port_file.exists() and port_file.read_text(), timeout=30, what="echo port")
        sock.connect(f"tcp://127.0.0.1:{port_file.read_text()}")
        body = b"x" * 80  # about a renewal request
        sock.send(body)
        sock.recv()
        n = max(int(rate * seconds), 1)
        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        for i in range(n):
            sock.send(body)
            sock.recv()
            time.sleep(max(t0 + (i + 1) / rate - time.monotonic(), 0))  # pacing (a rate)
        return (cpu_seconds(proc.pid) - cpu0) / n * 1e6
    finally:
        sock.close()
        stop_processes([proc], grace=2)


# -- a subscribing process -------------------------------------------------------------------------
def run_subscribers(args: argparse.Namespace) -> None:
    import zmq

    from chordpub import Client

    context = zmq.Context()  # the process's clients share one (one libzmq I/O thread, not one each)
    # a hundred clients woken by one event would otherwise spend the machine on GIL hand-offs
    sys.setswitchinterval(0.05)
    counts: list[int] = []
    lock = threading.Lock()
    clients = []
    try:
        for i in range(args.clients):
            counts.append(0)

            def on_message(_m, i=i) -> None:  # noqa: ANN001
                with lock:
                    counts[i] += 1

            client = Client(args.via, heartbeat=args.heartbeat, timeout=60, context=context)
            client.subscribe(TOPIC, callback=on_message, timeout=60)
            clients.append(client)
        Path(args.ready).write_text(str(len(clients)))
        wait_for(lambda: Path(args.stop).exists(), timeout=3600, interval=0.1, what="stop")
        with lock:
            tmp = Path(args.out + ".tmp")
            tmp.write_text(json.dumps(counts))
            os.replace(tmp, args.out)  # whole, or not there: the driver polls for it
    finally:
        for client in clients:
            client.close()
        context.term()


# -- the driver ---------------------------------------------------------------------------------------
def measure(ring: LocalRing, owner: str, owner_pid: int, s: int, args: argparse.Namespace, tmp: Path) -> dict:
    from chordpub import Client

    procs, per = [], []
    n_procs = min(args.procs, max(s, 1))
    for p in range(n_procs):
        per.append(s // n_procs + (1 if p < s % n_procs else 0))
    files = [{k: tmp / f"s{s}-p{p}.{k}" for k in ("ready", "stop", "out")} for p in range(n_procs)]
    publisher = None
    try:
        for p, n in enumerate(per):
            if n == 0:
                continue
            procs.append(subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--child", "--clients", str(n),
                 "--via", ring.nodes[p % len(ring.nodes)].endpoint, "--heartbeat", str(args.heartbeat),
                 "--ready", str(files[p]["ready"]), "--stop", str(files[p]["stop"]), "--out", str(files[p]["out"])],
                stdin=subprocess.DEVNULL))
        wait_for(lambda: all(f["ready"].exists() for f, n in zip(files, per, strict=True) if n) or any(
            x.poll() is not None for x in procs), timeout=900, interval=0.2, what=f"{s} subscribers")
        if any(x.poll() is not None for x in procs):
            raise SystemExit(f"a subscriber process died at S = {s}")
        publisher = Client(ring.nodes[0].endpoint, heartbeat=args.heartbeat, timeout=60)
        publisher.advertise(TOPIC)
        wait_for(lambda: publisher.publishing.in_place(TOPIC) >= s, timeout=300, interval=0.05,
                 what=f"all {s} subscribers connected")
        time.sleep(2 * args.heartbeat)  # settle: everyone's first renewals done (a wait, not a sync)
        cpu0, bytes0, t0 = cpu_seconds(owner_pid), owner_traffic(ring.nodes[0].endpoint, owner), time.monotonic()
        for i in range(args.messages):
            publisher.publish(TOPIC, f"m{i}")
            time.sleep(args.seconds / max(args.messages, 1))  # paced over the window
        left = args.seconds - (time.monotonic() - t0)
        if left > 0:
            time.sleep(left)
        window = time.monotonic() - t0
        cpu1, bytes1 = cpu_seconds(owner_pid), owner_traffic(ring.nodes[0].endpoint, owner)
        for f, n in zip(files, per, strict=True):
            if n:
                f["stop"].write_text("1")
        wait_for(lambda: all(f["out"].exists() for f, n in zip(files, per, strict=True) if n), timeout=120,
                 what="the subscribers' counts")
        counts = [c for f, n in zip(files, per, strict=True) if n for c in json.loads(f["out"].read_text())]
    finally:
        if publisher is not None:
            publisher.close()
        for f in files:
            f["stop"].write_text("1")
        stop_processes(procs, grace=60)
    beats = window / args.heartbeat
    return {"subscribers": s, "window_s": round(window, 2), "owner_cpu_s": round(cpu1 - cpu0, 4),
            "owner_bytes": bytes1 - bytes0, "cpu_ms_per_beat": (cpu1 - cpu0) / beats * 1000,
            "bytes_per_beat": (bytes1 - bytes0) / beats,
            "deliveries": sum(counts), "expected": s * args.messages,
            "every_subscriber_got_everything": len(counts) == s and all(c == args.messages for c in counts)}


def idle(ring: LocalRing, owner: str, owner_pid: int, args: argparse.Namespace) -> dict:
    cpu0, bytes0, t0 = cpu_seconds(owner_pid), owner_traffic(ring.nodes[0].endpoint, owner), time.monotonic()
    time.sleep(args.seconds)
    window = time.monotonic() - t0
    beats = window / args.heartbeat
    return {"cpu_ms_per_beat": (cpu_seconds(owner_pid) - cpu0) / beats * 1000,
            "bytes_per_beat": (owner_traffic(ring.nodes[0].endpoint, owner) - bytes0) / beats}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subscribers", default="10,100,1000")
    ap.add_argument("--procs", type=int, default=10, help="processes the subscribing clients are spread over")
    ap.add_argument("--heartbeat", type=float, default=1.0)
    ap.add_argument("--seconds", type=float, default=10.0, help="measurement window per point")
    ap.add_argument("--messages", type=int, default=50, help="published during each window")
    ap.add_argument("--repeat", type=int, default=3, help="runs, each on a fresh ring (the goal is judged on each)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--echo", help=argparse.SUPPRESS)
    for hidden in ("--via", "--ready", "--stop", "--out"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    ap.add_argument("--clients", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        run_subscribers(args)
        return
    if args.echo:
        run_echo(args.echo)
        return
    sizes = [int(x) for x in args.subscribers.split(",")]
    runs = [one_run(args, sizes) for _ in range(args.repeat)]
    if args.json:
        print(json.dumps({"runs": [{"idle": base, "points": points} for base, points in runs]}))
        return
    base, points = runs[len(runs) // 2]  # the table shows one run whole; the goal every run
    ref = points[0]
    print(f"\nrun {len(runs) // 2 + 1} of {len(runs)}; owner idle: {base['cpu_ms_per_beat']:.2f} ms CPU, "
          f"{base['bytes_per_beat']:.0f} B per heartbeat")
    print(f"{'S':>6} {'CPU us/sub/beat':>16} {'x S=' + str(ref['subscribers']):>7} {'B/sub/beat':>11} {'x':>6} "
          f"{'marginal CPU us':>16} {'x':>6} {'marginal B':>11} {'x':>6} {'raw echo us':>12} {'x raw':>6} "
          f"{'deliveries':>16}")
    for r in points:
        print(f"{r['subscribers']:>6} {r['cpu_us_per_sub_beat']:>16.1f} {r['cpu_ratio']:>7.2f} "
              f"{r['bytes_per_sub_beat']:>11.1f} {r['bytes_ratio']:>6.2f} {r['marginal_cpu_us_per_sub_beat']:>16.1f} "
              f"{r['marginal_cpu_ratio']:>6.2f} {r['marginal_bytes_per_sub_beat']:>11.1f} "
              f"{r['marginal_bytes_ratio']:>6.2f} {r['raw_echo_cpu_us']:>12.1f} {r['marginal_cpu_x_raw_echo']:>6.2f} "
              f"{r['deliveries']:>8}/{r['expected']:<7}")
    cpu = [pts[-1]["marginal_cpu_ratio"] for _, pts in runs]
    byts = [pts[-1]["marginal_bytes_ratio"] for _, pts in runs]
    whole = all(p["every_subscriber_got_everything"] for _, pts in runs for p in pts)
    print(f"goal: the marginal cost per subscriber (above the owner's idle cost) at S = {points[-1]['subscribers']} "
          f"within 2x of S = {ref['subscribers']}, run by run: CPU {said(cpu)}, {verdict(cpu, lambda x: x <= 2)}; "
          f"bytes {said(byts)}, {verdict(byts, lambda x: x <= 2)}; every subscriber got every message in every "
          f"run: {'yes' if whole else 'NO'}")


def one_run(args: argparse.Namespace, sizes: list[int]) -> tuple[dict, list[dict]]:
    """A fresh ring: the owner idle, then each S; every figure per subscriber and against S = sizes[0]."""
    with tempfile.TemporaryDirectory() as tmp, LocalRing(Path(tmp) / "ring", options={"stabilize": 0.5}) as ring:
        ring.start(4)
        ring.wait_consistent(timeout=60)
        from dht.client import DhtClient

        with DhtClient(ring.nodes[0].endpoint) as client:
            owner = client.lookup(TOPIC).owner.endpoint
        owner_pid = next(n.proc.pid for n in ring.nodes if n.endpoint == owner)
        base = idle(ring, owner, owner_pid, args)
        points = []
        for s in sizes:
            r = measure(ring, owner, owner_pid, s, args, Path(tmp))
            r["cpu_us_per_sub_beat"] = r["cpu_ms_per_beat"] * 1000 / s
            r["bytes_per_sub_beat"] = r["bytes_per_beat"] / s
            r["marginal_cpu_us_per_sub_beat"] = (r["cpu_ms_per_beat"] - base["cpu_ms_per_beat"]) * 1000 / s
            r["marginal_bytes_per_sub_beat"] = (r["bytes_per_beat"] - base["bytes_per_beat"]) / s
            r["raw_echo_cpu_us"] = echo_cpu_us(s / args.heartbeat, args.seconds, Path(tmp))
            r["marginal_cpu_x_raw_echo"] = r["marginal_cpu_us_per_sub_beat"] / r["raw_echo_cpu_us"]
            points.append(r)
            if not args.json:
                print(f"S={s}: owner {r['cpu_ms_per_beat']:.2f} ms CPU and {r['bytes_per_beat']:.0f} B per heartbeat; "
                      f"deliveries {r['deliveries']}/{r['expected']}", flush=True)
    ref = points[0]
    for r in points:
        r["cpu_ratio"] = r["cpu_us_per_sub_beat"] / ref["cpu_us_per_sub_beat"]
        r["bytes_ratio"] = r["bytes_per_sub_beat"] / ref["bytes_per_sub_beat"]
        r["marginal_cpu_ratio"] = r["marginal_cpu_us_per_sub_beat"] / ref["marginal_cpu_us_per_sub_beat"]
        r["marginal_bytes_ratio"] = r["marginal_bytes_per_sub_beat"] / ref["marginal_bytes_per_sub_beat"]
    return base, points


if __name__ == "__main__":
    main()
