"""The ROUTER side of the ring's request/reply (dht/transport.py has the client and what both share):
one socket answering each request with a handler's fields, never raising on what a peer sends.

A request is decoded and checked against its op's schema (dht/wire.py) before the handler sees it;
malformed input gets an error reply when the sender can be addressed, and is counted and logged at
most once per few seconds (`RejectLog`), so a flood of garbage costs a counter, not the log.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable

import zmq

from dht import wire
from dht.sockets import base_options, bind_port, send_frames
from dht.transport import Refused, SocketSetup

log = logging.getLogger(__name__)

# seconds between looks, while requests keep coming, at whether any is waiting: `caught_up` may lag the
# truth by this much, which only ever makes a lease judged at it (dht/maintenance.py) last longer
CAUGHT_UP_CHECK = 0.05


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


def principal_of(frame: zmq.Frame) -> str | None:
    """Who sent a message, as the ZAP handler named its key (dht/curve.py), or None."""
    try:
        user = frame.get("User-Id")
    except zmq.ZMQError:  # no such property: not authenticated by ZAP
        return None
    return user or None


class RpcServer:
    """A ROUTER socket that answers each request with `handler(request) -> reply fields`.

    Malformed input gets an error reply when the sender can be addressed and never escapes
    the loop; a handler bug becomes an "internal error" reply and a log line.
    """

    def __init__(self, host: str, port: int, handler: Callable[[dict], dict],
                 setup: SocketSetup | None = None, context: zmq.Context | None = None,
                 schemas: wire.Schemas | None = None, advertise: str | None = None,
                 advertise_port: int | None = None) -> None:
        """Bind on host:port (port 0: a free one); `endpoint` is what others are told: advertise (default
        host) and advertise_port (default the bound port) — see dht/address.py."""
        self.context = context or zmq.Context.instance()
        self.handler = handler
        self.schemas = schemas
        self.socket = self.context.socket(zmq.ROUTER)
        base_options(self.socket)
        self.socket.setsockopt(zmq.ROUTER_HANDOVER, 1)
        if setup is not None:
            setup(self.socket, True)
        self.port = bind_port(self.socket, host, port)
        self.identify = setup is not None  # CurveZMQ: each request names its sender (principal_of)
        self.host = advertise or host
        self.endpoint = f"{self.host}:{advertise_port or self.port}"
        self.reject_log = RejectLog("malformed request")
        self.bytes_sent = 0  # replies, for the node's traffic figures
        self.bytes_received = 0  # requests
        self.caught_up_at = time.time()  # the last moment nothing was waiting to be served
        self._waiting = False  # serve() is waiting for a request
        self._wake_address = f"inproc://rpc-wake-{id(self)}"
        self._wake_id = b"\0wake" + secrets.token_bytes(8)  # no peer can send as it: `wake` does
        # told (position, request bytes, reply bytes) of each request answered: a process holding
        # several ring positions counts each one's traffic (dht/host.py)
        self.tally: Callable[[int, int, int], None] | None = None
        # a request's frame -> its reply frame, or None for the general path (dht/hop_lane.py)
        self.lane: Callable[[bytes], bytes | None] | None = None

    def serve(self, stop: threading.Event, poll_ms: int = 2000) -> None:
        """Serve until `stop` is set and `wake()` is called (or `poll_ms` has passed). Runs in the caller's
        thread; the socket stays in it. An idle server sleeps in its receive: no timer wakes it, and a
        request wakes nothing but it (a poller over a second socket, for the wake-up, cost a hop 0.05-0.1x
        of a round trip on a ring of idle processes: `wake` comes on this socket instead, over inproc)."""
        sock = self.socket
        sock.setsockopt(zmq.RCVTIMEO, poll_ms)
        sock.bind(self._wake_address)
        checked = 0.0
        while not stop.is_set():
            self._waiting = True
            try:
                frames, principal = self.receive()
            except zmq.Again:
                self.caught_up_at = time.time()
                continue
            finally:
                self._waiting = False
            if frames[0] == self._wake_id:
                continue
            body = None
            if self.lane is not None and len(frames) == 2:
                try:
                    body = self.lane(frames[1])
                except Exception:  # a bug in the lane: the general path answers, the server lives on
                    log.exception("lane failed on %r", frames[1][:64])
            reply = [frames[0], body] if body is not None else self.handle_frames(frames, principal)
            if reply is not None:
                try:
                    send_frames(sock, reply)
                    self.bytes_sent += len(reply[-1])
                except zmq.ZMQError as exc:  # peer gone: drop the reply
                    log.debug("reply not sent: %s", exc)
            now = time.time()
            if now - checked >= CAUGHT_UP_CHECK:  # asking libzmq costs a hop as much as its decoding
                checked = now
                if not sock.get(zmq.EVENTS) & zmq.POLLIN:
                    self.caught_up_at = now

    def wake(self) -> None:
        """Make `serve` look at its stop event now (from any thread)."""
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 100)
        sock.setsockopt(zmq.ROUTING_ID, self._wake_id)
        try:
            sock.connect(self._wake_address)
            sock.send(b"", zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # no server waiting: nothing to wake
        finally:
            sock.close()

    def caught_up(self) -> float:
        """The last moment nothing was waiting to be served: now, while the server waits for a request."""
        return time.time() if self._waiting else self.caught_up_at

    def close(self) -> None:
        self.socket.close(linger=0)

    @property
    def rejects(self) -> int:
        return self.reject_log.count

    def receive(self, flags: int = 0) -> tuple[list[bytes], str | None]:
        """One request's frames, and its sender's principal when CurveZMQ named it (else None)."""
        if not self.identify:
            frames = self.socket.recv_multipart(flags)
            self.bytes_received += len(frames[-1])
            return frames, None
        parts = self.socket.recv_multipart(flags, copy=False)
        frames = [f.bytes for f in parts]
        self.bytes_received += len(frames[-1])
        return frames, principal_of(parts[-1])

    def handle_frames(self, frames: list[bytes], principal: str | None = None) -> list[bytes] | None:
        """Frames from the ROUTER -> frames to send back (or None to drop). The handler finds the
        sender's principal (None without CurveZMQ) in the request's "principal"."""
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
            request["principal"] = principal
            result = self.handler(request)
            reply = wire.encode_reply(rid, **result)
            if self.tally is not None:
                self.tally(request.get(wire.AT, 0), len(rest[0]), len(reply))
            return envelope + [reply]
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
