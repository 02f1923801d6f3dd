"""One publisher to one subscriber, 100-byte messages: chordpub against raw pyzmq, in one run.

    python benchmarks/dissemination.py [--messages 50000] [--paced 2000] [--repeat 3]

Variants, each a publisher process and a subscriber process on loopback:
  raw       bare pyzmq PUB -> SUB, [topic, 100-byte payload] with send_multipart/recv_multipart,
            nothing else (the baseline: pyzmq as its documentation shows pub/sub);
  raw1      bare pyzmq, one frame per message (send/recv), which is what chordpub sends: the
            strongest baseline, since pyzmq's multipart path costs two option lookups a message;
  direct    chordpub.Client publishing -> chordpub.Client subscribed with a callback, found through a
            4-node ring, the subscriber's SUB connected to the publisher's PUB;
  reliable  the same with --reliable (sequence check, in-order buffer, tail repair) and history;
  relay     chordpub through the topic owner's XSUB/XPUB relay (one more process on the path);
  batched   direct, the flood sent with `publish_many` 100 messages at a time (paced as direct).
Each run has two phases on one stream:
  paced       --paced messages at 2000/s: latency p50/p99, from the publisher's clock when it
              sent to the subscribing application's, read when it got the message (chordpub: in
              its callback; raw: after `recv`);
  throughput  --messages sent as fast as the publisher can: messages per second where the
              application gets them, from the first to the last of the phase (and the rate the
              publisher sent them at, "sent at").
Variants are interleaved and repeated (--repeat); medians are reported, each as a ratio of raw.
Goal: direct >= 0.6 x raw throughput (0.8 hoped for) and direct p50 <= 1.3 x raw.
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zmq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.spread import said, verdict  # noqa: E402
from chordpub.launcher import LocalRing, stop_processes, wait_for  # noqa: E402

VARIANTS = ("raw", "raw1", "direct", "reliable", "relay", "batched")
CLIENT_VARIANTS = ("direct", "reliable", "relay", "durable", "batched")  # durable: benchmarks/durable.py
TOPIC = "bench"
SIZE = 100
WARM, PACED, FLOOD = b"w", b"p", b"f"
HEAD = struct.Struct("!cQq")  # phase, index, sent_ns (raw only: chordpub carries sent_ns itself)
PACE_PER_S = 2000.0
BATCHED = 100  # messages per publish_many in the batched variant
IDLE_S = 3.0  # a subscriber that hears nothing this long after the flood began reports what it has


def payload(phase: bytes, index: int) -> bytes:
    head = HEAD.pack(phase, index, time.time_ns())
    return head + b"\x00" * (SIZE - len(head))


def paced(count: int, send) -> None:
    t0 = time.perf_counter()
    for i in range(count):
        send(PACED, i)
        delay = t0 + (i + 1) / PACE_PER_S - time.perf_counter()
        if delay > 0:
            time.sleep(delay)


# -- child processes ------------------------------------------------------------------------------
def run_publisher(args: argparse.Namespace) -> None:
    ready, done = Path(args.ready), Path(args.done)
    if args.variant in ("raw", "raw1"):
        sock = zmq.Context.instance().socket(zmq.PUB)
        sock.setsockopt(zmq.SNDHWM, 100_000)
        sock.setsockopt(zmq.LINGER, 2000)
        Path(args.port_file).write_text(str(sock.bind_to_random_port("tcp://127.0.0.1")))
        topic = TOPIC.encode()

        if args.variant == "raw":
            def send(phase: bytes, i: int) -> None:
                sock.send_multipart([topic, payload(phase, i)])
        else:
            def send(phase: bytes, i: int) -> None:
                sock.send(topic + payload(phase, i))
        close = sock.close
    else:
        from chordpub import Client

        mode = "relay" if args.variant == "relay" else "direct"
        history = args.messages + args.paced + 100_000 if args.variant == "reliable" else 0
        durable = args.variant == "durable"  # every message journaled before it is sent; acks retain
        client = Client(args.via, heartbeat=1.0, data_dir=Path(args.out + ".pub") if durable else None)
        client.advertise(TOPIC, history=history, mode=mode, reliable=args.variant in ("reliable", "durable"))
        publish = client.publish

        def send(phase: bytes, i: int) -> None:
            publish(TOPIC, payload(phase, i))

        close = client.close
    i = 0
    while not ready.exists():  # until the subscriber has heard us: no slow-joiner loss in the figures
        send(WARM, i)
        i += 1
        time.sleep(0.01)
    paced(args.paced, send)
    t0 = time.perf_counter()
    if args.variant == "batched":
        for start in range(0, args.messages, BATCHED):
            client.publish_many(TOPIC, [payload(FLOOD, i) for i in range(start, min(start + BATCHED, args.messages))])
    else:
        for i in range(args.messages):
            send(FLOOD, i)
    Path(args.out + ".sent").write_text(str(args.messages / (time.perf_counter() - t0)))
    wait_for(done.exists, timeout=120, what="the subscriber's report")  # reliable: keep serving repairs
    close()


def run_subscriber(args: argparse.Namespace) -> None:
    ready, out = Path(args.ready), Path(args.out)
    lat: list[float] = []
    flood: list[int] = []  # when the application got each flood message
    last_heard = [time.monotonic()]

    def on_message(phase: bytes, recv_ns: int, sent_ns: int) -> None:
        last_heard[0] = time.monotonic()
        if phase == WARM:
            if not ready.exists():
                ready.write_text("1")
        elif phase == PACED:
            lat.append((recv_ns - sent_ns) / 1e6)
        elif phase == FLOOD:
            flood.append(recv_ns)

    def finished() -> bool:
        return len(flood) >= args.messages or (bool(flood) and time.monotonic() - last_heard[0] > IDLE_S)

    if args.variant in ("raw", "raw1"):
        single = args.variant == "raw1"
        sock = zmq.Context.instance().socket(zmq.SUB)
        sock.setsockopt(zmq.RCVHWM, 100_000)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SUBSCRIBE, TOPIC.encode())
        wait_for(lambda: Path(args.port_file).exists() and Path(args.port_file).read_text(), timeout=30,
                 what="raw publisher's port")
        sock.connect(f"tcp://127.0.0.1:{Path(args.port_file).read_text()}")
        while not finished():
            if sock.poll(100):
                while True:
                    try:
                        if single:
                            body = sock.recv(zmq.NOBLOCK)[len(TOPIC):]
                        else:
                            body = sock.recv_multipart(zmq.NOBLOCK)[1]
                    except zmq.Again:
                        break
                    recv_ns = time.time_ns()
                    phase, _, sent_ns = HEAD.unpack_from(body)
                    on_message(phase, recv_ns, sent_ns)
        sock.close()
    else:
        from chordpub import Client, Message

        def on_delivery(m: Message) -> None:
            on_message(m.payload[:1], time.time_ns(), m.sent_ns)  # when the application has it

        mode = "relay" if args.variant == "relay" else "direct"
        durable = args.variant == "durable"  # positions committed after every batch of callbacks
        with Client(args.via, heartbeat=1.0, data_dir=Path(args.out + ".sub") if durable else None) as client:
            client.subscribe(TOPIC, reliable=args.variant == "reliable", mode=mode, callback=on_delivery,
                             durable="bench" if durable else None)
            while not finished():
                time.sleep(0.05)  # the benchmark's own stop check; deliveries run on the client's threads
    seconds = (flood[-1] - flood[0]) / 1e9 if len(flood) > 1 else float("nan")
    out.write_text(json.dumps({
        "variant": args.variant, "flood_received": len(flood), "paced_received": len(lat),
        "throughput": (len(flood) - 1) / seconds if seconds > 0 else 0.0,
        "p50_ms": float(np.percentile(lat, 50)) if lat else float("nan"),
        "p99_ms": float(np.percentile(lat, 99)) if lat else float("nan"),
    }))


# -- the driver --------------------------------------------------------------------------------------
def measure(variant: str, via: str, tmp: Path, args: argparse.Namespace, n: int) -> dict:
    files = {k: tmp / f"{variant}-{n}.{k}" for k in ("ready", "done", "port", "out")}
    common = ["--variant", variant, "--via", via, "--ready", str(files["ready"]), "--done", str(files["done"]),
              "--port-file", str(files["port"]), "--out", str(files["out"]),
              "--messages", str(args.messages), "--paced", str(args.paced)]
    me = [sys.executable, str(Path(__file__).resolve())]
    procs = [subprocess.Popen([*me, "--child", "sub", *common], stdin=subprocess.DEVNULL)]
    try:
        procs.append(subprocess.Popen([*me, "--child", "pub", *common], stdin=subprocess.DEVNULL))
        wait_for(lambda: files["out"].exists() or procs[0].poll() is not None, timeout=300,
                 what=f"{variant} subscriber")
        if not files["out"].exists():
            raise SystemExit(f"the {variant} subscriber failed (exit {procs[0].returncode})")
        files["done"].write_text("1")
        wait_for(lambda: procs[1].poll() is not None, timeout=30, what=f"{variant} publisher exit")
        result = json.loads(files["out"].read_text())
        sent = Path(str(files["out"]) + ".sent")
        result["sent_per_s"] = float(sent.read_text()) if sent.exists() else float("nan")
        return result
    finally:
        stop_processes(procs, grace=3)


def parse_args(doc: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=50_000, help="flood phase size")
    ap.add_argument("--paced", type=int, default=2000, help="paced (latency) phase size, at 2000/s")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help="comma-separated subset to run (raw and raw1 are always run: they are the baseline)")
    ap.add_argument("--child", choices=("pub", "sub"), help=argparse.SUPPRESS)
    for hidden in ("--variant", "--via", "--ready", "--done", "--port-file", "--out"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    return ap.parse_args()


def collect(args: argparse.Namespace, variants: tuple[str, ...]) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    """Every variant measured `args.repeat` times, interleaved; the runs and their medians."""
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as tmp, LocalRing(Path(tmp), options={"stabilize": 0.5}) as ring:
        ring.start(args.nodes, timeout=120)
        ring.wait_consistent(timeout=120)
        for n in range(args.repeat):
            for variant in variants:
                via = ring.nodes[n % len(ring.nodes)].endpoint
                r = measure(variant, via, Path(tmp), args, n)
                runs[variant].append(r)
                if not args.json:
                    print(f"run {n + 1} {variant:9s} {r['throughput']:9.0f} msg/s (sent at {r['sent_per_s']:.0f}/s)  "
                          f"p50 {r['p50_ms']:.3f} ms  p99 {r['p99_ms']:.3f} ms  "
                          f"received {r['flood_received']}/{args.messages} + {r['paced_received']}/{args.paced}",
                          flush=True)
    med = {v: {k: float(np.median([r[k] for r in rs])) for k in ("throughput", "p50_ms", "p99_ms")}
           for v, rs in runs.items()}
    return runs, med


def main() -> None:
    args = parse_args(__doc__)
    if args.child:
        (run_publisher if args.child == "pub" else run_subscriber)(args)
        return
    chosen = set(args.variants.split(",")) | {"raw", "raw1"}
    unknown = chosen - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variant(s): {', '.join(sorted(unknown))}; choose from {', '.join(VARIANTS)}")
    variants = tuple(v for v in VARIANTS if v in chosen)
    runs, med = collect(args, variants)
    raw, raw1 = med["raw"], med["raw1"]
    for v in variants:
        med[v]["throughput_ratio"] = med[v]["throughput"] / raw["throughput"]
        med[v]["p50_ratio"] = med[v]["p50_ms"] / raw["p50_ms"]
        med[v]["p99_ratio"] = med[v]["p99_ms"] / raw["p99_ms"]
        med[v]["throughput_ratio_raw1"] = med[v]["throughput"] / raw1["throughput"]
        med[v]["p50_ratio_raw1"] = med[v]["p50_ms"] / raw1["p50_ms"]
    if args.json:
        print(json.dumps({"runs": runs, "median": med, "goal": {"throughput_ratio": 0.6, "p50_ratio": 1.3}}))
        return
    print(f"\nmedians of {args.repeat} runs, {SIZE}-byte messages, each as a ratio of raw pyzmq:")
    print(f"{'variant':9s} {'msg/s':>9s} {'x raw':>6s} {'x raw1':>6s} {'p50 ms':>8s} {'x raw':>6s} {'x raw1':>6s} "
          f"{'p99 ms':>8s} {'x raw':>6s}")
    for v in variants:
        m = med[v]
        print(f"{v:9s} {m['throughput']:9.0f} {m['throughput_ratio']:6.2f} {m['throughput_ratio_raw1']:6.2f} "
              f"{m['p50_ms']:8.3f} {m['p50_ratio']:6.2f} {m['p50_ratio_raw1']:6.2f} {m['p99_ms']:8.3f} "
              f"{m['p99_ratio']:6.2f}")
    if "direct" not in runs:
        return
    pairs = list(zip(runs["direct"], runs["raw1"], strict=True))
    thr = [d["throughput"] / r["throughput"] for d, r in pairs]
    p50 = [d["p50_ms"] / r["p50_ms"] for d, r in pairs]
    print(f"goal, judged against the wire chordpub uses (raw1, single frames), run by run: direct >= 0.6 x "
          f"throughput: {said(thr)}, {verdict(thr, lambda x: x >= 0.6)}; p50 <= 1.3 x: {said(p50)}, "
          f"{verdict(p50, lambda x: x <= 1.3)}")


if __name__ == "__main__":
    main()
