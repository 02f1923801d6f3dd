"""A socket's outgoing connections, counted by their users: connect on the first, disconnect after
the last. A subscriber's SUB is connected once to a publisher however many topics it takes from it;
a relay-mode socket points each topic at its owner's relay, and relays are shared between topics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import zmq

from dht import wire


class Connections:
    def __init__(self, socket: Callable[[], zmq.Socket | None]) -> None:
        self._socket = socket  # the socket may be made later (a relay socket, on first use)
        self.refs: Counter[str] = Counter()

    def ref(self, endpoint: str) -> None:
        """One more user of `endpoint` ("": none to connect to, as for an archived publisher that is gone)."""
        sock = self._socket()
        if sock is None or not endpoint:
            return
        if self.refs[endpoint] == 0:
            sock.connect(wire.zmq_address(endpoint))
        self.refs[endpoint] += 1

    def unref(self, endpoint: str) -> None:
        if self.refs.get(endpoint, 0) <= 0:
            return
        self.refs[endpoint] -= 1
        if self.refs[endpoint] == 0:
            del self.refs[endpoint]
            sock = self._socket()
            if sock is not None:
                try:
                    sock.disconnect(wire.zmq_address(endpoint))
                except zmq.ZMQError:
                    pass  # already gone


class Pointers:
    """Each topic pointed at one endpoint (or none) through shared Connections."""

    def __init__(self, connections: Connections) -> None:
        self.connections = connections
        self.of: dict[str, str] = {}

    def point(self, topic: str, endpoint: str | None) -> None:
        old = self.of.get(topic)
        if old == endpoint:
            return
        if old is not None:
            del self.of[topic]
            self.connections.unref(old)
        if endpoint is not None:
            self.connections.ref(endpoint)
            self.of[topic] = endpoint
