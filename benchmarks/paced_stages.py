"""Where a paced message's time goes, stage by stage: chordpub (direct and durable) beside raw pyzmq.

    python benchmarks/paced_stages.py [--messages 4000] [--repeat 3] [--json]

A 2-node ring on loopback. A publisher process sends --messages 100-byte messages at 2000/s (the
latency phase of benchmarks/dissemination.py and of benchmarks/peers.py's durable row); this process
subscribes, with a callback, and reads the clocks each stage leaves:

  publish     the publisher's own call, `Client.publish` (raw: `Socket.send`), timed around it;
  to poll     from the publisher's clock at sending (`Message.sent_ns`) to our io loop's poll returning;
  to read     from the poll returning to the frame read off the SUB socket (`Message.recv_ns`);
  to taken    from the read to the message taken in (the envelope decoded, checked, numbered, made a
              `Message`: `IoLoop.on_frame` returning);
  to handed   from taken to the hand-over to the subscription (`IoLoop._flush` called);
  to callback from the hand-over to the callback (a durable subscription writes its "handed"
              position first);
  total       send to callback, what dissemination.py and peers.py report as latency.
raw1: a bare pyzmq PUB -> SUB, one frame a message, its subscriber timing send to right after `recv`.
The stages are wall-clock p50s over the messages after the first 200, medians over --repeat runs;
the clocks added to take them (one `time.time_ns()` each) cost about 0.1 us apiece. The figures are
what a message costs when each comes alone, after half a millisecond with nothing to do: caches cold,
each Python step several times what the same step costs in a flood.
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

from benchmarks.spread import said  # noqa: E402
from chordpub.launcher import LocalRing, stop_processes, wait_for  # noqa: E402

TOPIC = "stages"
PAD = b"\x00" * 100
RATE = 2000.0
SKIP = 200  # the first messages, while connections and caches settle
STAGES = ("to poll", "to read", "to taken", "to handed", "to callback", "total")
STAMP = struct.Struct("!q")


def paced(count: int, send) -> list[int]:  # noqa: ANN001 - send(i) sends message i
    """Send `count` messages at RATE; the time each `send` took, in ns."""
    took, t0 = [], time.perf_counter()
    for i in range(count):
        a = time.perf_counter_ns()
        send(i)
        took.append(time.perf_counter_ns() - a)
        delay = t0 + (i + 1) / RATE - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    return took


def run_publisher(args: argparse.Namespace) -> None:
    ready = Path(args.ready)
    if args.variant == "raw1":
        sock = zmq.Context.instance().socket(zmq.PUB)
        sock.setsockopt(zmq.LINGER, 1000)
        sock.connect(args.via)
        head = TOPIC.encode()

        def send(_i: int) -> None:
            sock.send(head + STAMP.pack(time.time_ns()) + PAD)
        close = sock.close
    else:
        from chordpub import Client
        durable = args.variant == "durable"
        client = Client(args.via, heartbeat=1.0, data_dir=Path(args.data) if durable else None)
        client.advertise(TOPIC, reliable=durable)

        def send(_i: int) -> None:
            client.publish(TOPIC, PAD)
        close = client.close
    while not ready.exists():  # until the subscriber hears us
        send(0)
        time.sleep(0.01)
    took = paced(args.messages, send)
    Path(args.out).write_text(json.dumps({"publish_us": float(np.percentile(took[SKIP:], 50)) / 1e3}))
    time.sleep(0.3)  # (a durable subscriber's acks come a heartbeat apart; nothing waits on them here)
    close()


class Clocks:
    """The io loop's clocks, taken by wrapping three of its steps (the last value of each: a paced
    message is read, taken and handed over alone, before the next one comes)."""

    def __init__(self, loop) -> None:  # noqa: ANN001 - the subscribing Client's io loop
        import pubsub.io_loop as io_loop
        self.polled = self.taken = self.handed = 0
        self._io_loop, self._poller = io_loop, loop._poller
        self._saved = (io_loop.IoLoop.on_frame, io_loop.IoLoop._flush)
        poll, (on_frame, flush) = loop._poller.poll, self._saved
        clocks = self

        def timed_poll(*a, **k):  # noqa: ANN002, ANN003, ANN202 - this poller's alone: the io loop's
            events = poll(*a, **k)
            clocks.polled = time.time_ns()
            return events

        def timed_on_frame(loop, *a):  # noqa: ANN001, ANN002, ANN202
            ts = on_frame(loop, *a)
            clocks.taken = time.time_ns()
            return ts

        def timed_flush(loop, *a):  # noqa: ANN001, ANN002, ANN202
            clocks.handed = time.time_ns()
            return flush(loop, *a)

        self._poller.poll = timed_poll
        io_loop.IoLoop.on_frame, io_loop.IoLoop._flush = timed_on_frame, timed_flush

    def close(self) -> None:
        del self._poller.poll
        self._io_loop.IoLoop.on_frame, self._io_loop.IoLoop._flush = self._saved


def measure(variant: str, ring: LocalRing, tmp: Path, args: argparse.Namespace, n: int) -> dict:
    files = {k: tmp / f"{variant}-{n}.{k}" for k in ("ready", "out")}
    rows: list[tuple[int, ...]] = []
    child = [sys.executable, str(Path(__file__).resolve()), "--child", "--variant", variant, "--ready",
             str(files["ready"]), "--out", str(files["out"]), "--messages", str(args.messages),
             "--data", str(tmp / f"{variant}-{n}.pub")]
    if variant == "raw1":
        sock = zmq.Context.instance().socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SUBSCRIBE, TOPIC.encode())
        port = sock.bind_to_random_port("tcp://127.0.0.1")
        proc = subprocess.Popen([*child, "--via", f"tcp://127.0.0.1:{port}"], stdin=subprocess.DEVNULL)
        try:
            head = len(TOPIC)
            while len(rows) < args.messages:
                if proc.poll() is not None and not sock.poll(0):
                    raise SystemExit(f"the raw1 publisher ended (exit {proc.returncode}) with {len(rows)} received")
                if sock.poll(100):
                    while True:
                        try:
                            frame = sock.recv(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        got = time.time_ns()
                        if not files["ready"].exists():
                            files["ready"].write_text("1")
                            continue
                        sent = STAMP.unpack_from(frame, head)[0]
                        rows.append((sent, got))
            proc.wait(30)
        finally:
            stop_processes([proc], grace=3)
            sock.close()
        a = np.array(rows[SKIP:], dtype=np.int64)
        return {"total": float(np.percentile(a[:, 1] - a[:, 0], 50)) / 1e3,
                "publish": json.loads(files["out"].read_text())["publish_us"]}
    from chordpub import Client
    durable = variant == "durable"
    clocks: Clocks | None = None

    def on_message(m) -> None:  # noqa: ANN001
        now = time.time_ns()
        if not files["ready"].exists():
            files["ready"].write_text("1")
        if clocks is not None:
            rows.append((m.sent_ns, clocks.polled, m.recv_ns, clocks.taken, clocks.handed, now))

    proc = None
    try:
        data = tmp / f"{variant}-{n}.sub" if durable else None
        with Client(ring.nodes[0].endpoint, heartbeat=1.0, data_dir=data) as c:
            clocks = Clocks(c.io)
            c.subscribe(TOPIC, callback=on_message, reliable=durable, durable="stages" if durable else None)
            proc = subprocess.Popen([*child, "--via", ring.nodes[1].endpoint], stdin=subprocess.DEVNULL)
            wait_for(lambda: files["out"].exists() or proc.poll() not in (None, 0), timeout=120,
                     what=f"the {variant} publisher's paced messages")
            if not files["out"].exists():
                raise SystemExit(f"the {variant} publisher failed (exit {proc.returncode})")
            proc.wait(30)
    finally:
        if clocks is not None:
            clocks.close()
        if proc is not None:
            stop_processes([proc], grace=3)
    a = np.array([r for r in rows if r[0] and r[1]][SKIP:], dtype=np.int64)
    p50 = {stage: float(np.percentile(a[:, i + 1] - a[:, i], 50)) / 1e3 for i, stage in enumerate(STAGES[:-1])}
    p50["total"] = float(np.percentile(a[:, 5] - a[:, 0], 50)) / 1e3
    p50["publish"] = json.loads(files["out"].read_text())["publish_us"]
    p50["received"] = len(rows)
    return p50


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=4000, help="paced messages a run (2000/s)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each variant, interleaved")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout instead of the table")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--variant", "--via", "--ready", "--out", "--data"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        run_publisher(args)
        return
    if args.messages <= SKIP:
        ap.error(f"--messages must be more than the {SKIP} left out while the stream settles")
    variants = ("raw1", "direct", "durable")
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as tmp, LocalRing(Path(tmp), options={"stabilize": 0.5}) as ring:
        ring.start(2, timeout=120)
        ring.wait_consistent(timeout=120)
        for n in range(args.repeat):
            for v in variants:
                runs[v].append(measure(v, ring, Path(tmp), args, n))
                print(f"run {n + 1} {v:8s} " + "  ".join(f"{k} {x:.1f}" for k, x in runs[v][-1].items()
                                                      if k != "received"), file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(runs))
        return
    keys = ("publish", *STAGES)
    print(f"p50 in microseconds, medians of {args.repeat} runs ({args.messages} messages at {RATE:.0f}/s each):")
    print(f"{'variant':8s} " + " ".join(f"{k:>11s}" for k in keys))
    for v in variants:
        cells = [f"{np.median([r[k] for r in runs[v]]):11.1f}" if k in runs[v][0] else f"{'':>11s}" for k in keys]
        print(f"{v:8s} " + " ".join(cells))
    ratio = [d["total"] / r["total"] for d, r in zip(runs["direct"], runs["raw1"], strict=True)]
    print(f"direct's total against raw1's, run by run: {said(ratio)}")


if __name__ == "__main__":
    main()
