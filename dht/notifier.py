"""Telling a record's watchers that it changed, on a thread of its own.

A subscriber learns of a new publisher by this push ("changed"), so its delay is what a best-effort
subscriber loses of a new stream. Queued behind the maintenance thread's round (stabilize,
fix_fingers, replication: under load, and with timeouts on dead peers, hundreds of milliseconds)
it was measured at up to 280 ms on a loaded two-core machine; here it goes out as soon as the
write is applied. A dead watcher costs its own short timeout, on this thread only; it just misses
the push and reads the record at its next heartbeat.
"""

from __future__ import annotations

import logging
import queue
import time
from typing import TYPE_CHECKING

from dht.records import Record
from dht.transport import RpcClient

if TYPE_CHECKING:
    from dht.node import ChordNode

log = logging.getLogger(__name__)

WATCHER_TIMEOUT = 0.25


class Notifier:
    """Consumes `node.changed_records` (keys) and sends each record's live fields to its watchers."""

    def __init__(self, node: ChordNode) -> None:
        self.node = node
        self.rpc = RpcClient(timeout=WATCHER_TIMEOUT, retries=0, setup=node.setup)

    def run(self) -> None:
        node = self.node
        try:
            while not node.stopped.is_set():
                try:
                    key = node.changed_records.get(timeout=0.2)
                except queue.Empty:
                    continue
                try:
                    self.notify(key)
                except Exception:  # a bug here must not silence every later notification
                    log.exception("notifying the watchers of %r failed", key)
        finally:
            self.rpc.close()

    def notify(self, key: str) -> None:
        """Send the record's live fields to every live watcher ("changed"); a dead one just misses it."""
        now = time.time()
        with self.node.lock:
            raw = self.node.store.get(key)
            if raw is None or not self.node.store.is_record(key):
                return
            rec = Record.decode(raw)
        fields = rec.view(now)
        for endpoint in rec.live_watchers(now):
            self.rpc.call(endpoint, "changed", key=key, fields=fields)
