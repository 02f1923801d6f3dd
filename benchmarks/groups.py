"""Work queues: chordpub consumer groups against NATS JetStream, the same workload in the same run.

    python benchmarks/groups.py [--members 1,2,4,8] [--per-member 1000] [--work-ms 2] [--json]

(a) Throughput: M member processes whose handler waits --work-ms (I/O-bound work, as a call to a
    database would), one publisher sending M x --per-member messages as fast as it can; the figure is
    messages handled per second from the first handled to the last, against the ideal M / work
    (near-linear is the goal).
(b) Failover: 3 members under load, one SIGKILLed while it holds messages: the time from the kill
    until every message it held has reached another member.
Baseline, same machine and run: NATS JetStream (Debian's nats-server, the nats-py client), a
work-queue stream (file storage) with one durable pull consumer shared by the members, explicit
acks, each member fetching batches of --prefetch; chordpub members use the same prefetch. Both
systems' ack wait is 30 s (either's default): a JetStream member killed holding messages gives them
back only then, a chordpub member as soon as its connection or lease is gone.

`make bench-groups` installs nats-server and nats-py first.
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
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chordpub.launcher import LocalRing, stop_processes, wait_for  # noqa: E402

ACK_WAIT = 30.0


# -- members (child processes) ------------------------------------------------------------------------
def chordpub_member(args: argparse.Namespace) -> None:
    from chordpub import Client

    out = open(args.out, "w", buffering=1)  # noqa: SIM115 - closed at the end

    def handle(m) -> None:  # noqa: ANN001
        out.write(f"{m.seq} {time.time():.6f} {int(m.redelivered)}\n")
        time.sleep(args.work_ms / 1000)  # the work

    with Client(args.via, heartbeat=0.5) as client:
        client.subscribe(args.subject, group="workers", prefetch=args.prefetch, ack_wait=ACK_WAIT, callback=handle)
        Path(args.ready).write_text("1")
        _until_stopped(args.stop)
    out.close()


def jetstream_member(args: argparse.Namespace) -> None:
    import nats

    async def run() -> None:
        nc = await nats.connect(args.via)
        js = nc.jetstream()
        sub = await js.pull_subscribe(args.subject, durable="workers", stream=args.stream)
        Path(args.ready).write_text("1")
        with open(args.out, "w", buffering=1) as out:
            while not Path(args.stop).exists():
                try:
                    msgs = await sub.fetch(args.prefetch, timeout=0.5)
                except nats.errors.TimeoutError:
                    continue
                for m in msgs:
                    out.write(f"{m.metadata.sequence.stream} {time.time():.6f} "
                              f"{int(m.metadata.num_delivered > 1)}\n")
                    time.sleep(args.work_ms / 1000)  # the work, as blocking as chordpub's handler
                    await m.ack()
        await nc.close()

    asyncio.run(run())


def _until_stopped(stop: str) -> None:
    while not Path(stop).exists():
        time.sleep(0.05)  # the benchmark's own stop signal; the work happens on the client's threads


# -- publishers -----------------------------------------------------------------------------------------
def publish_chordpub(via: str, subject: str, n: int) -> None:
    from chordpub import Client

    with Client(via, heartbeat=0.5, timeout=60) as client:
        client.advertise(subject)
        for i in range(n):
            client.publish(subject, f"job {i}")
        wait_for(lambda: not client.publishing.groups.owing(), 600, what="the group's backlog taken")


def publish_jetstream(url: str, stream: str, subject: str, n: int) -> None:
    import nats

    async def run() -> None:
        nc = await nats.connect(url)
        js = nc.jetstream()
        for i in range(0, n, 500):
            await asyncio.gather(*(js.publish(subject, f"job {j}".encode()) for j in range(i, min(n, i + 500))))
        await nc.close()

    asyncio.run(run())


async def _make_stream(url: str, stream: str, subject: str) -> None:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType, StreamConfig

    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=stream, subjects=[subject], retention=RetentionPolicy.WORK_QUEUE,
                                     storage=StorageType.FILE))
    await js.add_consumer(stream, ConsumerConfig(durable_name="workers", ack_policy=AckPolicy.EXPLICIT,
                                                 ack_wait=ACK_WAIT, max_ack_pending=10_000))
    await nc.close()


# -- the driver ---------------------------------------------------------------------------------------------
class Point:
    def __init__(self, system: str, via: str, subject: str, members: int, tmp: Path, args: argparse.Namespace,
                 stream: str = "") -> None:
        self.system, self.via, self.subject, self.stream, self.tmp, self.args = system, via, subject, stream, tmp, args
        self.stop = tmp / f"{subject}.stop"
        self.procs: list[subprocess.Popen] = []
        self.outs: list[Path] = []
        for i in range(members):
            self.add(i)

    def add(self, i: int) -> subprocess.Popen:
        out, ready = self.tmp / f"{self.subject}.{i}.out", self.tmp / f"{self.subject}.{i}.ready"
        p = subprocess.Popen([sys.executable, __file__, "--child", f"{self.system}-member", "--via", self.via,
                              "--subject", self.subject, "--stream", self.stream, "--out", str(out), "--ready",
                              str(ready), "--stop", str(self.stop), "--work-ms", str(self.args.work_ms),
                              "--prefetch", str(self.args.prefetch)], stdin=subprocess.DEVNULL)
        self.procs.append(p)
        self.outs.append(out)
        wait_for(lambda: ready.exists() or p.poll() is not None, 60, what=f"{self.system} member {i}")
        if p.poll() is not None:
            raise SystemExit(f"a {self.system} member failed (exit {p.returncode})")
        return p

    def records(self) -> list[tuple[int, float, bool, int]]:
        rows = []
        for i, out in enumerate(self.outs):
            for line in out.read_text().splitlines() if out.exists() else []:
                parts = line.split()
                if len(parts) == 3:
                    rows.append((int(parts[0]), float(parts[1]), parts[2] == "1", i))
        return rows

    def publish(self, n: int) -> None:
        if self.system == "chordpub":
            publish_chordpub(self.via, self.subject, n)
        else:
            publish_jetstream(self.via, self.stream, self.subject, n)

    def close(self) -> None:
        self.stop.write_text("1")
        stop_processes(self.procs, grace=10)


def throughput(point: Point, n: int) -> dict:
    point.publish(n)
    wait_for(lambda: len({r[0] for r in point.records()}) >= n, 60 + n * point.args.work_ms / 1000, interval=0.2,
             what=f"{n} handled")
    rows = point.records()
    times = sorted(r[1] for r in rows)
    seconds = times[-1] - times[0]
    rate = (len(rows) - 1) / seconds if seconds > 0 else float("nan")
    return {"handled": len({r[0] for r in rows}), "deliveries": len(rows), "seconds": round(seconds, 3),
            "msg_per_s": round(rate, 1)}


def failover(point: Point, n: int) -> dict:
    """Publish n, kill member 0 once it is at work, measure until its held messages are elsewhere."""
    publisher = threading.Thread(target=point.publish, args=(n,), daemon=True)
    publisher.start()
    wait_for(lambda: sum(1 for r in point.records() if r[3] == 0) >= 20, 60, what="member 0 at work")
    victim = point.procs[0]
    victim.send_signal(signal.SIGKILL)
    killed = time.time()
    victim.wait(10)
    wait_for(lambda: len({r[0] for r in point.records()}) >= n, ACK_WAIT * 3 + 60, interval=0.1,
             what=f"all {n} handled after the kill")
    publisher.join(60)
    again = [r for r in point.records() if r[2] and r[3] != 0]
    last = max((r[1] for r in again), default=killed)
    return {"redelivered": len({r[0] for r in again}), "seconds_to_redeliver": round(last - killed, 3)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--members", default="1,2,4,8")
    ap.add_argument("--per-member", type=int, default=1000)
    ap.add_argument("--work-ms", type=float, default=2.0)
    ap.add_argument("--prefetch", type=int, default=100)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    for hidden in ("--via", "--subject", "--stream", "--out", "--ready", "--stop"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        (chordpub_member if args.child == "chordpub-member" else jetstream_member)(args)
        return
    server = shutil.which("nats-server") or "/usr/sbin/nats-server"
    if not Path(server).exists():
        raise SystemExit("nats-server is not installed: `make bench-groups` installs it (apt-get install nats-server)")
    sizes = [int(x) for x in args.members.split(",")]
    results: dict = {"work_ms": args.work_ms, "prefetch": args.prefetch, "throughput": [], "failover": {}}
    with tempfile.TemporaryDirectory() as tmp_name, LocalRing(Path(tmp_name) / "ring",
                                                               options={"stabilize": 0.5}) as ring:
        tmp = Path(tmp_name)
        ring.start(3)
        ring.wait_consistent(timeout=60)
        port = free_port()
        nats_proc = subprocess.Popen([server, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(tmp / "js")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"nats://127.0.0.1:{port}"
        try:
            wait_for(lambda: _answers(port), 30, what="nats-server")
            for m in sizes:
                row = {"members": m, "ideal_msg_per_s": round(m * 1000 / args.work_ms, 1)}
                for system in ("chordpub", "jetstream"):
                    subject = f"work-{m}-{system}"
                    via = ring.nodes[m % 3].endpoint if system == "chordpub" else url
                    if system == "jetstream":
                        asyncio.run(_make_stream(url, f"S{m}", subject))
                    point = Point(system, via, subject, m, tmp, args, stream=f"S{m}")
                    try:
                        row[system] = throughput(point, m * args.per_member)
                    finally:
                        point.close()
                    row[system]["x_ideal"] = round(row[system]["msg_per_s"] / row["ideal_msg_per_s"], 3)
                    if not args.json:
                        print(f"{m} members, {system:9s}: {row[system]['msg_per_s']:8.1f} msg/s "
                              f"({row[system]['x_ideal']:.2f} x ideal {row['ideal_msg_per_s']:.0f})", flush=True)
                row["chordpub_x_jetstream"] = round(row["chordpub"]["msg_per_s"] / row["jetstream"]["msg_per_s"], 3)
                results["throughput"].append(row)
            for system in ("chordpub", "jetstream"):
                subject = f"failover-{system}"
                via = ring.nodes[0].endpoint if system == "chordpub" else url
                if system == "jetstream":
                    asyncio.run(_make_stream(url, "SF", subject))
                point = Point(system, via, subject, 3, tmp, args, stream="SF")
                try:
                    results["failover"][system] = failover(point, 3000)
                finally:
                    point.close()
                if not args.json:
                    f = results["failover"][system]
                    print(f"failover, {system:9s}: {f['redelivered']} held by the killed member, all elsewhere "
                          f"{f['seconds_to_redeliver']:.3f} s after its death", flush=True)
        finally:
            stop_processes([nats_proc], grace=5)
    f = results["failover"]
    results["failover_chordpub_x_jetstream"] = round(f["chordpub"]["seconds_to_redeliver"]
                                                     / f["jetstream"]["seconds_to_redeliver"], 4)
    if args.json:
        print(json.dumps(results))
        return
    print(f"\nwork {args.work_ms:g} ms per message, prefetch {args.prefetch}; msg/s (x the ideal members / work):")
    print(f"{'members':>7} {'ideal':>7} {'chordpub':>18} {'jetstream':>18} {'chordpub x js':>14}")
    for r in results["throughput"]:
        c, j = r["chordpub"], r["jetstream"]
        print(f"{r['members']:>7} {r['ideal_msg_per_s']:>7.0f} {c['msg_per_s']:>9.1f} ({c['x_ideal']:.2f}) "
              f"{j['msg_per_s']:>9.1f} ({j['x_ideal']:.2f}) {r['chordpub_x_jetstream']:>14.2f}")
    print(f"failover: chordpub {f['chordpub']['seconds_to_redeliver']:.3f} s, JetStream "
          f"{f['jetstream']['seconds_to_redeliver']:.3f} s (ack wait {ACK_WAIT:g} s for both): "
          f"{results['failover_chordpub_x_jetstream']:.3f} x")


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


if __name__ == "__main__":
    main()
