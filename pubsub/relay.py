"""Relay (broker) mode, the second dissemination strategy, and the small interface both share.

In relay mode the topic's owner forwards: every node process runs a `Relay` (an XSUB socket that
publishers connect their PUB to, an XPUB socket that subscribers connect their SUB to, and
zmq's proxy between them, which runs in C) and advertises its endpoints in the ring as the
`relay_in` / `relay_out` services of `node info`. Publishers and subscribers of a topic resolve
the owner's relay every heartbeat, so when ownership moves they follow.

A route is how a socket reaches its peers:
- `DirectRoute` (subscriber side): SUB connected straight to every matched publisher's PUB;
- `RelayRoute` (either side): the socket connected to the topic owner's relay.
Both offer `sync(publishers)`, called whenever the topic's record is read.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

import zmq

from dht import wire
from dht.client import DhtClient, DhtError
from dht.transport import SocketSetup

log = logging.getLogger(__name__)

SERVICE_IN = "relay_in"
SERVICE_OUT = "relay_out"


class Relay:
    """XSUB <-> XPUB forwarding on two ports of this host, in a background thread."""

    def __init__(self, host: str = "127.0.0.1", setup: SocketSetup | None = None) -> None:
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
        self.in_endpoint = f"{host}:{self.xsub.bind_to_random_port(f'tcp://{host}')}"
        self.out_endpoint = f"{host}:{self.xpub.bind_to_random_port(f'tcp://{host}')}"
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


class Route(Protocol):
    mode: str

    def sync(self, publishers: list) -> None: ...

    def close(self) -> None: ...


class DirectRoute:
    """The subscriber's SUB socket connected straight to every matched publisher."""

    mode = "direct"

    def __init__(self, sock: zmq.Socket) -> None:
        self.sock = sock
        self.connected: set[str] = set()

    def sync(self, publishers: list) -> None:
        wanted = {p.endpoint for p in publishers}
        for endpoint in self.connected - wanted:
            try:
                self.sock.disconnect(wire.zmq_address(endpoint))
            except zmq.ZMQError:
                pass
        for endpoint in wanted - self.connected:
            self.sock.connect(wire.zmq_address(endpoint))
        self.connected = wanted

    def close(self) -> None:
        self.connected.clear()


def resolve_relay(client: DhtClient, topic: str, service: str) -> str:
    """The endpoint of `service` (relay_in or relay_out) at the topic's current owner."""
    found = client.lookup(topic)
    if not found.ok or found.owner is None:
        raise DhtError(f"lookup of {topic!r} failed: {found.error}")
    endpoint = (client.info(found.owner.endpoint).get("services") or {}).get(service)
    if not isinstance(endpoint, str):
        raise DhtError(f"the owner of {topic!r}, {found.owner.endpoint}, runs no relay")
    wire.parse_endpoint(endpoint)
    return endpoint


class RelayRoute:
    """A socket connected to the relay of the topic's current owner (`service`: which side)."""

    mode = "relay"

    def __init__(self, sock: zmq.Socket, client: DhtClient, topic: str, service: str) -> None:
        self.sock, self.client, self.topic, self.service = sock, client, topic, service
        self.current: str | None = None

    def sync(self, publishers: list | None = None) -> None:
        endpoint = resolve_relay(self.client, self.topic, self.service)
        if endpoint == self.current:
            return
        if self.current is not None:
            try:
                self.sock.disconnect(wire.zmq_address(self.current))
            except zmq.ZMQError:
                pass
        self.sock.connect(wire.zmq_address(endpoint))
        log.info("%s: relaying through %s", self.topic, endpoint)
        self.current = endpoint

    def close(self) -> None:
        self.current = None
