"""A partition heals into one ring (dht/prober.py): 8 nodes on two switches, the link between them cut and
restored, while a reliable subscriber on one side follows a publisher on the other, and a pattern
subscriber on one side meets, after the heal, a topic that appeared on the other during the cut. To see
it fail, start the nodes with `--probe-every 0` (no probes, so no merge): after the heal the sides stay
two rings, each consistent alone, and the wait times out. Or make a prefix record's watchers blind to
what it announces (`Announcements.apply` taking no field set): the pattern subscriber gets nothing of
the new topic. (How the topic reaches it after the heal has several ways: the records merged by the
hand-over tell their watchers, the watchers' renewals compare epochs, and a field whose owner changed is
placed again; no one of them taken away fails this test.) Or let `fork_on_host` return None: the
nodes are exec'd afresh on their hosts ("a node exec'd afresh").
"""

from __future__ import annotations

import json
import time

import pytest

from dht.processes import wait_for
from dht.spawner import ForkedProcess
from topologies.partition import partitioned_ring

pytestmark = pytest.mark.mininet
STABILIZE = 0.5


def follow_topic(ring, host, topic: str, out, count: int):  # noqa: ANN001, ANN201 - Mininet host, Popen
    """A reliable subscriber of `topic` (a pattern too) on `host`; returns its process once subscribed."""
    ready = out.with_suffix(".ready")
    follow = ring.popen(host, "-m", "tests.helpers.follow", "--via", ring.endpoint(host), "--topic", topic,
                        "--count", str(count), "--seconds", "140", "--out", str(out), "--host", host.IP(),
                        "--ready", str(ready), log=f"follow-{out.stem}.log")

    def subscribed() -> bool:
        if follow.poll() is not None:
            raise AssertionError(f"the subscriber of {topic} exited ({follow.returncode}) before it was subscribed")
        return ready.exists()

    wait_for(subscribed, 30, interval=0.05, what=f"the subscriber of {topic} subscribed")
    return follow


def start_stream(ring, sub, pub, out, count: int, rate: float):  # noqa: ANN001, ANN201 - Mininet hosts, Popen
    """A reliable subscriber on host `sub`, then, once it is subscribed, a publisher on host `pub` (history
    for the whole stream), each entering through its own host's node; returns the subscriber's process.
    (The cut that follows must not race the subscription: a subscriber whose topic's owner is cut off
    mid-subscribe waits for its side to heal, several periods a lost successor, and may run out of time.)"""
    follow = follow_topic(ring, sub, "across", out, count)
    ring.popen(pub, "-m", "chordpub", "pub", "--via", ring.endpoint(pub), "--topic", "across", "--host",
               pub.IP(), "--reliable", "--history", str(2 * count), "--count", str(count), "--rate", str(rate),
               "--linger", "60", log="pub.log")
    return follow


def assert_stream_whole(follow, out, count: int) -> None:  # noqa: ANN001 - Popen
    """Every message of the stream reached the subscriber, in order, once."""
    follow.wait(timeout=150)
    got = json.loads(out.read_text())
    assert follow.returncode == 0, got["received"]
    (seqs,) = got["seqs"].values()
    assert seqs == list(range(1, count + 1))


def test_an_even_partition_heals_into_one_ring_and_a_reliable_stream_loses_nothing(clean_host, tmp_path):
    with partitioned_ring(4, 4, tmp_path, STABILIZE) as ring:
        ring.start_nodes()
        a, b = ring.side_a, ring.side_b
        assert ring.wait_ring(a[0], 8)["seconds"] is not None
        keys = tmp_path / "keys.txt"
        keys.write_text("\n".join(f"key-{i}" for i in range(100)) + "\n")
        # a reliable subscriber on one side, a publisher on the other, both before the cut
        out = tmp_path / "follow.json"
        follow = start_stream(ring, b[1], a[1], out, 600, 15)
        pattern_out = tmp_path / "pattern.json"
        pattern = follow_topic(ring, b[2], "cut/>", pattern_out, 50)  # no topic under it yet
        ring.link(up=False)
        cut_at = time.monotonic()
        sides = [ring.wait_ring(a[0], 4, timeout=20), ring.wait_ring(b[0], 4, timeout=20)]
        assert all(s["seconds"] is not None for s in sides), sides  # each side a ring of its own, as it should be
        assert ring.owners(a[0], keys) != ring.owners(b[0], keys)
        # a topic that appears on the other side while it is cut off
        ring.popen(a[2], "-m", "chordpub", "pub", "--via", ring.endpoint(a[2]), "--topic", "cut/appeared", "--host",
                   a[2].IP(), "--reliable", "--history", "100", "--count", "50", "--rate", "10", "--linger", "90",
                   log="pub-cut.log")
        while time.monotonic() - cut_at < 20:
            ring.wait_ring(a[0], 4, timeout=1)  # the cut lasts 20 s; meanwhile each side stays whole
        ring.link(up=True)
        healed_at = time.time()
        healed = ring.wait_ring(a[0], 8, timeout=60, since=healed_at, keys=keys)
        assert healed["seconds"] is not None, healed
        periods = healed["seconds"] / STABILIZE
        print(f"one ring of 8 again {healed['seconds']:.2f}s ({periods:.1f} periods) after the heal, "
              f"owners right from one side after {healed['owners_seconds']:.2f}s")
        assert periods <= 10, healed
        # the 100 owners as the other side finds them: the same true owners (the ring both walks saw)
        assert ring.wait_ring(b[2], 8, timeout=30, keys=keys)["seconds"] is not None
        assert_stream_whole(follow, out, 600)
        assert_stream_whole(pattern, pattern_out, 50)  # the new topic, from its first message, after the heal


@pytest.mark.parametrize("a,b", [(1, 7), (3, 5)])
def test_an_uneven_partition_heals_into_one_ring(clean_host, tmp_path, a, b):
    with partitioned_ring(a, b, tmp_path, STABILIZE) as ring:
        ring.start_nodes()
        assert ring.wait_ring(ring.side_a[0], a + b)["seconds"] is not None
        # the nodes were forked from a template on each host (half a CPU-second less each), there
        # (each serves on its host's address)
        assert all(isinstance(p, ForkedProcess) for p in ring.nodes.values()), "a node exec'd afresh"
        # a reliable subscriber on the small side, its publisher on the large one
        out = tmp_path / "follow.json"
        follow = start_stream(ring, ring.side_a[0], ring.side_b[1], out, 100, 20)
        ring.link(up=False)
        assert ring.wait_ring(ring.side_a[0], a, timeout=20)["seconds"] is not None
        assert ring.wait_ring(ring.side_b[0], b, timeout=20)["seconds"] is not None
        keys = tmp_path / "keys.txt"
        keys.write_text("\n".join(f"key-{i}" for i in range(100)) + "\n")
        ring.link(up=True)
        healed_at = time.time()
        healed = ring.wait_ring(ring.side_b[0], a + b, timeout=60, since=healed_at, keys=keys)
        assert healed["seconds"] is not None, healed
        print(f"{a}|{b}: one ring again {healed['seconds']:.2f}s ({healed['seconds'] / STABILIZE:.1f} periods) "
              f"after the heal, owners right from side b after {healed['owners_seconds']:.2f}s")
        assert healed["seconds"] / STABILIZE <= 10
        # from the other side, the same 100 true owners
        assert ring.wait_ring(ring.side_a[0], a + b, timeout=30, keys=keys)["seconds"] is not None
        assert_stream_whole(follow, out, 100)


def test_a_partition_during_churn_heals_into_one_ring(clean_host, tmp_path):
    """While the link is cut, each side loses a node (SIGKILL) and gains one it never met on the other
    side; right after the heal another node dies. One ring of the 8 live nodes, owners right from both."""
    with partitioned_ring(4, 4, tmp_path, STABILIZE) as ring:
        ring.start_nodes()
        a, b = ring.side_a, ring.side_b
        assert ring.wait_ring(a[0], 8)["seconds"] is not None
        keys = tmp_path / "keys.txt"
        keys.write_text("\n".join(f"key-{i}" for i in range(100)) + "\n")
        out = tmp_path / "follow.json"
        follow = start_stream(ring, a[0], b[0], out, 100, 20)  # on the two nodes that live throughout
        ring.link(up=False)
        ring.kill_node(a[1])
        ring.start_node(a[2], 5556, ring.endpoint(a[0]))
        ring.kill_node(b[1])
        ring.start_node(b[2], 5556, ring.endpoint(b[0]))
        assert ring.wait_ring(a[0], 4, timeout=30)["seconds"] is not None
        assert ring.wait_ring(b[0], 4, timeout=30)["seconds"] is not None
        ring.link(up=True)
        healed_at = time.time()
        ring.kill_node(a[3])
        healed = ring.wait_ring(b[0], 7, timeout=60, since=healed_at, keys=keys)
        assert healed["seconds"] is not None, healed
        print(f"during churn: one ring of 7 {healed['seconds']:.2f}s ({healed['seconds'] / STABILIZE:.1f} periods) "
              f"after the heal, owners right after {healed['owners_seconds']:.2f}s")
        assert healed["seconds"] / STABILIZE <= 10
        assert ring.wait_ring(a[0], 7, timeout=30, keys=keys)["seconds"] is not None
        assert_stream_whole(follow, out, 100)
