"""topologies/mininet_net.py on real Mininet: a graph becomes hosts and bridges, and nothing is left behind."""

from __future__ import annotations

import re

import pytest

from topologies.graphs import build
from topologies.mininet_net import mininet_network

pytestmark = pytest.mark.mininet


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


def test_userspace_switch_delays_every_link_once_each_way(clean_host):
    """tree depth 2: h1 -> s2 -> s1 -> s3 -> h4 crosses four 3 ms links, so a ping's round trip is >= 24 ms;
    h1 -> s2 -> h2 crosses two, >= 12 ms. The userspace switch is what runs where netem is missing."""
    with mininet_network(build("tree,depth=2,fanout=2,delay=3ms"), emulation="userspace") as net:
        assert net.emulation == "userspace"
        h1, h2, _, h4 = net.hosts()
        for other, links in ((h2, 2), (h4, 4)):
            out = h1.cmd(f"ping -c 4 -i 0.2 -W 2 {other.IP()}")
            rtts = [float(x) for x in re.findall(r"time=([\d.]+) ms", out)]
            assert len(rtts) == 4, out
            assert min(rtts) >= 2 * links * 3.0, out
            assert min(rtts) < 2 * links * 3.0 + 10, out  # and not much more


def test_bulk_tcp_crosses_the_userspace_switch_intact(clean_host):
    """Checksum-offloaded and GSO frames are forwarded as the kernel handed them over (vnet header)."""
    with mininet_network(build("single,2,delay=1ms"), emulation="userspace") as net:
        h1, h2 = net.hosts()
        server = h2.popen(["python3", "-c", (
            "import socket,hashlib;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
            f"s.bind(('{h2.IP()}',9000));s.listen(1);c,_=s.accept();h=hashlib.sha256()\n"
            "while (b:=c.recv(65536)): h.update(b)\nprint(h.hexdigest())")], text=True)
        client = h1.popen(["python3", "-c", (
            "import socket,hashlib,os,time\nd=os.urandom(4_000_000)\n"
            "for _ in range(100):\n"
            f"    try: s=socket.create_connection(('{h2.IP()}',9000)); break\n"
            "    except OSError: time.sleep(0.05)\n"
            "s.sendall(d); s.close(); print(hashlib.sha256(d).hexdigest())")], text=True)
        try:
            sent, _ = client.communicate(timeout=30)
            got, _ = server.communicate(timeout=30)
        finally:
            for p in (client, server):
                if p.poll() is None:
                    p.kill()
                    p.wait()
        assert len(got.strip()) == 64 and got.strip() == sent.strip()


def test_userspace_switch_drops_with_the_links_loss(clean_host):
    """single,2 with 10% loss per link: a ping crosses four lossy link traversals (there and back),
    so about 1 - 0.9**4 = 34% of them are lost."""
    with mininet_network(build("single,2,delay=0.5ms,loss=10"), emulation="userspace", seed=3) as net:
        h1, h2 = net.hosts()
        h1.cmd(f"ping -c 3 -i 0.05 -W 1 {h2.IP()}")  # ARP settled first (it crosses lossy links too)
        out = h1.cmd(f"ping -c 300 -i 0.01 -W 1 {h2.IP()}")
        lost = float(re.search(r"([\d.]+)% packet loss", out).group(1))
        assert 22 <= lost <= 46, out[-300:]
