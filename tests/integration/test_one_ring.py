"""One ring, always (dht/membership.py, dht/prober.py): two rings that learn of each other become one with
both sides' registrations; a split is reported by `ring check`; seeds and restarts in any order make one
ring.

To see these fail with the feature taken away: make `Prober.merge` return at its top (a node that finds
another ring does not join it): the merge tests time out with two rings; make `Replication.handover` return at
its top: the keys put on either side before the merge are not found after it (records come back
through their clients' renewals; keys only through the ring's hand-overs); drop `split_problems` from
`dht/ringcheck.check_ring` and the split test's check reports a consistent ring.
"""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

from chordpub import Client
from chordpub.launcher import LocalRing, await_ready, spawn_node, stop_processes, wait_for
from dht.client import DhtClient
from pubsub.directory import topic_info
from tests.conftest import PERIOD, run_cli
from tests.helpers.ports import free_ports

HEARTBEAT = 0.3


def owners(via: str, keys: list[str]) -> list[int | None]:
    with DhtClient(via, timeout=1.0) as client:
        return [f.owner.id if f.ok else None for f in (client.lookup(k) for k in keys)]


def test_two_rings_of_any_sizes_become_one_with_both_sides_registrations(ring_factory):
    a, b = ring_factory(), ring_factory()
    a.start(3)
    b.start(5)
    a.wait_consistent(30)
    b.wait_consistent(30)
    keys = [f"key-{i}" for i in range(100)]
    assert owners(a.nodes[0].endpoint, keys) != owners(b.nodes[0].endpoint, keys)  # two rings, two answers
    stored = {f"{side}-key-{i}": f"{side}{i}".encode() for side in "ab" for i in range(50)}
    for side, ring in (("a", a), ("b", b)):  # keys nobody renews: only the ring's hand-overs can move them
        with DhtClient(ring.nodes[0].endpoint) as dht:
            for k, v in stored.items():
                if k.startswith(side):
                    dht.put(k, v)
    clients = [Client(ring.nodes[-1].endpoint, heartbeat=HEARTBEAT) for ring in (a, b)]
    try:
        subs = [c.subscribe("both", reliable=True) for c in clients]
        for i, c in enumerate(clients):
            c.advertise("both", reliable=True, history=1000)
            for n in range(20):
                c.publish("both", f"{i}-{n}")
        # a node that knows both rings (it joins a, and has b's first node among its seeds)
        a.add(join=f"{a.nodes[0].endpoint},{b.nodes[0].endpoint}")
        a.nodes += b.nodes
        t0 = time.monotonic()
        report, _ = a.wait_consistent(60)
        print(f"{len(a.nodes)} nodes from rings of 3 (+1) and 5 merged in {time.monotonic() - t0:.2f}s")
        assert report["nodes"] == 9
        wait_for(lambda: owners(a.nodes[0].endpoint, keys) == owners(b.nodes[0].endpoint, keys), 30,
                 what="both sides agreeing on the owners of 100 keys")
        with DhtClient(a.nodes[0].endpoint) as dht:
            missing: list[str] = []

            def all_found() -> bool:
                missing[:] = [k for k, v in stored.items() if dht.get(k) != v]
                return not missing

            try:
                wait_for(all_found, 30, what="every key put on either side before the merge read from the one ring")
            except TimeoutError as exc:
                raise AssertionError(f"{len(missing)} keys not found after the merge: {missing[:8]}") from exc
        for via in (a.nodes[0].endpoint, b.nodes[0].endpoint):
            with DhtClient(via) as dht:
                wait_for(lambda d=dht: len(topic_info(d, "both")["publishers"]) == 2, 30,
                         what="one record with both publishers")
        for i, c in enumerate(clients):
            for n in range(20, 30):
                c.publish("both", f"{i}-{n}")
        for sub in subs:
            got: dict[str, list[int]] = {}
            deadline = time.monotonic() + 30
            while sum(map(len, got.values())) < 60 and time.monotonic() < deadline:
                msg = sub.get(timeout=0.5)
                if msg is not None:
                    got.setdefault(msg.publisher, []).append(msg.seq)
            assert sorted(got) == sorted(c.id for c in clients), got.keys()
            assert all(seqs == list(range(1, 31)) for seqs in got.values()), got  # all, in order, once
    finally:
        for c in clients:
            c.close()


def restart_on_its_port(ring: LocalRing, node, workdir: Path, name: str, options: dict):  # noqa: ANN001, ANN201
    """SIGKILL `node`, wait for the others to heal around it, start a node on its address again with
    `options` (no --join) and return that process; the caller stops it or adds it to the ring."""
    port = int(node.endpoint.rsplit(":", 1)[1])
    ring.kill(node)
    ring.nodes.remove(node)
    ring.wait_consistent(30)
    return spawn_node(workdir, name, port=port, options={"stabilize": PERIOD, **options})


def test_ring_check_fails_on_two_rings_and_names_the_other_rings_member(ring_factory):
    ring = ring_factory(probe_every=0)  # no probes: the split stays for the check to see
    ring.start(3)
    ring.wait_consistent(30)
    gone = ring.nodes[2]
    # the same node started again on its address, without --join: a ring of its own beside one it knew
    alone = restart_on_its_port(ring, gone, ring.workdir, "alone", {"probe_every": 0})
    try:
        await_ready(alone, ring.workdir, "alone")
        proc = run_cli("ring", "check", ring.nodes[0].endpoint, "--json")
        assert proc.returncode == 1, proc.stdout
        report = json.loads(proc.stdout)
        assert not report["consistent"] and report["nodes"] == 2
        assert any(gone.endpoint in p and "split" in p for p in report["problems"]), \
            report["problems"]
    finally:
        stop_processes([alone])


def seeded_ring(tmp_path: Path, ports: list[int], order: list[int]) -> tuple[LocalRing, list]:
    """Nodes on `ports`, every one given the same seed list (all of them), started at once in `order`."""
    seeds = ",".join(f"127.0.0.1:{p}" for p in ports)
    ring = LocalRing(tmp_path)
    procs = [None] * len(ports)
    for i in order:
        procs[i] = spawn_node(tmp_path, f"n{i}", port=ports[i], join=seeds,
                              options={"stabilize": PERIOD, "data_dir": tmp_path / f"n{i}-data"})
    ring.nodes = [await_ready(procs[i], tmp_path, f"n{i}") for i in range(len(ports))]
    return ring, procs


def test_seeds_started_and_restarted_in_any_order_make_one_ring(tmp_path: Path):
    rng = random.Random(25)
    for run in range(10):
        work = tmp_path / f"run{run}"
        work.mkdir()
        ports = free_ports(5)
        ring, procs = seeded_ring(work, ports, rng.sample(range(5), 5))
        try:
            ring.wait_consistent(30)
            # the first seed, restarted as docs/deploy.md starts a first node: its data directory, no --join
            back = restart_on_its_port(ring, ring.nodes[0], work, "n0-again", {"data_dir": work / "n0-data"})
            procs.append(back)
            ring.nodes.insert(0, await_ready(back, work, "n0-again"))
            report, took = ring.wait_consistent(30)
            assert report["nodes"] == 5, (run, report)
        finally:
            stop_processes([p for p in procs if p is not None])


def test_join_tries_each_seed_in_turn(ring_factory):
    ring = ring_factory()
    ring.start(2)
    dead = f"127.0.0.1:{free_ports(1)[0]}"
    ring.add(join=f"{dead},{ring.nodes[1].endpoint}")
    report, _ = ring.wait_consistent(30)
    assert report["nodes"] == 3
    # a node given only dead seeds, none of them itself, was told to join a ring that is not there
    proc = run_cli("node", "start", "--port", "0", "--join", dead, "--join", f"127.0.0.1:{free_ports(1)[0]}",
                   "--connect-timeout", "1")
    assert proc.returncode == 2 and "could not join the ring via" in proc.stderr, proc.stderr


def test_a_restarted_seed_without_join_or_data_rejoins_through_the_ring_that_remembers_it(ring_factory):
    """The members of a ring probe the seed they knew: a seed restarted bare forms a ring of one that is
    merged back (the case docs/deploy.md's first node met)."""
    ring = ring_factory()
    ring.start(4)
    ring.wait_consistent(30)
    back = restart_on_its_port(ring, ring.nodes[0], ring.workdir, "seed-again", {})
    ring.nodes.insert(0, await_ready(back, ring.workdir, "seed-again"))
    report, took = ring.wait_consistent(30)
    assert report["nodes"] == 4
    print(f"the bare seed was merged back in {took:.2f}s ({took / PERIOD:.1f} periods)")
    back.send_signal(signal.SIGTERM)
