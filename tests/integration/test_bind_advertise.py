"""Bound and advertised apart, on loopback: nodes and clients bind every interface and tell the ring
127.0.0.2 (also this machine's loopback), as a container binds 0.0.0.0 and advertises its host's name.

To see it fail, make `dht.transport.RpcServer` bind the advertised address instead of the bound one
while still reporting `bind: 0.0.0.0:P`: the node is no longer reached through 127.0.0.3, an address
it does not advertise ("no reply from 127.0.0.3:P within 5s")."""

from __future__ import annotations

import json
import subprocess
import sys

from chordpub import Client
from chordpub.launcher import wait_for
from dht.ids import key_id
from tests.conftest import one_error_line, run_cli
from tests.helpers.ports import free_consecutive

ADVERTISED = "127.0.0.2"


def test_nodes_and_clients_bound_on_every_interface_are_reached_at_the_advertised_address(ring_factory, procs,
                                                                                          tmp_path):
    ring = ring_factory(bind="0.0.0.0", advertise=ADVERTISED)
    ring.start(3)
    ring.wait_consistent(60)
    for node in ring.nodes:  # the id is the hash of the advertised endpoint
        assert node.endpoint.startswith(f"{ADVERTISED}:") and node.id == key_id(node.endpoint)
    info = json.loads(run_cli("node", "info", ring.nodes[0].endpoint, "--json").stdout)
    assert info["endpoint"] == ring.nodes[0].endpoint
    port = ring.nodes[0].endpoint.rsplit(":", 1)[1]
    assert info["bind"] == f"0.0.0.0:{port}"
    # bound on every interface indeed: reached through an address it does not advertise
    other = run_cli("node", "info", f"127.0.0.3:{port}", "--json")
    assert other.returncode == 0 and json.loads(other.stdout)["endpoint"] == ring.nodes[0].endpoint, other.stderr
    check = json.loads(run_cli("ring", "check", ring.nodes[1].endpoint, "--json").stdout)
    assert check["consistent"] and {m["bind"].split(":")[0] for m in check["members"]} == {"0.0.0.0"}

    topic = "far-away"
    out = tmp_path / "sub.json"
    with Client(ring.nodes[0].endpoint, bind="0.0.0.0", advertise=ADVERTISED) as publisher:
        publisher.advertise(topic)
        sub = subprocess.Popen([sys.executable, "-m", "chordpub", "sub", "--via", ring.nodes[2].endpoint,
                                "--topic", topic, "--count", "5", "--seconds", "60", "--json",
                                "--bind", "0.0.0.0", "--advertise", ADVERTISED],
                               stdout=out.open("w"), stderr=subprocess.PIPE, text=True)
        try:
            def delivered() -> bool:
                publisher.publish(topic, "hello")
                return sub.poll() is not None

            wait_for(delivered, 60, interval=0.1, what="five messages through advertised endpoints")
            listed = json.loads(run_cli("topic", "info", topic, "--via", ring.nodes[1].endpoint, "--json").stdout)
        finally:
            if sub.poll() is None:
                sub.kill()
            sub.wait()
    assert sub.returncode == 0, sub.stderr.read()
    assert json.loads(out.read_text())["received"] >= 5
    (entry,) = listed["publishers"]
    assert entry["endpoint"].startswith(f"{ADVERTISED}:")


def test_an_address_that_cannot_be_bound_or_advertised_is_one_line():
    one_error_line(run_cli("node", "start", "--port", "0", "--bind", "10.1.2.3"), "10.1.2.3")
    one_error_line(run_cli("node", "start", "--port", "0", "--advertise", "0.0.0.0"), "--advertise")
    one_error_line(run_cli("sub", "--via", "127.0.0.1:1", "--topic", "t", "--advertise", "h:0"), "--advertise")
    one_error_line(run_cli("pub", "--via", "127.0.0.1:1", "--topic", "t", "--message", "x", "--bind", "10.1.2.3"),
                   "10.1.2.3")


def json_of(*args: str) -> dict | None:
    proc = run_cli(*args, "--json")
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def test_every_listening_socket_can_be_given_its_port(procs):
    """--port and --ports fix every port a node and a client listen on (a firewall or a container's
    port map needs them): the node's RPC, events, relay in and out, consensus; a client's service and PUB."""
    # one block of seven, split: separate picks could overlap (CI run 31 gave the client's first
    # port the node's own, free when picked, taken by the node before the client bound it)
    port = free_consecutive(7)
    base, client_base = port + 1, port + 5
    node = procs("node", "node", "start", "--port", str(port), "--ports", str(base), "--stabilize", "0.2")
    via = f"127.0.0.1:{port}"
    info = wait_for(lambda: json_of("node", "info", via), timeout=20, what="the node serving")
    ports = sorted(endpoint.partition("#")[0] for endpoint in info["services"].values())  # (consensus: a member id)
    assert ports == [f"127.0.0.1:{base + i}" for i in range(4)], info["services"]
    procs("pub", "pub", "--via", via, "--topic", "ported", "--ports", str(client_base), "--count", "0",
          "--rate", "5")
    topic = wait_for(lambda: (json_of("topic", "info", "ported", "--via", via) or {}).get("publishers"),
                     timeout=20, what="the publisher registered")
    (pub,) = topic
    assert (pub["endpoint"], pub["id"]) == (f"127.0.0.1:{client_base + 1}", f"127.0.0.1:{client_base}"), pub
    assert node.poll() is None
