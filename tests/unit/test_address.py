"""dht/address.py: what a process binds and what it tells others."""

from __future__ import annotations

import socket

import pytest

from dht.address import Listen, outward_address, parse_advertise, resolve


def test_host_alone_binds_and_advertises_it():
    assert resolve("10.0.0.5") == Listen("10.0.0.5", "10.0.0.5")


def test_binding_every_interface_advertises_the_outward_address():
    assert resolve("0.0.0.0", outward=lambda: "10.0.0.7") == Listen("0.0.0.0", "10.0.0.7")
    assert resolve("127.0.0.1", bind="0.0.0.0", outward=lambda: "10.0.0.7") == Listen("0.0.0.0", "10.0.0.7")
    assert resolve("127.0.0.1", bind="*", outward=lambda: "10.0.0.7").bind == "0.0.0.0"


def test_bind_elsewhere_advertises_that_address():
    assert resolve("127.0.0.1", bind="10.0.0.5") == Listen("10.0.0.5", "10.0.0.5")


def test_advertise_wins_and_may_map_the_port():
    assert resolve("127.0.0.1", bind="0.0.0.0", advertise="node1.example") == Listen("0.0.0.0", "node1.example")
    assert resolve("0.0.0.0", advertise="203.0.113.9:7000", outward=lambda: "x") == Listen(
        "0.0.0.0", "203.0.113.9", 7000)


@pytest.mark.parametrize("bad", ["0.0.0.0", "*", ":5555", "host:0", "host:99999", "host:port", "a b"])
def test_an_advertised_address_nobody_can_reach_is_refused(bad):
    with pytest.raises(ValueError, match="--advertise"):
        parse_advertise(bad)


def test_the_outward_address_is_one_of_this_machines():
    address = outward_address()
    socket.inet_aton(address)  # an IPv4 address
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((address, 0))  # assignable here: it is ours
