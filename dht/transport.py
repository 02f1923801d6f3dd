"""ZeroMQ request/reply for the ring: a ROUTER server and a DEALER client.

The client follows the zguide's Lazy Pirate pattern: a per-request timeout, and on timeout the
socket is closed (LINGER 0) and reopened before a bounded number of retries, so a late reply from
a slow peer can never be mistaken for the next one. A failed call is a value (`Reply` with
``ok=False``), not an exception thrown far away, as in bmuller/kademlia.

`SocketSetup` is the hook through which CURVE security (dht/curve.py) configures every socket.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import zmq

from dht import wire

log = logging.getLogger(__name__)

SocketSetup = Callable[[zmq.Socket, bool], None]  # (socket, is_server) -> None


class Refused(Exception):
    """Raised by a handler to answer with an error reply (bad value, not the owner, ...)."""


@dataclass
class Reply:
    """The outcome of one call: ok with the reply fields, or not ok with a reason."""

    ok: bool
    body: dict = field(default_factory=dict)
    err: str | None = None
    timed_out: bool = False

    def __getitem__(self, key: str) -> Any:
        return self.body[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.body.get(key, default)


class RejectLog:
    """Counts rejected input and logs it at most once per `every` seconds: a flood of garbage
    must neither fill the log nor cost more than a counter."""

    def __init__(self, what: str, every: float = 5.0) -> None:
        self.what, self.every = what, every
        self.count = 0
        self._last = float("-inf")

    def __call__(self, reason: str) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self._last >= self.every:
            log.warning("rejected %s (%d so far): %s", self.what, self.count, reason)
            self._last = now


def _base_options(sock: zmq.Socket) -> None:
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, wire.MAX_MESSAGE_BYTES)


class RpcServer:
    """A ROUTER socket that answers each request with `handler(request) -> reply fields`.

    Malformed input gets an error reply when the sender can be addressed and never escapes
    the loop; a handler bug becomes an "internal error" reply and a log line.
    """

    def __init__(self, host: str, port: int, handler: Callable[[dict], dict],
                 setup: SocketSetup | None = None, context: zmq.Context | None = None,
                 schemas: wire.Schemas | None = None) -> None:
        self.context = context or zmq.Context.instance()
        self.handler = handler
        self.schemas = schemas
        self.socket = self.context.socket(zmq.ROUTER)
        _base_options(self.socket)
        self.socket.setsockopt(zmq.ROUTER_HANDOVER, 1)
        if setup is not None:
            setup(self.socket, True)
        if port == 0:
            self.port = self.socket.bind_to_random_port(f"tcp://{host}")
        else:
            self.socket.bind(f"tcp://{host}:{port}")
            self.port = port
        self.host = host
        self.endpoint = f"{host}:{self.port}"
        self.reject_log = RejectLog("malformed request")

    def serve(self, stop: threading.Event, poll_ms: int = 200) -> None:
        """Serve until `stop` is set. Runs in the caller's thread; the socket stays in it."""
        self.socket.setsockopt(zmq.RCVTIMEO, poll_ms)  # a blocking recv that wakes to check `stop`
        while not stop.is_set():
            try:
                frames = self.socket.recv_multipart()
            except zmq.Again:
                continue
            reply = self.handle_frames(frames)
            if reply is not None:
                try:
                    self.socket.send_multipart(reply, zmq.NOBLOCK)
                except zmq.ZMQError as exc:  # peer gone: drop the reply
                    log.debug("reply not sent: %s", exc)

    def close(self) -> None:
        self.socket.close(linger=0)

    @property
    def rejects(self) -> int:
        return self.reject_log.count

    def handle_frames(self, frames: list[bytes]) -> list[bytes] | None:
        """Frames from the ROUTER -> frames to send back (or None to drop)."""
        if len(frames) < 2:
            return None  # no routing identity: nothing can be answered
        ident, rest = frames[0], frames[1:]
        envelope = [ident]
        if len(rest) == 2 and rest[0] == b"":
            envelope.append(b"")  # REQ-style envelope
            rest = rest[1:]
        if len(rest) != 1:
            return envelope + [self._reject(None, f"expected one body frame, got {len(rest)}")]
        rid: int | None = None
        try:
            request = wire.decode_request(rest[0], self.schemas)
            rid = request["id"]
            result = self.handler(request)
            return envelope + [wire.encode_reply(rid, **result)]
        except wire.WireError as exc:
            if rid is None:
                try:
                    rid = wire.request_id(wire.decode_map(rest[0]))
                except wire.WireError:
                    rid = None
            return envelope + [self._reject(rid, str(exc))]
        except Refused as exc:
            return envelope + [wire.encode_error(rid, str(exc))]
        except Exception:
            log.exception("handler failed on op %r", rest[0][:64])
            return envelope + [wire.encode_error(rid, "internal error")]

    def _reject(self, rid: int | None, err: str) -> bytes:
        self.reject_log(err)
        return wire.encode_error(rid, err)


class RpcClient:
    """Calls ops on nodes through cached DEALER sockets. Not thread-safe: one per thread."""

    def __init__(self, timeout: float = 1.0, retries: int = 1, setup: SocketSetup | None = None,
                 context: zmq.Context | None = None, max_sockets: int = 256) -> None:
        self.context = context or zmq.Context.instance()
        self.timeout = timeout
        self.retries = retries
        self.setup = setup
        self.max_sockets = max_sockets
        self._sockets: OrderedDict[str, zmq.Socket] = OrderedDict()
        self._rcvtimeo: dict[zmq.Socket, int] = {}
        self._ids = itertools.count(1)

    def call(self, endpoint: str, op: str, /, timeout: float | None = None, retries: int | None = None,
             **fields: Any) -> Reply:
        """Send one request and wait for its reply; never raises for network trouble."""
        timeout = self.timeout if timeout is None else timeout
        retries = self.retries if retries is None else retries
        for _attempt in range(retries + 1):
            rid = next(self._ids)
            try:
                sock = self._socket(endpoint)
            except wire.WireError as exc:
                return Reply(False, err=str(exc))
            try:
                sock.send(wire.encode_request(op, rid, **fields), zmq.NOBLOCK)
            except zmq.ZMQError as exc:
                self._drop(endpoint)
                return Reply(False, err=f"send failed: {exc}")
            body = self._await(sock, rid, timeout)
            if body is not None:
                if body.get("ok"):
                    return Reply(True, body)
                return Reply(False, body, err=body.get("err"))
            self._drop(endpoint)  # Lazy Pirate: a fresh socket for the retry
        return Reply(False, err=f"no reply from {endpoint} within {timeout:g}s", timed_out=True)

    def _await(self, sock: zmq.Socket, rid: int, timeout: float) -> dict | None:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            wait_ms = int(left * 1000) + 1
            if self._rcvtimeo.get(sock) != wait_ms:
                sock.setsockopt(zmq.RCVTIMEO, wait_ms)
                self._rcvtimeo[sock] = wait_ms
            try:
                frames = sock.recv_multipart()
            except zmq.Again:
                return None
            try:
                body = wire.decode_reply(frames[-1])
            except wire.WireError as exc:
                log.debug("ignoring malformed reply: %s", exc)
                continue
            if body.get("id") == rid:
                return body
            # a stale reply to an earlier request: ignore it

    def _socket(self, endpoint: str) -> zmq.Socket:
        sock = self._sockets.get(endpoint)
        if sock is not None:
            self._sockets.move_to_end(endpoint)
            return sock
        address = wire.zmq_address(endpoint)
        sock = self.context.socket(zmq.DEALER)
        _base_options(sock)
        sock.setsockopt(zmq.IMMEDIATE, 0)
        if self.setup is not None:
            self.setup(sock, False)
        sock.connect(address)
        self._sockets[endpoint] = sock
        while len(self._sockets) > self.max_sockets:
            _, old = self._sockets.popitem(last=False)
            self._rcvtimeo.pop(old, None)
            old.close(linger=0)
        return sock

    def _drop(self, endpoint: str) -> None:
        sock = self._sockets.pop(endpoint, None)
        if sock is not None:
            self._rcvtimeo.pop(sock, None)
            sock.close(linger=0)

    def close(self) -> None:
        for sock in self._sockets.values():
            sock.close(linger=0)
        self._sockets.clear()
        self._rcvtimeo.clear()

    def __enter__(self) -> RpcClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
