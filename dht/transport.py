"""ZeroMQ request/reply for the ring: the ROUTER client, and what both sides share (the server, a ROUTER
too, is dht/rpc_server.py).

The client reaches every peer through one ROUTER socket and follows the zguide's Lazy Pirate
pattern: a per-request timeout, and on timeout the peer's connection is dropped and reopened
before a bounded number of retries, so a late reply from a slow peer can never be mistaken for the
next one. A failed call is a value (`Reply` with ``ok=False``), not an exception thrown far away,
as in bmuller/kademlia.

`SocketSetup` is the hook through which CURVE security (dht/curve.py) configures every socket.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import struct
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import zmq

from dht import wire
from dht.ids import position_of, process_of
from dht.sockets import base_options, send_frames

log = logging.getLogger(__name__)

SocketSetup = Callable[[zmq.Socket, bool], None]  # (socket, is_server) -> None
FRESH_WAIT = 3  # timeouts a watched call waits when it opens the connection (handshakes first)
GONE = "no reply from {}: its connection was closed or refused (its process is gone)"


class Refused(Exception):
    """Raised by a handler to answer with an error reply (bad value, not the owner, ...)."""


@dataclass
class Reply:
    """The outcome of one call: ok with the reply fields, or not ok with a reason."""

    ok: bool
    body: dict = field(default_factory=dict)
    err: str | None = None
    timed_out: bool = False
    gone: bool = False  # the peer's connection was closed or refused: its process is gone, not busy

    def __getitem__(self, key: str) -> Any:
        return self.body[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.body.get(key, default)


class RpcClient:
    """Calls ops on any number of peers through ONE ROUTER socket. Not thread-safe: one per thread.

    Each peer process is a connection of that socket, named by ZMQ_CONNECT_ROUTING_ID ("endpoint#n"),
    so a process that talks to a thousand peers still holds one socket (the middleware client promises
    a fixed handful); the ring positions of one process ("host:port/i", dht/ids.py) share its
    connection, and a request to one of them names it (the `at` field). Requests can be sent at once
    after connect; libzmq queues them until the connection is up. Two faces:
    - `call()` blocks for the reply, retrying on timeout (the zguide's Lazy Pirate). Replies are
      matched by request id, so a late one is never taken for the next; the peer's connection is
      dropped and reopened (a new routing id) only after two timeouts in a row, which bounds what
      queues up for a dead peer without making a thousand clients of a merely busy node reconnect
      to it at once (measured: that reconnection storm kept a loaded node unreachable for seconds);
    - `send()` returns at once and the reply (or the timeout) goes to a callback, run by whoever polls
      `socket` and calls `on_readable()` and `expire()`: an event loop that must never wait on a peer.
    """

    def __init__(self, timeout: float = 1.0, retries: int = 1, setup: SocketSetup | None = None,
                 context: zmq.Context | None = None, max_peers: int = 4096, watch: bool = False) -> None:
        """`watch`: follow the connections through libzmq's socket monitor, so that a blocking call to a
        peer whose process closed our connection (it died: the kernel closes its sockets) or refuses
        it (nothing listens there) fails at once instead of after `timeout`; a busy peer keeps its
        connections and is waited for as ever. A call that opens a connection then waits
        FRESH_WAIT timeouts: the TCP and ZeroMQ handshakes cost round trips of their own before the
        request's (on a 64 ms path, four of them pass a quarter-second timeout every time)."""
        self.context = context or zmq.Context.instance()
        self.timeout = timeout
        self.retries = retries
        self.max_peers = max_peers
        self.socket = self.context.socket(zmq.ROUTER)
        base_options(self.socket)
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # a connect whose SYN was lost (a partition) is retried after this, not after the kernel's
        # exponential SYN back-off (up to minutes), so a healed link is used within a second or two
        self.socket.setsockopt(zmq.CONNECT_TIMEOUT, max(1000, int(2000 * timeout)))
        if setup is not None:
            setup(self.socket, False)
        self._peers: OrderedDict[str, bytes] = OrderedDict()  # process endpoint -> routing id of its connection
        self._generation = itertools.count(1)
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[str, float, Callable[[Reply], None] | None]] = {}
        self._deadlines: list[tuple[float, int]] = []  # (deadline, rid) of the send() face's requests: a heap
        self._replies: dict[int, dict] = {}  # blocking calls' replies that came in while others waited
        self._timeouts: dict[str, int] = {}  # process endpoint -> timeouts in a row
        self.bytes_sent = 0
        self.sent = 0  # requests sent
        self._closed: set[str] = set()  # addresses whose connection was closed or refused since we connected
        self.disconnects = 0  # established connections that closed (read by `closings()`)
        self._watch = self.socket.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED
                                                     | zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED) \
            if watch else None
        self._receive_timeout = -1  # RCVTIMEO as last set, in ms (-1: libzmq's default, wait forever)
        self._poller = zmq.Poller()
        self._poller.register(self.socket, zmq.POLLIN)
        if self._watch is not None:
            self._poller.register(self._watch, zmq.POLLIN)
        # told each blocking call's round trip in seconds, or None when the peer did not answer
        self.on_rtt: Callable[[str, float | None], None] | None = None

    # -- blocking -----------------------------------------------------------------------------------
    def call(self, endpoint: str, op: str, /, timeout: float | None = None, retries: int | None = None,
             **fields: Any) -> Reply:
        """Send one request and wait for its reply; never raises for network trouble."""
        timeout = self.timeout if timeout is None else timeout
        retries = self.retries if retries is None else retries
        err, gone = None, False
        for _attempt in range(retries + 1):
            if self._gone(endpoint):
                # closed or refused before: a new connection, judged on its own events (a process
                # restarted at the address is reached at once, a dead one refuses it at once)
                self.reset(endpoint)
            rid = next(self._ids)
            fresh = process_of(endpoint) not in self._peers  # the first reply also pays for the connection
            wait = timeout * FRESH_WAIT if fresh and self._watch is not None else timeout
            sent_at = time.monotonic()
            failed = self._send(endpoint, op, rid, fields)
            if failed is not None:
                return failed
            self._pending[rid] = (endpoint, sent_at + wait, None)
            body = self._await(rid, wait, endpoint)
            if body is not None:
                if self.on_rtt is not None and not fresh:
                    self.on_rtt(endpoint, time.monotonic() - sent_at)
                if body.get("ok"):
                    return Reply(True, body)
                return Reply(False, body, err=body.get("err"))
            if self._gone(endpoint):
                err, gone = GONE.format(endpoint), True
                break  # libzmq reconnects by itself: no Lazy Pirate reset
            self._timed_out(endpoint)
        if self.on_rtt is not None:
            self.on_rtt(endpoint, None)
        return Reply(False, err=err or f"no reply from {endpoint} within {timeout:g}s", timed_out=True, gone=gone)

    def _await(self, rid: int, timeout: float, endpoint: str | None = None) -> dict | None:
        deadline = time.monotonic() + timeout
        if self._watch is None:
            return self._await_blocking(rid, deadline)
        while rid not in self._replies:
            left = deadline - time.monotonic()
            ready = dict(self._poller.poll(max(int(left * 1000), 0) + 1))  # at the deadline: one last look
            if self.socket in ready:
                self.on_readable()
                continue
            if endpoint is not None and self._watch in ready and self._gone(endpoint):
                self._pending.pop(rid, None)
                return None
            if time.monotonic() >= deadline:
                self._pending.pop(rid, None)
                return None
        return self._replies.pop(rid)

    def _await_blocking(self, rid: int, deadline: float) -> dict | None:
        """`_await` with no connection events to follow: the socket's own blocking receive, bounded by
        RCVTIMEO. A round trip is 10-14 us shorter than through a Poller (which builds its lists in
        Python, then reads once more to find the socket empty): about a tenth of a lookup hop."""
        while rid not in self._replies:
            wait_ms = max(int((deadline - time.monotonic()) * 1000), 0) + 1  # at the deadline: one last look
            if wait_ms != self._receive_timeout:
                self.socket.setsockopt(zmq.RCVTIMEO, wait_ms)
                self._receive_timeout = wait_ms
            try:
                frames = self.socket.recv_multipart()
            except zmq.Again:
                self._pending.pop(rid, None)
                return None
            self._take(frames)
        return self._replies.pop(rid)

    def _gone(self, endpoint: str) -> bool:
        """Whether our connection to the process at `endpoint` was closed or refused (and is not back)."""
        if self._watch is None or process_of(endpoint) not in self._peers:
            return False
        self._read_events()
        return wire.zmq_address(endpoint) in self._closed

    def _read_events(self) -> None:
        while self._watch is not None and self._watch.poll(0):
            head, endpoint = self._watch.recv_multipart()[:2]  # libzmq's event: u16 id + u32 value, then the address
            address = endpoint.decode(errors="replace")
            event = struct.unpack_from("=H", head)[0]
            if event in (zmq.EVENT_CONNECTED, zmq.EVENT_HANDSHAKE_SUCCEEDED):
                self._closed.discard(address)
                continue
            self.disconnects += event == zmq.EVENT_DISCONNECTED
            if len(self._closed) < self.max_peers:
                self._closed.add(address)

    @property
    def watch_socket(self) -> zmq.Socket | None:
        """The socket monitor's socket (a watching client), readable while it has events to read."""
        return self._watch

    def closings(self) -> int:
        """How many of our established connections have closed so far (a watching client; else 0):
        a peer process that died closed its end. Reads the socket monitor's events without waiting."""
        self._read_events()
        return self.disconnects

    def closed(self) -> set[str]:
        """The process endpoints ("host:port") whose connection is closed now (a watching client)."""
        self._read_events()
        return {address.removeprefix("tcp://") for address in self._closed}

    def _timed_out(self, endpoint: str) -> None:
        process = process_of(endpoint)
        n = self._timeouts.get(process, 0) + 1
        if n >= 2:
            self.reset(process)  # Lazy Pirate, the second time in a row
        else:
            self._timeouts[process] = n

    # -- asynchronous -------------------------------------------------------------------------------
    def send(self, endpoint: str, op: str, /, on_reply: Callable[[Reply], None] | None = None,
             timeout: float | None = None, **fields: Any) -> int | None:
        """Send one request without waiting. `on_reply(Reply)` runs from `on_readable()` when the reply
        comes, or from `expire()` once `timeout` has passed (None: fire and forget; replies are read
        and dropped). Returns the request id, or None when it could not even be queued (then
        `on_reply` has already been told)."""
        rid = next(self._ids)
        failed = self._send(endpoint, op, rid, fields)
        if failed is not None:
            if on_reply is not None:
                on_reply(failed)
            return None
        if on_reply is not None:
            deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
            self._pending[rid] = (endpoint, deadline, on_reply)
            heapq.heappush(self._deadlines, (deadline, rid))
        return rid

    def on_readable(self) -> None:
        """Read every reply waiting on the socket and hand each to its callback (or its caller)."""
        while True:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._take(frames)

    def _take(self, frames: list[bytes]) -> None:
        """One reply read from the socket: to the blocking call waiting for it, or to its callback."""
        try:
            body = wire.decode_reply(frames[-1])
        except wire.WireError as exc:
            log.debug("ignoring malformed reply: %s", exc)
            return
        rid = body.get("id")
        pending = self._pending.pop(rid, None) if isinstance(rid, int) else None
        if pending is None:
            return  # a stale reply (its caller gave up) or one nobody asked to see
        self._timeouts.pop(process_of(pending[0]), None)  # it answers
        callback = pending[2]
        if callback is None:
            self._replies[rid] = body
        else:
            callback(Reply(True, body) if body.get("ok") else Reply(False, body, err=body.get("err")))

    def expire(self, now: float | None = None) -> None:
        """Tell the callbacks of requests whose time is up, and drop those peers' connections."""
        now = time.monotonic() if now is None else now
        late = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _deadline, rid = heapq.heappop(self._deadlines)
            p = self._pending.get(rid)
            if p is not None and p[2] is not None:
                late.append((rid, p))
        for rid, (endpoint, _deadline, callback) in late:
            del self._pending[rid]
            self._timed_out(endpoint)
            callback(Reply(False, err=f"no reply from {endpoint}", timed_out=True))

    def serve_until(self, done: Callable[[], bool]) -> None:
        """Run the `send()` face here until `done()` or nothing waits: replies to their callbacks, and
        the requests whose time is up to `expire()`. For a caller that sends to many peers at once and
        waits for the slowest (or its timeout) instead of the sum of their round trips."""
        while not done():
            deadline = self.next_deadline()
            if deadline is None:
                return
            left = deadline - time.monotonic()
            if self._poller.poll(max(int(left * 1000), 0) + 1):
                self._read_events()
                self.on_readable()
            self.expire()

    def next_deadline(self) -> float | None:
        """The earliest time at which `expire()` has something to do (None: nothing pending)."""
        while self._deadlines and self._deadlines[0][1] not in self._pending:
            heapq.heappop(self._deadlines)  # answered: its deadline no longer counts
        return self._deadlines[0][0] if self._deadlines else None

    @property
    def waiting(self) -> int:
        return sum(1 for p in self._pending.values() if p[2] is not None)

    # -- connections --------------------------------------------------------------------------------
    def _send(self, endpoint: str, op: str, rid: int, fields: dict) -> Reply | None:
        """Queue a request; a Reply only when that failed."""
        try:
            peer = self._peer(endpoint)
        except wire.WireError as exc:
            return Reply(False, err=str(exc))
        at = position_of(endpoint)
        body = wire.encode_request(op, rid, **fields, **({wire.AT: at} if at else {}))
        if len(body) > wire.MAX_MESSAGE_BYTES:  # the peer's socket would drop it unread: say so now
            return Reply(False, err=f"{op} request of {len(body)} bytes exceeds the {wire.MAX_MESSAGE_BYTES}-byte "
                                    "message limit")
        try:
            try:
                send_frames(self.socket, [peer, body])
            except zmq.ZMQError as exc:
                if exc.errno != zmq.EHOSTUNREACH:
                    raise
                # the connection itself is gone (a refused handshake, say): open a new one and resend
                self.reset(endpoint)
                send_frames(self.socket, [self._peer(endpoint), body])
        except zmq.ZMQError as exc:  # its queue is full (a peer that long stopped reading), or gone
            self.reset(endpoint)
            return Reply(False, err=f"send failed: {exc}")
        self.bytes_sent += len(body)
        self.sent += 1
        return None

    def _peer(self, endpoint: str) -> bytes:
        address = wire.zmq_address(endpoint)  # validates it
        process = process_of(endpoint)
        peer = self._peers.get(process)
        if peer is not None:
            self._peers.move_to_end(process)
            return peer
        peer = f"{process}#{next(self._generation)}".encode()
        self.socket.setsockopt(zmq.CONNECT_ROUTING_ID, peer)
        self._read_events()  # what came before is the old connection's news
        self._closed.discard(address)  # a new connection: judged on its own events
        self.socket.connect(address)
        self._peers[process] = peer
        while len(self._peers) > self.max_peers:
            old, _ = self._peers.popitem(last=False)
            self._disconnect(old)
        return peer

    def connection_lost(self, endpoint: str) -> bool:
        """Whether our connection to `endpoint`'s process was closed or refused (a watching client)."""
        return self._gone(endpoint)

    def watch(self, endpoint: str) -> None:
        """Hold a connection to `endpoint`'s process without asking it anything, so that its death (the
        kernel closes its end) counts in `closings()` like that of a peer we call."""
        self._peer(endpoint)

    def reset(self, endpoint: str) -> None:
        """Forget the connection to `endpoint`'s process; the next request opens a new one."""
        process = process_of(endpoint)
        self._timeouts.pop(process, None)
        if self._peers.pop(process, None) is not None:
            self._disconnect(process)
            self._read_events()
            self._closed.discard(wire.zmq_address(process))  # our own disconnect: no event says so

    def _disconnect(self, endpoint: str) -> None:
        try:
            self.socket.disconnect(wire.zmq_address(endpoint))
        except zmq.ZMQError:
            pass  # already gone

    @property
    def peers(self) -> int:
        return len(self._peers)

    def close(self) -> None:
        self._pending.clear()
        self._deadlines.clear()
        self._replies.clear()
        self._peers.clear()
        if self._watch is not None:
            self.socket.disable_monitor()
            self._watch.close(linger=0)
        self.socket.close(linger=0)

    def __enter__(self) -> RpcClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
