"""The subscriber's reads of the topic record, off the delivery thread.

Renewing the subscriber's lease and reading the record back are a lookup and a few RPCs through
the ring: well under a millisecond on loopback, but tens of milliseconds per round trip on a real
or emulated network (on Mininet with 5 ms links, ~150 ms every heartbeat). Done on the thread that
drains the SUB socket they hold every message back that long and the measured latency with it, so
they run here, on a thread with its own DhtClient (ZeroMQ sockets are not shared between
threads). Each read's result is queued and the delivery loop is woken through an inproc socket
that it polls beside its SUB socket; the delivery thread alone changes subscriber state. Hints
(a push from the owner) are read by the delivery thread itself, at once: they are rare, and a read
queued behind a renewal in progress would make a new publisher wait for both.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

import zmq

from dht.client import DhtClient, DhtError
from dht.transport import SocketSetup
from pubsub.directory import Directory, PublisherEntry

log = logging.getLogger(__name__)

JOIN_TIMEOUT = 10.0  # a read in flight is a lookup and an RPC, each 1 s x 2 tries at worst


class RecordReader:
    """Every heartbeat: renew the subscription lease and read the publishers."""

    def __init__(self, via: str, topic: str, subscriber_id: str, notify: str, heartbeat: float,
                 context: zmq.Context, setup: SocketSetup | None = None) -> None:
        self.topic, self.subscriber_id, self.notify, self.heartbeat = topic, subscriber_id, notify, heartbeat
        self.context = context
        self.client = DhtClient(via, timeout=1.0, retries=1, setup=setup)
        self.directory = Directory(self.client, heartbeat)
        self.address = f"inproc://chordpub-record-{id(self)}"
        self.wakeup = context.socket(zmq.PULL)  # the delivery thread polls this
        self.wakeup.setsockopt(zmq.LINGER, 0)
        self.wakeup.bind(self.address)
        self._results: queue.SimpleQueue[tuple[float, list[PublisherEntry]]] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"record-{topic}", daemon=True)

    def start(self) -> RecordReader:
        """Start reading (once; later calls do nothing)."""
        if self._thread.ident is None:
            self._thread.start()
        return self

    def latest(self) -> tuple[float, list[PublisherEntry]] | None:
        """(when the read started, the publishers) of the newest read since the last call, or None
        (called by the delivery thread)."""
        while True:
            try:
                self.wakeup.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
        found = None
        while True:
            try:
                found = self._results.get_nowait()
            except queue.Empty:
                return found

    def close(self, unregister: bool = True) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=JOIN_TIMEOUT)
        if unregister:
            try:
                self.directory.unregister_subscriber(self.topic, self.subscriber_id)
            except DhtError as exc:
                log.info("could not unregister (the lease will expire): %s", exc)
        self.client.close()
        self.wakeup.close()

    def _loop(self) -> None:
        wake = self.context.socket(zmq.PUSH)
        wake.setsockopt(zmq.LINGER, 0)
        wake.connect(self.address)
        try:
            while not self._stopping.is_set():
                next_renewal = time.monotonic() + self.heartbeat
                try:
                    self.directory.register_subscriber(self.topic, self.subscriber_id, self.notify)
                    started = time.monotonic()
                    self._results.put((started, self.directory.publishers(self.topic)))
                    wake.send(b"", zmq.NOBLOCK)
                except DhtError as exc:
                    log.warning("directory unavailable: %s", exc)
                except zmq.Again:
                    pass  # the delivery thread has wake-ups queued already
                self._stopping.wait(max(next_renewal - time.monotonic(), 0.0))
        finally:
            wake.close()
