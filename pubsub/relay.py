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
import threading

import zmq

from dht import wire
from dht.transport import SocketSetup, bind_port

log = logging.getLogger(__name__)

SERVICE_IN = "relay_in"
SERVICE_OUT = "relay_out"


class Relay:
    """XSUB <-> XPUB forwarding on two ports of this host, in a background thread."""

    def __init__(self, host: str = "127.0.0.1", setup: SocketSetup | None = None, advertise: str | None = None,
                 ports: tuple[int, int] = (0, 0)) -> None:
        """`ports`: where the XSUB (publishers in) and XPUB (subscribers out) sockets listen (0: free ones)."""
        self.context = zmq.Context.instance()
        self.xsub = self.context.socket(zmq.XSUB)
        self.xpub = self.context.socket(zmq.XPUB)
        for sock in (self.xsub, self.xpub):
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVHWM, 100_000)
            sock.setsockopt(zmq.SNDHWM, 100_000)
            sock.setsockopt(zmq.MAXMSGSIZE, wire.MAX_MESSAGE_BYTES)
            if setup is not None:
                setup(sock, True)
        told = advertise or host  # bound on host, reached at `told` (dht/address.py)
        self.in_endpoint = f"{told}:{bind_port(self.xsub, host, ports[0])}"
        self.out_endpoint = f"{told}:{bind_port(self.xpub, host, ports[1])}"
        self._control_address = f"inproc://relay-control-{id(self)}"
        self._control = self.context.socket(zmq.PAIR)
        self._control.bind(self._control_address)
        self._thread = threading.Thread(target=self._run, name="relay", daemon=True)

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
            zmq.proxy_steerable(self.xsub, self.xpub, None, control)
        except zmq.ZMQError as exc:
            log.debug("relay stopped: %s", exc)
        finally:
            control.close()

    def close(self) -> None:
        if self._thread.is_alive():
            self._control.send(b"TERMINATE")
            self._thread.join(timeout=5)
        for sock in (self._control, self.xsub, self.xpub):
            sock.close()
