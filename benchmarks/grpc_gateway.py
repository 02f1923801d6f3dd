"""What the gRPC gateway costs: publish -> subscribe through it against the native Client, in one run.

    python benchmarks/grpc_gateway.py [--messages 20000] [--paced 2000] [--rate 1000] [--repeat 3]

A ring of 2 nodes and one `chordpub gateway` process on loopback. Four routes, each in turn and
--repeat times, with 100-byte messages on a fresh topic:
- native -> native: a `chordpub.Client` publishes, another Client's callback receives (the baseline);
- gRPC -> native: a grpcio caller publishes through the gateway (PublishStream for throughput, unary
  Publish for latency), a native Client receives;
- native -> gRPC: a native Client publishes, a grpcio caller's Subscribe stream receives;
- gRPC -> gRPC: both ends through the gateway.
Throughput: --messages sent as fast as the sender can, counted where the receiving application gets
them (first to last arrival; what best effort lost is said). Latency: --paced messages at --rate a
second, each carrying the sender's clock when the application handed it over, read where the
receiving application gets it (all in this process: one clock). Each route's figures with their
ratio to native -> native of the same run; medians and ranges over the runs.

grpcio's own ceiling is measured in the same run too: a server process that does nothing but count a
client stream and send a server stream of the same messages, against which the gateway's gRPC ends
are compared (what the gateway adds, apart from what Python's grpcio costs anyway).
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.spread import said  # noqa: E402
from chordpub import Client  # noqa: E402
from chordpub.launcher import LocalRing, stop_processes, wait_for  # noqa: E402
from chordpub.v1 import pubsub_pb2 as pb  # noqa: E402
from chordpub.v1 import pubsub_pb2_grpc as rpc  # noqa: E402
from tests.helpers.ports import free_ports  # noqa: E402

ROUTES = ("native->native", "grpc->native", "native->grpc", "grpc->grpc")
SIZE = 100


def stamped(phase: bytes) -> bytes:
    """The sender's clock, the phase (w: warming up, f: flood, p: paced), padding to SIZE bytes."""
    return time.time_ns().to_bytes(8, "big") + phase + b"x" * (SIZE - 9)


class Receiver:
    """Arrivals at the application: a native Client's callback, or a gRPC Subscribe stream's loop."""

    def __init__(self, kind: str, via: str, stub: rpc.PubSubStub, topic: str) -> None:
        self.arrivals: list[int] = []  # perf_counter_ns at each arrival
        self.latencies: list[float] = []  # ms, paced phase
        self.warm = False
        self.kind = kind
        if kind == "native":
            self.client = Client(via, heartbeat=1.0)
            self.client.subscribe(topic, callback=lambda m: self._take(m.payload))
        else:
            self.call = stub.Subscribe(pb.SubscribeRequest(topic=topic))
            self.call.initial_metadata()  # the subscription is in place
            self.thread = threading.Thread(target=self._read, daemon=True)
            self.thread.start()

    def _take(self, payload: bytes) -> None:
        if payload[8:9] == b"w":
            self.warm = True
        elif payload[8:9] == b"p":
            self.latencies.append((time.time_ns() - int.from_bytes(payload[:8], "big")) / 1e6)
        else:
            self.arrivals.append(time.perf_counter_ns())

    def _read(self) -> None:
        try:
            for d in self.call:
                self._take(d.payload)
        except grpc.RpcError:
            pass  # cancelled at the end

    def close(self) -> None:
        if self.kind == "native":
            self.client.close()
        else:
            self.call.cancel()
            self.thread.join(10)


class Sender:
    def __init__(self, kind: str, via: str, stub: rpc.PubSubStub, topic: str) -> None:
        self.kind, self.stub, self.topic = kind, stub, topic
        if kind == "native":
            self.client = Client(via, heartbeat=1.0)
            self.client.advertise(topic)

    def one(self, phase: bytes = b"p") -> None:
        if self.kind == "native":
            self.client.publish(self.topic, stamped(phase))
        else:
            self.stub.Publish(pb.PublishRequest(topic=self.topic, payload=stamped(phase)))

    def flood(self, n: int) -> None:
        if self.kind == "native":
            for _ in range(n):
                self.client.publish(self.topic, stamped(b"f"))
        else:
            def requests() -> Iterator[pb.PublishRequest]:
                for _ in range(n):
                    yield pb.PublishRequest(topic=self.topic, payload=stamped(b"f"))
            self.stub.PublishStream(requests())

    def close(self) -> None:
        if self.kind == "native":
            self.client.close()


def measure(route: str, via: str, stub: rpc.PubSubStub, topic: str, messages: int, paced: int,
            rate: float) -> dict:
    send_kind, receive_kind = route.split("->")
    receiver = Receiver(receive_kind, via, stub, topic)
    sender = Sender(send_kind, via, stub, topic)
    try:
        def warm() -> bool:  # the publisher registered, the receiver connected to it (a message arrives)
            sender.one(b"w")
            return receiver.warm

        wait_for(warm, 30, interval=0.1, what=f"{route}: the first message")
        sender.flood(messages)
        settle(lambda: len(receiver.arrivals), messages)
        got = len(receiver.arrivals)
        seconds = (receiver.arrivals[-1] - receiver.arrivals[0]) / 1e9
        t0 = time.monotonic()
        for i in range(paced):
            sender.one()
            time.sleep(max(t0 + (i + 1) / rate - time.monotonic(), 0))  # pacing the sender, not synchronization
        settle(lambda: len(receiver.latencies), paced)
    finally:
        sender.close()
        receiver.close()
    lat = np.array(receiver.latencies)
    return {"msg_per_s": (got - 1) / seconds, "delivered": got, "sent": messages,
            "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
            "paced_delivered": len(lat)}


class Bare(rpc.PubSubServicer):
    """grpcio alone: PublishStream counts, Subscribe streams `history` messages (the ceiling's server)."""

    def PublishStream(self, request_iterator: Iterator[pb.PublishRequest],  # noqa: N802
                      context: grpc.ServicerContext) -> pb.PublishStreamReply:
        arrivals = [time.perf_counter_ns() for _ in request_iterator]  # first to last, as a receiver counts
        context.set_trailing_metadata((("elapsed-ns", str(arrivals[-1] - arrivals[0])),))
        return pb.PublishStreamReply(published=len(arrivals))

    def Subscribe(self, request: pb.SubscribeRequest,  # noqa: N802
                  context: grpc.ServicerContext) -> Iterator[pb.Delivery]:
        for seq in range(1, request.history + 1):
            yield pb.Delivery(topic=request.topic, payload=stamped(b"f"), publisher="bare", seq=seq)


def serve_bare(port: int) -> None:
    from concurrent.futures import ThreadPoolExecutor

    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    rpc.add_PubSubServicer_to_server(Bare(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


def ceiling(stub: rpc.PubSubStub, messages: int) -> dict:
    """grpcio's own msg/s, client streaming and server streaming, each end in its own process."""
    _, call = stub.PublishStream.with_call(pb.PublishRequest(topic="bare", payload=stamped(b"f"))
                                           for _ in range(messages))
    publish = (messages - 1) / (int(dict(call.trailing_metadata())["elapsed-ns"]) / 1e9)
    arrivals = [time.perf_counter_ns() for _ in stub.Subscribe(pb.SubscribeRequest(topic="bare", history=messages))]
    return {"publish_stream": publish, "subscribe_stream": (len(arrivals) - 1) / ((arrivals[-1] - arrivals[0]) / 1e9)}


def settle(count: Callable[[], int], target: int, quiet: float = 1.0, limit: float = 120) -> None:
    """Until `target` arrived, or nothing more arrived for `quiet` seconds (best effort may lose)."""
    deadline, last, since = time.monotonic() + limit, -1, time.monotonic()
    while time.monotonic() < deadline:
        n = count()
        if n >= target:
            return
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(0.02)  # polling a count with a deadline


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=20_000, help="messages per throughput run")
    ap.add_argument("--paced", type=int, default=2000, help="messages per latency run")
    ap.add_argument("--rate", type=float, default=1000.0, help="messages a second in the latency run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout instead of the table")
    ap.add_argument("--bare-server", type=int, metavar="PORT", help=argparse.SUPPRESS)  # grpcio's ceiling's server
    args = ap.parse_args()
    if args.bare_server:
        serve_bare(args.bare_server)
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a terminated run still stops what it started
    runs: dict[str, list[dict]] = {r: [] for r in ROUTES}
    bare_runs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp_name, LocalRing(Path(tmp_name), options={"stabilize": 0.5}) as ring:
        ring.start(2)
        ring.wait_consistent(timeout=60)
        via = ring.nodes[0].endpoint
        port, bare_port = free_ports(2)
        bare = subprocess.Popen([sys.executable, __file__, "--bare-server", str(bare_port)], start_new_session=True)
        bare_channel = grpc.insecure_channel(f"127.0.0.1:{bare_port}")
        gateway = subprocess.Popen([sys.executable, "-m", "chordpub", "gateway", "--via", via, "--listen",
                                    f"127.0.0.1:{port}", "--queue", "100000", "--log-level", "WARNING"],
                                   stdout=subprocess.DEVNULL, stderr=open(Path(tmp_name) / "gateway.log", "w"),  # noqa: SIM115
                                   start_new_session=True)
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        try:
            grpc.channel_ready_future(channel).result(timeout=30)
            grpc.channel_ready_future(bare_channel).result(timeout=30)
            stub = rpc.PubSubStub(channel)
            for r in range(args.repeat):
                bare_runs.append(ceiling(rpc.PubSubStub(bare_channel), args.messages))
                if not args.json:
                    b = bare_runs[-1]
                    print(f"run {r + 1} grpcio alone    : {b['publish_stream']:8.0f} msg/s client streaming, "
                          f"{b['subscribe_stream']:.0f} msg/s server streaming", file=sys.stderr, flush=True)
                for route in ROUTES:
                    row = measure(route, via, stub, f"bench-{route.replace('->', '-')}-{r}", args.messages,
                                  args.paced, args.rate)
                    runs[route].append(row)
                    if not args.json:
                        print(f"run {r + 1} {route:15s}: {row['msg_per_s']:8.0f} msg/s ({row['delivered']} of "
                              f"{row['sent']}), p50 {row['p50_ms']:.3f} ms, p99 {row['p99_ms']:.3f} ms",
                              file=sys.stderr, flush=True)
        finally:
            channel.close()
            bare_channel.close()
            stop_processes([gateway, bare], grace=5)
    base = runs["native->native"]
    ratios = {route: {k: [row[k] / b[k] for row, b in zip(runs[route], base, strict=True)]
                      for k in ("msg_per_s", "p50_ms", "p99_ms")} for route in ROUTES[1:]}
    over_bare = {route: [row["msg_per_s"] / b[kind] for row, b in zip(runs[route], bare_runs, strict=True)]
                 for route, kind in (("grpc->native", "publish_stream"), ("native->grpc", "subscribe_stream"))}
    if args.json:
        print(json.dumps({"runs": runs, "grpcio_alone": bare_runs, "over_native": ratios, "over_grpcio": over_bare,
                          "messages": args.messages, "rate": args.rate}))
        return
    print(f"{args.messages} messages of {SIZE} bytes for throughput, {args.paced} at {args.rate:g}/s for latency; "
          f"medians (ranges) over {args.repeat} runs")
    for route in ROUTES:
        rows = runs[route]
        line = (f"{route:15s} {said([x['msg_per_s'] for x in rows], '.0f')} msg/s, "
                f"p50 {said([x['p50_ms'] for x in rows], '.3f')} ms, p99 {said([x['p99_ms'] for x in rows], '.3f')} ms")
        print(line)
        if route in ratios:
            q = ratios[route]
            print(f"{'':15s} against native->native: throughput {said(q['msg_per_s'])} x, p50 {said(q['p50_ms'])} x, "
                  f"p99 {said(q['p99_ms'])} x")
        if route in over_bare:
            kind = "publish_stream" if route.startswith("grpc") else "subscribe_stream"
            print(f"{'':15s} against grpcio alone ({kind.replace('_', ' ')}, "
                  f"{said([b[kind] for b in bare_runs], '.0f')} msg/s): throughput {said(over_bare[route])} x")


if __name__ == "__main__":
    main()
