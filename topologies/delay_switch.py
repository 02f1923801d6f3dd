"""A userspace learning switch that delays and drops frames per link: link emulation without netem.

Mininet's TCLink delays and drops with the kernel's netem qdisc. Kernels built without
CONFIG_NET_SCH_NETEM (this project's CI machines among them) cannot, and no other qdisc delays a
packet. This switch takes the Linux bridge's place: it reads every frame from its ports with
AF_PACKET sockets, learns source MACs like a bridge (IEEE 802.1D learning, flooding unknown and
broadcast destinations), and sends the frame out after the links' delays, dropping it with the
links' loss. Bandwidth stays with tc (htb exists on such kernels), so TCLink still shapes it.

Each link's delay is paid once per direction, as netem on both ends of a TCLink would: a frame is
delayed by its egress link, and also by its ingress link when that link comes from a host (no
switch sits at the host's end to delay it). Frames travel with their virtio-net header
(PACKET_VNET_HDR), so checksum-offloaded and GSO frames are forwarded as the kernel handed them over.

`Forwarder` is the pure part (which port, when, dropped or not) and is tested without sockets;
`serve` is the socket loop; `python -m topologies.delay_switch --port NAME=DELAY_MS:LOSS_PCT:host|switch`
runs one switch until SIGTERM.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_VNET_HDR = 15
PACKET_OUTGOING = 4
PACKET_STATISTICS = 6
SO_RCVBUFFORCE = 33
SOCKET_BUFFER = 8 << 20  # GSO frames are up to 64 KiB: a default 208 KiB buffer holds only a few
VNET_HDR_LEN = 10
MAX_FRAME = 65536 + VNET_HDR_LEN + 64


@dataclass(frozen=True)
class Port:
    """One switch port: the interface and the link behind it."""

    name: str
    delay_ms: float = 0.0
    loss_pct: float = 0.0
    to_host: bool = True

    @classmethod
    def parse(cls, text: str) -> Port:
        """"s1-eth1=5:0:host" -> Port("s1-eth1", 5.0, 0.0, True)."""
        name, _, rest = text.partition("=")
        fields = rest.split(":") if rest else []
        if not name or len(fields) > 3:
            raise ValueError(f"bad port {text!r}: expected NAME=DELAY_MS:LOSS_PCT:host|switch")
        try:
            delay = float(fields[0]) if fields else 0.0
            loss = float(fields[1]) if len(fields) > 1 else 0.0
        except ValueError:
            raise ValueError(f"bad port {text!r}: delay and loss must be numbers") from None
        kind = fields[2] if len(fields) > 2 else "host"
        if kind not in ("host", "switch") or not 0 <= loss <= 100 or not delay >= 0:
            raise ValueError(f"bad port {text!r}: delay >= 0, loss 0..100, kind host or switch")
        return cls(name, delay, loss, kind == "host")

    def spec(self) -> str:
        return f"{self.name}={self.delay_ms:g}:{self.loss_pct:g}:{'host' if self.to_host else 'switch'}"


class Forwarder:
    """Where and when a frame leaves: MAC learning, flooding, per-link delay and loss. No sockets."""

    def __init__(self, ports: list[Port], seed: int | None = None) -> None:
        self.ports = ports
        self.macs: dict[bytes, int] = {}
        self.rng = random.Random(seed)

    def route(self, in_port: int, frame: bytes, now: float) -> list[tuple[float, int]]:
        """(due time in seconds, out port) for each copy of `frame` that survives its links."""
        if len(frame) < 14:
            return []
        dst, src = frame[0:6], frame[6:12]
        if not src[0] & 1:
            self.macs[src] = in_port
        known = self.macs.get(dst) if not dst[0] & 1 else None
        outs = [known] if known is not None else range(len(self.ports))
        ingress = self.ports[in_port]
        if ingress.to_host and self._lost(ingress):
            return []
        base = ingress.delay_ms if ingress.to_host else 0.0
        plan = []
        for out in outs:
            if out == in_port:
                continue
            egress = self.ports[out]
            if self._lost(egress):
                continue
            plan.append((now + (base + egress.delay_ms) / 1000.0, out))
        return plan

    def _lost(self, port: Port) -> bool:
        return bool(port.loss_pct) and self.rng.random() * 100.0 < port.loss_pct


def open_port(name: str) -> socket.socket:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, SOCKET_BUFFER)
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
    sock.bind((name, 0))
    sock.setblocking(False)
    return sock


def serve(ports: list[Port], seed: int | None = None, ready_file: Path | None = None,
          should_stop=lambda: False) -> dict:  # noqa: ANN001 - a () -> bool
    """Forward frames between `ports` until should_stop(); return counters."""
    forwarder = Forwarder(ports, seed)
    socks = [open_port(p.name) for p in ports]
    index = {s.fileno(): i for i, s in enumerate(socks)}
    listening = list(socks)
    queue: list[tuple[float, int, int, bytes]] = []
    order = itertools.count()
    stats = {"received": 0, "sent": 0, "dropped": 0, "errors": 0}
    if ready_file is not None:
        tmp = Path(f"{ready_file}.tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), "ports": [p.spec() for p in ports]}))
        os.replace(tmp, ready_file)
    try:
        while not should_stop():
            now = time.monotonic()
            while queue and queue[0][0] <= now:
                _, _, out, data = heapq.heappop(queue)
                try:
                    socks[out].send(data)
                    stats["sent"] += 1
                except OSError:
                    stats["errors"] += 1
            timeout = min(max(queue[0][0] - now, 0.0), 0.5) if queue else 0.5
            ready, _, _ = select.select(listening, [], [], timeout)
            for sock in ready:
                i = index[sock.fileno()]
                while True:
                    try:
                        data, addr = sock.recvfrom(MAX_FRAME)
                    except BlockingIOError:
                        break
                    except OSError:  # the interface went away (Mininet deletes links first)
                        listening.remove(sock)
                        stats["errors"] += 1
                        break
                    if addr[2] == PACKET_OUTGOING:
                        continue
                    stats["received"] += 1
                    # the clock read for each frame as it is taken: one read for a whole batch let the
                    # frames taken after it leave early (a 10 ms path measured 9.88 ms on a loaded machine)
                    plan = forwarder.route(i, data[VNET_HDR_LEN:], time.monotonic())
                    if not plan:
                        stats["dropped"] += 1
                    for due, out in plan:
                        heapq.heappush(queue, (due, next(order), out, data))
    finally:
        for s in socks:
            try:  # the kernel's count of frames it dropped because our buffer was full
                stats["kernel_drops"] = stats.get("kernel_drops", 0) + struct.unpack(
                    "II", s.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))[1]
            except OSError:
                pass
            s.close()
    return stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m topologies.delay_switch", description=__doc__.split("\n")[0])
    parser.add_argument("--port", action="append", required=True, help="NAME=DELAY_MS:LOSS_PCT:host|switch")
    parser.add_argument("--seed", type=int, default=None, help="Seed for the loss draws.")
    parser.add_argument("--ready-file", type=Path, default=None, help="Written once every port is open.")
    args = parser.parse_args(argv)
    try:
        ports = [Port.parse(p) for p in args.port]
    except ValueError as exc:
        parser.error(str(exc))
    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.append(True))
    try:
        stats = serve(ports, args.seed, args.ready_file, should_stop=lambda: bool(stopping))
    except OSError as exc:
        print(f"delay_switch: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(stats), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
