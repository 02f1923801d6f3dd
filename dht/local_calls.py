"""Calls between the ring positions of one process, answered in place.

A process holding many positions (dht/host.py) finds its own positions among every position's
successors and fingers, and hands keys over between them on joins and leaves. Such a request never
needs a socket: `LocalFirst` encodes it as for the wire, validates it as the server would, and hands it
to the process's own request handler, then decodes the reply as a remote caller would — the same
checks and the same answers, without a message, a context switch or a wait on the server thread.
Requests to other processes go through the RpcClient as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dht import wire
from dht.ids import position_of, process_of
from dht.transport import Refused, Reply, RpcClient


class LocalFirst:
    """An RpcClient's `call`, answered in place for the positions of `process`; and a peer process that
    did not answer is not waited on again until `new_cycle()` (the thread runs every position's round in
    turn: a dead process must cost it one timeout a cycle, not one for each position that knew it)."""

    def __init__(self, rpc: RpcClient, process: str, handle: Callable[[dict], dict]) -> None:
        self.rpc = rpc
        self.process = process
        self.handle = handle
        self.local = 0  # requests answered in place
        self.silent: set[str] = set()  # processes that did not answer this cycle (bounded by the peers known)

    def new_cycle(self) -> None:
        self.silent.clear()

    def call(self, endpoint: str, op: str, /, timeout: float | None = None, retries: int | None = None,
             **fields: Any) -> Reply:
        process = process_of(endpoint)
        if process != self.process:
            if process in self.silent:
                return Reply(False, err=f"no reply from {process} this round", timed_out=True)
            reply = self.rpc.call(endpoint, op, timeout=timeout, retries=retries, **fields)
            if reply.timed_out:
                self.silent.add(process)
            return reply
        self.local += 1
        at = position_of(endpoint)
        try:
            request = wire.decode_request(wire.encode_request(op, 0, **fields, **({wire.AT: at} if at else {})))
            request["principal"] = None  # our own process: no peer to name
            body = wire.decode_reply(wire.encode_reply(0, **self.handle(request)))
        except (wire.WireError, Refused) as exc:
            return Reply(False, err=str(exc))
        if self.rpc.on_rtt is not None:
            self.rpc.on_rtt(endpoint, 0.0)  # our own process: nothing is nearer
        return Reply(True, body)

    def reset(self, endpoint: str) -> None:
        if process_of(endpoint) != self.process:
            self.rpc.reset(endpoint)

    def connection_lost(self, endpoint: str) -> bool:
        return process_of(endpoint) != self.process and self.rpc.connection_lost(endpoint)

    def watch(self, endpoint: str) -> None:
        if process_of(endpoint) != self.process:
            self.rpc.watch(endpoint)

    def close(self) -> None:
        self.rpc.close()

    def closings(self) -> int:
        return self.rpc.closings()

    @property
    def watch_socket(self):  # noqa: ANN201 - the RpcClient's monitor socket, or None
        return self.rpc.watch_socket

    @property
    def bytes_sent(self) -> int:
        return self.rpc.bytes_sent

    @property
    def sent(self) -> int:
        return self.rpc.sent

    @property
    def on_rtt(self) -> Callable[[str, float | None], None] | None:
        return self.rpc.on_rtt
