"""What every ZeroMQ socket of the ring and the middleware does alike: bind (on a free port, or again on
a port a closed socket held), take the base options, send a message's frames without blocking. The
request/reply client is dht/transport.py, the server dht/rpc_server.py."""

from __future__ import annotations

import time

import zmq

from dht import wire


def rebind_port(sock: zmq.Socket, host: str, port: int, timeout: float = 5.0) -> int:
    """Bind a new socket to the port a closed one held: libzmq lets go of it a moment after close, so
    an address in use is tried again (every 10 ms, up to `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return bind_port(sock, host, port)
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EADDRINUSE or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)  # polling with a deadline: the old socket's port is being released


def bind_port(sock: zmq.Socket, host: str, port: int = 0) -> int:
    """Bind `sock` on host:port, or on a free port when `port` is 0 (the default everywhere: a
    firewall or a container's port map needs fixed ports, given with --port/--ports). Returns it."""
    if port == 0:
        return sock.bind_to_random_port(f"tcp://{host}")
    sock.bind(f"tcp://{host}:{port}")
    return port


# send_multipart(frames, NOBLOCK)'s flags as plain ints: pyzmq's own combines its flag enums in Python
# on every call, as it type-checks every frame, and on a request's way through a process that was idle
# each such function costs several times its warm price (BENCHMARKS.md, the lookup's lane)
_MORE_NOBLOCK = int(zmq.SNDMORE) | int(zmq.NOBLOCK)
_NOBLOCK = int(zmq.NOBLOCK)


def send_frames(sock: zmq.Socket, frames: list[bytes]) -> None:
    """`sock.send_multipart(frames, zmq.NOBLOCK)` for frames that are bytes."""
    for part in frames[:-1]:
        sock.send(part, _MORE_NOBLOCK)
    sock.send(frames[-1], _NOBLOCK)


def base_options(sock: zmq.Socket) -> None:
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, wire.MAX_MESSAGE_BYTES)
