"""What the ring positions of one process share (dht/host.py makes it, dht/node.py's positions use it):
the RPC socket, the maintenance thread's job queue, the record changes, the policy, the clock's end."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from dht.gate import Denials
from dht.policy import PolicyFile
from dht.rpc_server import RpcServer
from dht.transport import SocketSetup


@dataclass
class Shared:
    """What the positions of one process share (dht/host.py makes it): the RPC socket, the maintenance
    thread's job queue, the record changes the events socket publishes, the policy, the clock's end."""

    server: RpcServer
    setup: SocketSetup | None
    stopped: threading.Event
    jobs: queue.Queue  # (position index, kind, argument): the maintenance thread's work
    changes: queue.Queue  # record changes dht/notifier.py publishes
    policy: PolicyFile | None
    denials: Denials
    positions: list[str] = field(default_factory=list)  # the endpoints of the positions in the ring, by index
    consensus: Callable[[], dict] | None = None  # the process's consensus groups, summed up (dht/host.py)


class Jobs:
    """A position's view of the process's maintenance queue: what it puts carries its index."""

    def __init__(self, jobs: queue.Queue, index: int) -> None:
        self._jobs, self.index = jobs, index

    def put(self, job: tuple[str, object]) -> None:
        self._jobs.put((self.index, *job))

    def get(self, *args: object, **kwargs: object) -> tuple:
        return self._jobs.get(*args, **kwargs)

    def empty(self) -> bool:
        return self._jobs.empty()

    def qsize(self) -> int:
        return self._jobs.qsize()
