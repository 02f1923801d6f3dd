"""Free ports for the tests that must name one (a process told --port or --ports): bound together,
then released, so a parallel test rarely takes the same one (the OS does not hand a just-released
port out again at once)."""

from __future__ import annotations

import socket


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct ports free on `host` now."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_consecutive(n: int, hosts: tuple[str, ...] = ("127.0.0.1",)) -> int:
    """A port from which n consecutive ports are free now on every one of `hosts`."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind((hosts[0], 0))
            base = first.getsockname()[1]
            if base + n > 65535:
                continue
            rest = [socket.socket() for _ in range(n * len(hosts) - 1)]
            try:
                slots = [(h, base + i) for h in hosts for i in range(n)][1:]
                for s, where in zip(rest, slots, strict=True):
                    s.bind(where)
                return base
            except OSError:
                continue
            finally:
                for s in rest:
                    s.close()
    raise RuntimeError(f"no {n} consecutive free ports")
