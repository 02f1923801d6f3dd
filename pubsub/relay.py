"""Relay (broker) mode, the second dissemination strategy, and the small interface both share.

In relay mode the topic's owner forwards: every node process runs a `Relay` (an XSUB socket that
publishers connect their PUB to, an XPUB socket that subscribers connect their SUB to, and
zmq's proxy between them, which runs in C) and advertises its endpoints in the ring as the
`relay_in` / `relay_out` services of `node info` (and of every `records` reply). A client's
registrar learns the relay of each relay-mode topic's owner with every renewal, so when ownership
moves, its relay PUB and relay SUB follow (pubsub/publishing.py, pubsub/io_loop.py).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path

import zmq

from dht import wire
from dht.gate import Denials, Gate
from dht.policy import PolicyFile
from dht.sockets import bind_port, rebind_port
from dht.transport import SocketSetup

log = logging.getLogger(__name__)

SERVICE_IN = "relay_in"
SERVICE_OUT = "relay_out"


class Relay:
    """XSUB <-> XPUB forwarding on two ports of this host, in a background thread."""

    def __init__(self, host: str = "127.0.0.1", setup: SocketSetup | None = None, advertise: str | None = None,
                 ports: tuple[int, int] = (0, 0), acl: Path | None = None) -> None:
        """`ports`: where the XSUB (publishers in) and XPUB (subscribers out) sockets listen (0: free ones).
        `acl`: a policy file (dht/policy.py): subscribers then receive only the topics they may read (the
        forwarding then runs in Python, not in zmq's C proxy: each subscription must be judged)."""
        self.policy = PolicyFile(acl) if acl is not None else None
        self.denials = Denials("relay")
        self.host, self.setup = host, setup
        self.context = zmq.Context.instance()
        self.xsub = self._socket(zmq.XSUB)
        self.xpub = self._socket()
        told = advertise or host  # bound on host, reached at `told` (dht/address.py)
        self.in_endpoint = f"{told}:{bind_port(self.xsub, host, ports[0])}"
        self.out_port = bind_port(self.xpub, host, ports[1])
        self.out_endpoint = f"{told}:{self.out_port}"
        self.forwarded = self.forwarded_bytes = 0  # under a policy (the Python loop counts them)
        self._control_lock = threading.Lock()  # the control socket: statistics (node's server thread), close
        self._control_address = f"inproc://relay-control-{id(self)}"
        self._control = self.context.socket(zmq.PAIR)
        self._control.bind(self._control_address)
        self._thread = threading.Thread(target=self._run, name="relay", daemon=True)

    def _socket(self, kind: int = zmq.XPUB) -> zmq.Socket:
        sock = self.context.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 100_000)
        sock.setsockopt(zmq.SNDHWM, 100_000)
        sock.setsockopt(zmq.MAXMSGSIZE, wire.MAX_MESSAGE_BYTES)
        if self.setup is not None:
            self.setup(sock, True)
        return sock

    @property
    def services(self) -> dict[str, str]:
        return {SERVICE_IN: self.in_endpoint, SERVICE_OUT: self.out_endpoint}

    def start(self) -> Relay:
        self._thread.start()
        return self

    def _run(self) -> None:
        control = self.context.socket(zmq.PAIR)
        control.connect(self._control_address)
        try:
            if self.policy is None:
                zmq.proxy_steerable(self.xsub, self.xpub, None, control)
            else:
                self._police(control)
        except zmq.ZMQError as exc:
            log.debug("relay stopped: %s", exc)
        finally:
            control.close()

    def _gate(self) -> Gate:
        policy = self.policy

        def may(principal: str | None, topic: str) -> tuple[bool, str]:
            d = policy.policy.decide(principal, "subscribe", topic)  # type: ignore[union-attr]
            return d.allowed, d.rule

        return Gate(self.xpub, may, self.denials, forward=self.xsub.send)

    def _police(self, control: zmq.Socket) -> None:
        """The proxy under a policy: messages from publishers to the subscribers' socket as they come;
        subscribers' subscriptions judged (dht/gate.py) before they are applied and passed upstream.
        A changed policy file binds the subscribers' socket again: each subscribes again under it."""
        gate, version, next_check = self._gate(), self.policy.version, 0.0  # type: ignore[union-attr]
        poller = zmq.Poller()
        for sock in (self.xsub, self.xpub, control):
            poller.register(sock, zmq.POLLIN)
        while True:
            events = dict(poller.poll(200))
            if control in events:
                return
            if self.xsub in events:
                for _ in range(1000):
                    try:
                        frame = self.xsub.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self.xpub.send(frame)
                    self.forwarded += 1
                    self.forwarded_bytes += len(frame)
            if self.xpub in events:
                gate.take()
            now = time.monotonic()
            if now >= next_check:
                next_check = now + 0.25
                self.policy.check()  # type: ignore[union-attr]
                if self.policy.version != version:  # type: ignore[union-attr]
                    version = self.policy.version  # type: ignore[union-attr]
                    poller.unregister(self.xpub)
                    self.xpub.close(linger=0)
                    self.xpub = self._socket()
                    rebind_port(self.xpub, self.host, self.out_port)
                    gate = self._gate()
                    poller.register(self.xpub, zmq.POLLIN)

    def stats(self) -> dict[str, int]:
        """Messages and bytes taken from publishers so far (for the node's load): zmq's proxy counts
        them itself and says so on its control socket; under a policy our loop counts them."""
        if self.policy is not None:
            return {"messages": self.forwarded, "bytes": self.forwarded_bytes}
        with self._control_lock:
            if not self._thread.is_alive():
                return {"messages": 0, "bytes": 0}
            while self._control.poll(0):  # a reply that came after an earlier wait gave up
                self._control.recv_multipart()
            self._control.send(b"STATISTICS")
            if not self._control.poll(1000):
                return {"messages": 0, "bytes": 0}
            counts = [int.from_bytes(f, sys.byteorder) for f in self._control.recv_multipart()]
        return {"messages": counts[0], "bytes": counts[1]}  # frontend (publishers in): messages, bytes

    def close(self) -> None:
        with self._control_lock:
            if self._thread.is_alive():
                self._control.send(b"TERMINATE")
                self._thread.join(timeout=5)
        for sock in (self._control, self.xsub, self.xpub):
            sock.close()
