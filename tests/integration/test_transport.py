"""dht/transport.py's RpcClient on loopback: one ROUTER socket for any number of peers, both faces."""

from __future__ import annotations

import threading
import time

import pytest
import zmq

from dht.rpc_server import RpcServer
from dht.transport import Reply, RpcClient


@pytest.fixture
def servers():
    ctx = zmq.Context()
    stop = threading.Event()
    made = [RpcServer("127.0.0.1", 0, lambda r, i=i: {"who": i}, context=ctx) for i in range(20)]
    threads = [threading.Thread(target=s.serve, args=(stop, 20), daemon=True) for s in made]
    for t in threads:
        t.start()
    yield made, ctx
    stop.set()
    for t in threads:
        t.join(timeout=5)
    for s in made:
        s.close()
    ctx.term()


def dead_endpoint(ctx: zmq.Context) -> str:
    sock = ctx.socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    sock.close(linger=0)
    return f"127.0.0.1:{port}"


def test_one_socket_reaches_twenty_peers_blocking_and_asynchronously(servers):
    made, ctx = servers
    with RpcClient(timeout=2.0, context=ctx) as rpc:
        assert [rpc.call(s.endpoint, "ping").get("who") for s in made] == list(range(20))
        servers_sockets = len(ctx._sockets) - 1  # each server's: all made by now
        replies: dict[int, Reply] = {}
        for i, s in enumerate(made):
            rpc.send(s.endpoint, "ping", on_reply=lambda r, i=i: replies.__setitem__(i, r))
        deadline = time.monotonic() + 5
        while len(replies) < 20 and time.monotonic() < deadline:
            if rpc.socket.poll(100):
                rpc.on_readable()
        assert {i: r.get("who") for i, r in replies.items()} == {i: i for i in range(20)}
        assert rpc.peers == 20 and len(ctx._sockets) == servers_sockets + 1  # one client socket for 20 peers
        assert servers_sockets == 20  # per server its ROUTER alone: a wake-up comes on it, over inproc
        assert rpc.waiting == 0


def test_a_dead_peer_costs_its_timeout_and_a_fresh_connection(servers):
    made, ctx = servers
    dead = dead_endpoint(ctx)
    with RpcClient(timeout=0.2, retries=1, context=ctx) as rpc:
        t0 = time.monotonic()
        reply = rpc.call(dead, "ping")
        assert reply.timed_out and not reply.ok and 0.35 < time.monotonic() - t0 < 2
        told: list[Reply] = []
        rpc.send(dead, "ping", on_reply=told.append, timeout=0.1)
        rpc.send(made[0].endpoint, "ping")  # fire and forget: its reply is read and dropped
        assert rpc.next_deadline() is not None
        while not told:
            rpc.socket.poll(50)
            rpc.on_readable()
            rpc.expire()
        assert told[0].timed_out and rpc.waiting == 0
        assert rpc.call(made[1].endpoint, "ping").get("who") == 1  # the socket still serves the living
        bad = rpc.call("not-an-endpoint", "ping")
        assert not bad.ok and "malformed endpoint" in bad.err


def test_a_lane_that_raises_leaves_the_request_to_the_general_path_and_the_server_serving(servers):
    """To see it fail, let the server call its lane unguarded (the serving thread dies with it)."""
    made, ctx = servers
    calls: list[bytes] = []

    def broken(frame: bytes) -> bytes:
        calls.append(frame)
        raise RuntimeError("a bug in a lane")

    made[0].lane = broken
    with RpcClient(timeout=2.0, retries=0, context=ctx) as rpc:
        assert [rpc.call(made[0].endpoint, "ping").get("who") for _ in range(3)] == [0, 0, 0]
    assert len(calls) == 3


def test_a_blocking_call_hands_the_replies_it_reads_for_others_to_their_callbacks(servers):
    """A blocking call waits in the socket's own receive: what it reads for `send()`'s requests goes to
    their callbacks, and a reply that comes after its call gave up is never taken for the next call.
    To see it fail, let `_take` drop the replies that have a callback."""
    made, ctx = servers
    stop = threading.Event()
    slow = RpcServer("127.0.0.1", 0, lambda r: time.sleep(0.3) or {"who": "slow", "n": r.get("n")}, context=ctx,
                     schemas={"ping": {"n": (lambda value, _field: value, False)}})
    serving = threading.Thread(target=slow.serve, args=(stop, 20), daemon=True)
    serving.start()
    try:
        with RpcClient(timeout=2.0, retries=0, context=ctx) as rpc:
            assert rpc.call(slow.endpoint, "ping").get("who") == "slow"  # connected
            told: dict[int, Reply] = {}
            for i, s in enumerate(made[:5]):
                rpc.send(s.endpoint, "ping", on_reply=lambda r, i=i: told.__setitem__(i, r))
            assert rpc.call(slow.endpoint, "ping").get("who") == "slow"
            assert {i: r.get("who") for i, r in told.items()} == {i: i for i in range(5)}  # read by the call
            assert rpc.call(slow.endpoint, "ping", timeout=0.05, n=1).timed_out
            assert rpc.call(slow.endpoint, "ping", n=2).get("n") == 2  # its own reply, not the late one
    finally:
        stop.set()
        slow.wake()
        serving.join(timeout=5)
        slow.close()
