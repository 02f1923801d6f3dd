"""topologies/mininet_net.py on real Mininet: a graph becomes hosts and bridges, and nothing is left behind."""

from __future__ import annotations

import re

import pytest

from tests.conftest import IN_CI
from topologies.graphs import build
from topologies.mininet_net import MininetError, check_runnable, leftovers, mininet_network

pytestmark = pytest.mark.mininet


@pytest.fixture
def clean_host():
    try:
        check_runnable()
    except MininetError as exc:
        if IN_CI:
            pytest.fail(f"Mininet is needed under CI: {exc}")
        pytest.skip(str(exc))
    before = leftovers()
    yield
    assert leftovers() == before, "bridges, namespaces or mininet processes were left behind"


@pytest.mark.parametrize("spec", ["single,3,delay=0", "tree,depth=2,fanout=2,delay=0", "waxman,n=5,seed=2,delay=0"])
def test_every_host_reaches_every_other_and_the_network_goes_away(clean_host, spec):
    g = build(spec)
    with mininet_network(g) as net:
        hosts = net.hosts()
        assert len(hosts) == sum(1 for _, k in g.nodes(data="kind") if k == "host")
        first = hosts[0]
        for other in hosts[1:]:
            out = first.cmd(f"ping -c 1 -W 2 {other.IP()}")
            assert re.search(r"1 received", out), out


def test_a_failure_inside_the_block_still_tears_down(clean_host):
    with pytest.raises(RuntimeError, match="inside"), mininet_network(build("single,2,delay=0")):
        raise RuntimeError("a failure inside the block")
