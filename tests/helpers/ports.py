"""Free ports for the tests that must name one (a process told --port, --join or --ports).

They come from below the kernel's ephemeral range, never from a bind to port 0: a port from that
range can be taken, between the test's pick and the node's bind, as the source port of any outgoing
connection on the machine, and even by a TCP self-connect (a node dialling a seed that is not up yet
is given the seed's own port as its source port, and the seed then finds it in use). Each pytest-xdist
worker draws from its own slice, so two workers never pick the same port."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

LOWEST = 10000


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def _slice() -> range:
    """This worker's share of the ports outside the ephemeral range."""
    low, high = _ephemeral_range()
    start, stop = (LOWEST, low) if low - LOWEST >= 4000 else (high + 1, 65536)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1), index + 1)
    share = (stop - start) // count
    return range(start + index * share, start + (index + 1) * share)


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct ports free on `host` now, outside the ephemeral range."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_consecutive(1, (host,))
        if port not in ports:
            ports.append(port)
    return ports


def free_consecutive(n: int, hosts: tuple[str, ...] = ("127.0.0.1",)) -> int:
    """A port from which n consecutive ports are free now on every one of `hosts`."""
    ours = _slice()
    for _ in range(200):
        base = random.randrange(ours.start, ours.stop - n)
        if all(_bindable(h, base + i) for h in hosts for i in range(n)):
            return base
    raise RuntimeError(f"no {n} consecutive free ports in {ours.start}-{ours.stop - 1}")
