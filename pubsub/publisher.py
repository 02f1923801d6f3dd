"""The publishing side: a PUB socket, a history/repair endpoint, and a registration heartbeat.

Subscribers connect their SUB sockets straight to our PUB socket (the ring only introduced us).
Every message gets the next sequence number and goes into the bounded history, which a ROUTER
serves: the last k messages to a late joiner, or a range to a reliable subscriber repairing a
gap. A heartbeat thread renews our leased entry in the topic's record; if we die, the entry
expires within a lease and subscribers drop us. In relay mode the PUB socket also connects to the
topic owner's relay, which the heartbeat re-resolves, so the publisher follows ownership moves.
"""

from __future__ import annotations

import logging
import threading
import time

import zmq

from dht import wire
from dht.client import DhtClient, DhtError
from dht.transport import Refused, RpcServer, SocketSetup
from pubsub.directory import Directory, PublisherEntry
from pubsub.envelope import MAX_TOPIC_CHARS, Envelope
from pubsub.history import History
from pubsub.relay import SERVICE_IN, resolve_relay

log = logging.getLogger(__name__)

REPLY_BUDGET_BYTES = 400_000  # history/repair replies stay well under the wire's limit
REPAIR_SCHEMAS: wire.Schemas = {
    "last": {"topic": (wire.string(MAX_TOPIC_CHARS), True), "count": (wire.uint, True)},
    "range": {"topic": (wire.string(MAX_TOPIC_CHARS), True), "from": (wire.uint, True),
              "to": (wire.optional(wire.uint), False)},
}


class Publisher:
    def __init__(self, via: str, topic: str, host: str = "127.0.0.1", history: int = 0,
                 strength: int | None = None, heartbeat: float = 1.0, mode: str = "direct",
                 setup: SocketSetup | None = None, sndhwm: int = 100_000) -> None:
        wire.parse_endpoint(via)
        if not topic or len(topic) > MAX_TOPIC_CHARS:
            raise ValueError(f"a topic is 1..{MAX_TOPIC_CHARS} characters")
        if history < 0:
            raise ValueError("--history cannot be negative")
        self.via, self.topic, self.host, self.mode = via, topic, host, mode
        self.strength = strength
        self.heartbeat = heartbeat
        self.setup = setup
        self.history = History(history)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.registered = threading.Event()
        self.context = zmq.Context.instance()
        self.pub = self.context.socket(zmq.PUB)
        self.pub.setsockopt(zmq.SNDHWM, sndhwm)
        self.pub.setsockopt(zmq.MAXMSGSIZE, wire.MAX_MESSAGE_BYTES)  # subscriptions come in on it too
        self.pub.setsockopt(zmq.LINGER, 2000)  # flush what is queued when we close
        if setup is not None:  # in relay mode the PUB connects to the relay: a CURVE client, not a server
            setup(self.pub, mode == "direct")
        port = self.pub.bind_to_random_port(f"tcp://{host}")
        self.id = f"{host}:{port}"
        self.repair = RpcServer(host, 0, self._on_repair, setup=setup, schemas=REPAIR_SCHEMAS)
        self.entry = PublisherEntry(self.id, self.id, self.repair.endpoint, strength, history, mode)
        self._threads: list[threading.Thread] = []
        self.sent = 0
        if mode not in ("direct", "relay"):
            raise ValueError(f"mode must be direct or relay, got {mode!r}")
        self.relay_target: str | None = None  # relay mode: set by the heartbeat thread ...
        self._relay_connected: str | None = None  # ... applied by the publishing thread

    def start(self, timeout: float = 15.0) -> Publisher:
        """Serve history/repair, register with the topic's owner, and wait until registered."""
        for name, target in (("repair", self._serve_repair), ("heartbeat", self._heartbeat)):
            t = threading.Thread(target=target, name=f"pub-{name}-{self.id}", daemon=True)
            t.start()
            self._threads.append(t)
        if not self.registered.wait(timeout):
            self.close(unregister=False)
            raise DhtError(f"could not register topic {self.topic!r} via {self.via} within {timeout:g}s")
        if self.relay_target != self._relay_connected:
            self._follow_relay()  # connect now: the handshake overlaps the caller's first steps
        return self

    def publish(self, payload: bytes) -> Envelope:
        """Send one message (from one thread only: the PUB socket is not thread-safe)."""
        if self.relay_target != self._relay_connected:
            self._follow_relay()
        with self.lock:
            env = Envelope(self.topic, self.id, self.history.last_seq + 1, time.time_ns(), payload)
            self.history.add(env)
        self.pub.send_multipart(env.frames())
        self.sent += 1
        return env

    def _follow_relay(self) -> None:
        """Relay mode: connect the PUB socket to the topic owner's relay (ownership may move)."""
        target = self.relay_target
        if self._relay_connected is not None:
            try:
                self.pub.disconnect(wire.zmq_address(self._relay_connected))
            except zmq.ZMQError:
                pass
        if target is not None:
            self.pub.connect(wire.zmq_address(target))
        self._relay_connected = target

    def close(self, unregister: bool = True) -> None:
        self._unregister = unregister
        self.stopping.set()
        for t in self._threads:
            t.join(timeout=10)
        self.pub.close()

    # -- threads ----------------------------------------------------------------------------------
    def _serve_repair(self) -> None:
        try:
            self.repair.serve(self.stopping)
        finally:
            self.repair.close()

    def _heartbeat(self) -> None:
        with DhtClient(self.via, timeout=1.0, retries=1, setup=self.setup) as client:
            directory = Directory(client, self.heartbeat)
            while not self.stopping.is_set():
                try:
                    if self.mode == "relay":
                        self.relay_target = resolve_relay(client, self.topic, SERVICE_IN)
                    directory.register_publisher(self.topic, self.entry)
                    self.registered.set()
                except DhtError as exc:
                    log.warning("registration of %s failed: %s", self.topic, exc)
                self.stopping.wait(self.heartbeat)
            if getattr(self, "_unregister", True) and self.registered.is_set():
                try:
                    directory.unregister_publisher(self.topic, self.id)
                except DhtError as exc:
                    log.info("could not unregister (the lease will expire): %s", exc)

    def _on_repair(self, req: dict) -> dict:
        if req["topic"] != self.topic:
            raise Refused(f"this publisher serves topic {self.topic!r}, not {req['topic']!r}")
        with self.lock:
            if req["op"] == "last":
                found = self.history.last(req["count"])
            else:
                found = self.history.range(max(req["from"], 1), req.get("to"), limit=100_000)
            first, last = self.history.first_seq, self.history.last_seq
        messages, size = [], 0
        for env in found:
            raw = env.encode()
            if messages and size + len(raw) > REPLY_BUDGET_BYTES:
                break  # the caller asks again from where this reply stops
            messages.append(raw)
            size += len(raw)
        return {"first": first, "last": last, "messages": messages}
