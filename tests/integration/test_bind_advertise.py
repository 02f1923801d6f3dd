"""Bound and advertised apart, on loopback: nodes and clients bind every interface and tell the ring
127.0.0.2 (also this machine's loopback), as a container binds 0.0.0.0 and advertises its host's name."""

from __future__ import annotations

import json
import subprocess
import sys

from chordpub import Client
from chordpub.launcher import wait_for
from dht.ids import key_id
from tests.conftest import one_error_line, run_cli

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
    assert info["bind"] == "0.0.0.0:" + ring.nodes[0].endpoint.rsplit(":", 1)[1]
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
