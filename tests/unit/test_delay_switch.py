"""topologies/delay_switch.Forwarder without sockets: learning, flooding, each link's delay once, loss."""

from __future__ import annotations

import pytest

from topologies.delay_switch import Forwarder, Port

A, B, C = (bytes([0, 0, 0, 0, 0, i]) for i in (1, 2, 3))
BROADCAST = b"\xff" * 6


def frame(dst: bytes, src: bytes) -> bytes:
    return dst + src + b"\x08\x00" + b"payload"


def test_unknown_and_broadcast_frames_flood_then_learned_macs_go_to_one_port():
    fw = Forwarder([Port("p0", 5), Port("p1", 5), Port("p2", 7)])
    flood = fw.route(0, frame(BROADCAST, A), now=100.0)
    assert sorted(out for _, out in flood) == [1, 2]
    # host link in (5 ms) + host link out (5 or 7 ms)
    assert dict((out, due) for due, out in flood) == {1: pytest.approx(100.010), 2: pytest.approx(100.012)}
    assert fw.route(1, frame(A, B), now=200.0) == [(pytest.approx(200.010), 0)]  # A was learned on port 0
    assert fw.route(0, frame(B, A), now=300.0) == [(pytest.approx(300.010), 1)]  # and B on port 1
    assert fw.route(0, frame(A, C), now=1.0) == []  # never back out of the port it came in by


def test_a_link_between_switches_is_delayed_by_the_sender_only():
    """Two switches joined by a 4 ms link, hosts on 1 ms links: host to host costs 1 + 4 + 1 ms."""
    left = Forwarder([Port("l-h", 1), Port("l-r", 4, to_host=False)])
    right = Forwarder([Port("r-l", 4, to_host=False), Port("r-h", 1)])
    (due1, out1), = left.route(0, frame(BROADCAST, A), now=0.0)
    assert out1 == 1 and due1 == pytest.approx(0.005)  # 1 ms in from the host + 4 ms out on the trunk
    (due2, out2), = right.route(0, frame(BROADCAST, A), now=due1)
    assert out2 == 1 and due2 == pytest.approx(0.006)  # the trunk's 4 ms is not paid twice


def test_loss_follows_the_percentage_and_the_seed():
    def survivors(seed):
        fw = Forwarder([Port("p0", 0, 10.0), Port("p1", 0, 10.0)], seed=seed)
        fw.route(1, frame(BROADCAST, B), 0.0)
        return [bool(fw.route(0, frame(B, A), 0.0)) for _ in range(20_000)]

    kept = survivors(7)
    assert kept == survivors(7)
    assert sum(kept) / len(kept) == pytest.approx(0.81, abs=0.015)  # two 10% links: 0.9 * 0.9
    lossless = Forwarder([Port("p0"), Port("p1")])
    assert all(lossless.route(0, frame(BROADCAST, A), 0.0) for _ in range(1000))


def test_runt_frames_are_dropped():
    assert Forwarder([Port("p0"), Port("p1")]).route(0, b"\x00" * 13, 0.0) == []


@pytest.mark.parametrize("text, expected", [
    ("s1-eth1=5:0:host", Port("s1-eth1", 5.0, 0.0, True)),
    ("s1-eth2=0.5:2.5:switch", Port("s1-eth2", 0.5, 2.5, False)),
    ("s1-eth3", Port("s1-eth3")),
])
def test_port_specs_round_trip(text, expected):
    assert Port.parse(text) == expected
    assert Port.parse(expected.spec()) == expected


@pytest.mark.parametrize("text", ["=5", "s1=x", "s1=5:101", "s1=-1", "s1=5:0:router", "s1=1:2:host:4"])
def test_bad_port_specs_are_refused(text):
    with pytest.raises(ValueError, match="bad port"):
        Port.parse(text)
