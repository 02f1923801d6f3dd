"""Telling watchers that a record changed: a PUB socket, on a thread of its own.

Watchers are ZeroMQ subscriptions to this node's events socket (the `events` service of `node
info`), one per (record, namespace) they care for: a subscriber of a topic listens to the
publishers' namespace of its record and never hears of other subscribers. A change goes out as one
frame, the msgpack array ``[key NUL namespace, {"k", "set": {name: value}, "del": [names], "epoch"}]``
(dht/records.py), to every watcher at once; libzmq does the fan-out and drops it for a watcher that
stopped reading.
Nothing here is acknowledged: a watcher compares the namespace's epoch on its next renewal and
reads the record again when it missed something.

It runs on its own thread because a subscriber learns of a new publisher from this push: queued
behind a maintenance round (under load, and with timeouts on dead peers, hundreds of milliseconds)
it was measured at up to 280 ms on a loaded two-core machine; here it leaves as soon as the write is
applied.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable
from typing import Protocol

import zmq

from dht import wire
from dht.gate import Denials, Gate
from dht.records import Change, change_message, event_frame, namespace
from dht.sockets import bind_port, rebind_port
from dht.transport import SocketSetup

log = logging.getLogger(__name__)

BATCH = 1000  # changes drained into one round of messages


class NotifierHost(Protocol):
    """What the notifier needs of its node."""

    changes: queue.Queue[Change]
    setup: SocketSetup | None

    @property
    def stopped(self): ...  # noqa: ANN201 - a threading.Event


class Notifier:
    def __init__(self, node: NotifierHost, host: str, context: zmq.Context | None = None,
                 advertise: str | None = None, port: int = 0) -> None:
        self.node = node
        self.context, self.host, self.port = context or zmq.Context.instance(), host, port
        self.policy = getattr(node, "policy", None)  # under a policy, watchers see only what they may read
        self._policy_version = self.policy.version if self.policy is not None else 0
        self.gate: Gate | None = None
        self._bind()
        self.endpoint = f"{advertise or host}:{self.port}"
        self.published = 0
        self.bytes_sent = 0
        # told (position, bytes) of each message sent: a process of several positions counts each one's
        self.tally: Callable[[int, int], None] | None = None

    def _bind(self) -> None:
        self.socket = self.context.socket(zmq.PUB if self.policy is None else zmq.XPUB)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.SNDHWM, 10_000)
        self.socket.setsockopt(zmq.RCVHWM, 0)  # watchers' filters (thousands from one client): never dropped
        self.socket.setsockopt(zmq.MAXMSGSIZE, wire.MAX_MESSAGE_BYTES)  # subscriptions come in on it
        if self.node.setup is not None:
            self.node.setup(self.socket, True)
        self.port = (rebind_port if self.port else bind_port)(self.socket, self.host, self.port)
        if self.policy is not None:
            policy = self.policy

            def may(principal: str | None, topic: str) -> tuple[bool, str]:
                d = policy.policy.decide(principal, "subscribe", topic)
                return d.allowed, d.rule

            self.gate = Gate(self.socket, may, getattr(self.node, "denials", None) or Denials("events"))

    def _police(self) -> None:
        """Let through the watchers' subscriptions the policy allows; after a policy change, bind again
        (every watcher reconnects and subscribes again under it)."""
        if self.policy is None:
            return
        if self.policy.version != self._policy_version:
            self._policy_version = self.policy.version
            self.socket.close(linger=0)
            self._bind()
        self.gate.take()  # type: ignore[union-attr]

    def run(self) -> None:
        changes = self.node.changes
        while not self.node.stopped.is_set():
            self._police()
            try:
                # without a policy nothing but a change (or stop(), putting None) needs this thread
                batch = [changes.get(timeout=2.0 if self.policy is None else 0.02)]
            except queue.Empty:
                continue
            while len(batch) < BATCH:
                try:
                    batch.append(changes.get_nowait())
                except queue.Empty:
                    break
            batch = [c for c in batch if c is not None]
            if not batch:
                continue
            try:
                self.publish(batch)
            except Exception:  # a bug here must not silence every later notification
                log.exception("publishing %d record changes failed", len(batch))

    def publish(self, batch: list[Change]) -> None:
        """One message per (record, namespace) among `batch`, in the order they first appear."""
        groups: dict[tuple[str, str], list[Change]] = {}
        for change in batch:
            groups.setdefault((change.key, namespace(change.name)), []).append(change)
        for (key, ns), group in groups.items():
            body = event_frame(key, ns, change_message(group))
            try:
                self.socket.send(body, zmq.NOBLOCK)
                self.published += 1
                self.bytes_sent += len(body)  # once per message: libzmq copies it to each watcher
                if self.tally is not None:
                    self.tally(group[0].origin, len(body))
            except zmq.Again:
                pass  # PUB never blocks; a full queue just drops, and epochs tell the watchers

    def close(self) -> None:
        self.socket.close(linger=0)
