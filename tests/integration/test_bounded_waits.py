"""Every command that needs a live peer ends within its --connect-timeout, with one line and exit status
2; a subscriber that receives nothing says so; losing the entry node mid-run is not fatal.

To see them fail: add `time.sleep(4)` after the connect timeout in `chordpub.cli_common.dht_client`
(the deadline test reports how long the command took against the interpreter's start-up); make
the registrar keep a dead owner's arc after a placement there failed (`pass` for the
`self.arcs.forget(owner)` of a failed reply in pubsub/registrar.py `_apply`: the subscription made
after the entry node died goes to that node again and again, "could not subscribe ... within 10s");
make `DhtClient.learn_entry_points` return at once (a ring client whose entry node is gone then
starts its lookups only there, and finds nothing)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import zmq

from chordpub import Client
from chordpub.launcher import wait_for
from dht.client import DhtClient, DhtError
from dht.ids import in_half_open, key_id, owner_of
from tests.conftest import one_error_line, run_cli, start_module_ring

SLACK = 3.0  # on top of the deadline and of an interpreter's start-up measured beside it (a loaded
# machine stretches a command's imports more than the bare start-up measured); a 4 s wait still shows


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from start_module_ring(tmp_path_factory, "bounded-ring", 4)


@pytest.fixture
def dead_endpoint() -> str:
    """A loopback port nobody listens on."""
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    sock.close(linger=0)
    return f"127.0.0.1:{port}"


@pytest.mark.parametrize("command", [
    ("sub", "--via", "{dead}", "--topic", "t"),  # no --seconds: it used to wait forever
    ("sub", "--via", "{dead}", "--topic", "t", "--seconds", "30"),
    ("pub", "--via", "{dead}", "--topic", "t", "--message", "x"),
    ("topic", "info", "t", "--via", "{dead}"),
    ("ring", "check", "{dead}"),
    ("node", "info", "{dead}"),
    ("node", "start", "--port", "0", "--join", "{dead}"),
    ("node", "lookup", "{dead}", "k"),
    ("node", "lookups", "{dead}", "--keys", "{keys}"),
    ("node", "leave", "{dead}"),
])
def test_a_dead_peer_ends_within_the_connect_timeout_in_one_line(command, dead_endpoint, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("a\nb\n")
    args = [a.format(dead=dead_endpoint, keys=keys) for a in command] + ["--connect-timeout", "1.5"]
    startup = interpreter_startup()
    t0 = time.monotonic()
    proc = run_cli(*args, timeout=60)
    took = time.monotonic() - t0
    startup = max(startup, interpreter_startup())  # the machine's load, before and after
    one_error_line(proc, dead_endpoint, "1.5s")
    assert proc.returncode == 2  # the contract's exit status for a peer that does not answer
    assert took < 1.5 + startup + SLACK, f"{' '.join(command)} took {took:.1f}s (start-up {startup:.1f}s)"


def interpreter_startup() -> float:
    """What starting and ending the interpreter costs here, now."""
    t0 = time.monotonic()
    assert run_cli("--version").returncode == 0
    return time.monotonic() - t0


def test_the_client_constructor_has_a_deadline(dead_endpoint):
    t0 = time.monotonic()
    with pytest.raises(DhtError, match=r"no reply from .* within 0.5s"):
        Client(dead_endpoint, connect_timeout=0.5)
    assert time.monotonic() - t0 < 3


def test_a_subscriber_that_receives_nothing_exits_non_zero(ring):
    via = ring.nodes[0].endpoint
    proc = run_cli("sub", "--via", via, "--topic", "nobody-publishes-here", "--seconds", "1", "--json")
    assert proc.returncode == 1, proc.stderr
    assert '"received": 0' in proc.stdout  # the summary is still printed
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "received nothing" in lines[0] and "0 publishers" in lines[0], proc.stderr


def test_losing_the_entry_node_mid_run_is_retried_through_other_nodes(ring_factory):
    """The subscriber enters through a node that then dies (neither the topic's owner nor a replica):
    it keeps its registration alive and keeps receiving, and subscribes to a new topic through the
    other nodes it learnt.

    A ring of its own: a module ring that outlives a killed node keeps calling its address, and a
    node another test starts later on that recycled port (same address, so the same id) would be
    taken into both rings."""
    ring = ring_factory()
    ring.start(4)
    ring.wait_consistent(60)
    topic = "survives-its-entry"
    ids = sorted(n.id for n in ring.nodes)
    owner_at = next((i for i, x in enumerate(ids) if x >= key_id(topic)), 0)
    spare = {ids[(owner_at + k) % len(ids)] for k in range(3)}  # owner and its two replicas
    entry = next(n for n in ring.nodes if n.id not in spare)
    other = next(n for n in ring.nodes if n.id in spare)
    received: list[int] = []
    with Client(other.endpoint, heartbeat=0.2) as pub_client, Client(entry.endpoint, heartbeat=0.2) as sub_client:
        sub_client.subscribe(topic, callback=lambda m: received.append(int(m.text)))
        seq = [0]

        def send_until(n: int) -> bool:
            seq[0] += 1
            pub_client.publish(topic, str(seq[0]))
            return len(received) >= n

        wait_for(lambda: send_until(3), 20, interval=0.05, what="first messages")
        ring.kill(entry)
        before = len(received)
        wait_for(lambda: send_until(before + 20), 20, interval=0.05, what="messages after the entry node died")
        # past three heartbeats after the kill: the lease was renewed without the entry node
        mark, seen = time.monotonic() + 1.5, [0]

        def delivered_after_a_lease() -> bool:
            seq[0] += 1
            pub_client.publish(topic, str(seq[0]))
            if time.monotonic() < mark:
                seen[0] = len(received)
                return False
            return len(received) > seen[0]

        wait_for(delivered_after_a_lease, 20, interval=0.05, what="delivery a lease after the entry node died")
        # renewals go straight to the topic's owner. A topic in the dead entry node's arc is sent there
        # first (the client learnt that arc from the entry node's links when it started); once that
        # fails the arc is forgotten, and the topic's owner found again: from an arc another reply
        # taught, or by a lookup from another node the client learnt (the dead entry node cannot start
        # one). Whatever the ring's ids, the later topic is chosen so
        before_entry = ids[(ids.index(entry.id) - 1) % len(ids)]
        later_topic = next(t for t in (f"{topic}-later-{i}" for i in range(10_000))
                           if in_half_open(key_id(t), before_entry, entry.id))
        later: list[str] = []
        sub_client.subscribe(later_topic, callback=lambda m: later.append(m.text))
        wait_for(lambda: pub_client.publish(later_topic, "x") and bool(later), 20, interval=0.05,
                 what="a topic subscribed after the entry node died")


def test_lookups_start_at_the_nodes_learnt_once_the_entry_node_is_gone(ring, dead_endpoint):
    """A ring client whose entry node is gone starts its lookups at the nodes it learnt (those a lookup
    passed through, or, for a Client, its entry node's links) and finds the owner; before it learnt
    any, the lookup fails and says so, never raising."""
    with DhtClient(dead_endpoint, timeout=0.3, retries=0) as client:
        alone = client.lookup_id(12345)
        assert not alone.ok and not alone.path, alone
        client.learn_entry_points([ring.nodes[1].endpoint, ring.nodes[2].endpoint])
        found = client.lookup_id(12345)
        assert found.ok and found.owner is not None, found
        ids = sorted(n.id for n in ring.nodes)
        assert found.owner.id == owner_of(ids, 12345)


def test_ring_check_steps_over_a_dead_node_while_the_ring_heals(ring_factory):
    """Right after a node stops answering, before any node has given up on it, the check still walks
    every live node and names the silent one instead of reporting a short ring. (Stopped, not killed:
    a killed process's peers see its connection close and step over it at their next round, which a
    loaded machine can bring before the check; a silent one is given up only after two missed calls.)"""
    ring = ring_factory(stabilize=1.5)
    ring.start(5)
    ring.wait_consistent(60, fingers=True)  # full successor lists: the walk steps over through them
    start = ring.nodes[0]
    order = sorted(ring.nodes, key=lambda n: n.id)
    victim = order[(order.index(start) + 1) % len(order)]  # the walk's first step: stopping there counts 1
    os.kill(victim.proc.pid, signal.SIGSTOP)
    try:
        report = ring.check(start.endpoint, expected=4, timeout=0.6, step_over=True)
        assert report["nodes"] == 4 and not report["consistent"], report
        assert any(victim.endpoint in p for p in report["problems"]), report
        proc = run_cli("ring", "check", start.endpoint, "--json")  # the command walks the same way
        assert json.loads(proc.stdout)["nodes"] == 4, proc.stdout
    finally:
        os.kill(victim.proc.pid, signal.SIGCONT)


def test_a_lookup_from_a_start_that_does_not_answer_fails_and_does_not_raise():
    """A node can die between being chosen as a lookup's start and being asked: the lookup fails
    (`ok` False, within the client's timeout), it does not raise, even before the client has learned
    the ring's id width. (The chaos test's lookup threads died of exactly this.)"""
    from dht.client import DhtClient
    from tests.helpers.ports import free_ports

    (port,) = free_ports(1)
    dead = f"127.0.0.1:{port}"
    with DhtClient(dead, timeout=0.2, retries=0) as client:
        t0 = time.monotonic()
        found = client.lookup_id(12345, start=dead)
        assert not found.ok and found.error and time.monotonic() - t0 < 2
