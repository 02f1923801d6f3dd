"""Consensus on the ring, with real node processes on loopback: every arc's Raft group follows the
ring's replicas (dht/arcs.py, dht/consensus_service.py); keys with compare-and-set and elections go
through them (`chordpub kv`, `chordpub elect`, `chordpub leader`, `Client.elect`)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from chordpub.launcher import wait_for
from dht import wire
from dht.arcs import ARCS, arc_of
from dht.client import DhtClient
from dht.consensus_client import ConsensusClient, NoMajority
from dht.ids import key_id
from dht.transport import RpcClient
from tests.conftest import one_error_line, run_cli, start_module_ring


@pytest.fixture(scope="module")
def ring(tmp_path_factory):  # noqa: ANN001, ANN201
    yield from start_module_ring(tmp_path_factory, "consensus", 3)


def states_of(endpoints: list[str]) -> dict[str, tuple[str, dict]]:
    """Each node's consensus member and its groups as its consensus service reports them
    ({node: (member, {arc: state})})."""
    out = {}
    with DhtClient(endpoints[0]) as dht, RpcClient(timeout=1.0, retries=0) as rpc:
        for e in endpoints:
            member = dht.info(e)["services"]["consensus"]
            reply = rpc.call(member.partition("#")[0], "state")
            out[e] = (member, reply.body["groups"] if reply.ok else {})
    return out


def groups_of(endpoints: list[str]) -> dict[str, dict]:
    """Each node's groups as its consensus service reports them ({node: {arc: state}})."""
    return {e: groups for e, (_member, groups) in states_of(endpoints).items()}


def every_group_has(endpoints: list[str], size: int) -> bool:
    """Every arc's group has one leader, and that leader's configuration has `size` members, each of them
    one of these nodes: a configuration that still names a node killed since has not moved on (its size
    alone would pass, and killing one more of it would leave a group without a majority)."""
    states = states_of(endpoints)
    alive = {member for member, _groups in states.values()}
    led = {}
    for _member, groups in states.values():
        for arc, g in groups.items():
            if g["role"] == "leader":
                led[arc] = g["members"]
    return len(led) == ARCS and all(len(m) == size and set(m) <= alive for m in led.values())


def test_every_arcs_group_takes_the_rings_replicas_and_then_falls_quiet(ring):
    """The first node starts every arc's group alone; as the others join, each group's leader adds
    them (one member at a time), and a group with nothing to do stops its heartbeats: an idle ring's
    consensus sends nothing.

    To see it fail: make `next_change` return None (the groups stay one member: no majority survives
    the first node), or never quiesce (`QUIET_TICKS` = 10**9: messages keep flowing)."""
    endpoints = [n.endpoint for n in ring.nodes]
    wait_for(lambda: every_group_has(endpoints, 3), timeout=30, what="every group with 3 members")

    def quiet() -> bool:
        return all(not g["awake"] for groups in groups_of(endpoints).values() for g in groups.values())
    wait_for(quiet, timeout=30, what="every group quiet")


def test_keys_compare_and_set_through_the_cli(ring):
    """put / get / delete, each read through the log; a compare-and-set at the wrong version, or
    on a missing key with a version, is refused (exit 1, the version found) and writes nothing.

    To see it fail: make `KvMachine._put` ignore "if" (the refused put succeeds)."""
    via = ring.nodes[1].endpoint
    put = run_cli("kv", "put", "cfg/rate", "10", "--via", via, "--json")
    assert put.returncode == 0, put.stderr
    first = json.loads(put.stdout)
    assert first["key"] == "cfg/rate" and first["version"] > 0

    refused = run_cli("kv", "put", "cfg/rate", "11", "--via", via, "--if-version", str(first["version"] + 7),
                      "--json")
    assert refused.returncode == 1 and json.loads(refused.stdout) == {"key": "cfg/rate",
                                                                      "version_found": first["version"]}
    missing = run_cli("kv", "put", "cfg/absent", "1", "--via", via, "--if-version", "3", "--json")
    assert missing.returncode == 1 and json.loads(missing.stdout) == {"key": "cfg/absent", "version_found": 0}
    got = json.loads(run_cli("kv", "get", "cfg/rate", "--via", ring.nodes[2].endpoint, "--json").stdout)
    assert got == {"key": "cfg/rate", "value": "10", "version": first["version"]}

    cas = run_cli("kv", "put", "cfg/rate", "11", "--via", via, "--if-version", str(first["version"]), "--json")
    assert cas.returncode == 0, cas.stderr
    assert json.loads(cas.stdout)["version"] > first["version"]
    assert run_cli("kv", "get", "cfg/rate", "--via", via).stdout == "11\n"
    gone = run_cli("kv", "delete", "cfg/rate", "--via", via, "--json")
    assert json.loads(gone.stdout) == {"key": "cfg/rate", "deleted": True}
    assert json.loads(run_cli("kv", "get", "cfg/rate", "--via", via, "--json").stdout)["value"] is None
    assert json.loads(run_cli("kv", "get", "cfg/absent", "--via", via, "--json").stdout)["version"] == 0


def test_bad_input_is_one_line_and_applies_nothing(ring):
    """Empty or over-long names, a negative lease or version: one line on stderr, exit 2, nothing
    written (the key stays absent)."""
    via = ring.nodes[0].endpoint
    one_error_line(run_cli("kv", "put", "", "v", "--via", via), "key")
    one_error_line(run_cli("kv", "put", "k" * 257, "v", "--via", via), "key")
    one_error_line(run_cli("kv", "put", "bad/version", "v", "--via", via, "--if-version", "-1"), "if-version")
    one_error_line(run_cli("kv", "get", "", "--via", via), "key")
    one_error_line(run_cli("leader", "", "--via", via), "election name")
    one_error_line(run_cli("elect", "jobs/primary", "--via", via, "--lease", "-1"), "lease")
    with ConsensusClient(via) as client:
        with pytest.raises(ValueError, match="if_version"):
            client.put("bad/version", b"v", if_version=-1)
        with pytest.raises(ValueError, match="at most"):
            client.put("bad/big", b"x" * (64 * 1024 + 1))
        assert client.get("bad/version") == (None, 0) and client.get("bad/big") == (None, 0)


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


def test_a_killed_leaders_name_passes_to_another_candidate_within_two_seconds(ring, procs, tmp_path):
    """Two `elect --exec` processes for one name: one leads and runs its command. SIGKILL it: its
    command dies with it (even so), and the other candidate leads within 2 s (lease 1 s), under a
    higher epoch; `leader` names it.

    The command is the shell's child, not the shell (`a & b; wait`), as most commands are under dash.

    To see it fail: drop `die_with_parent_group` from the Popen, or run the command without
    `group_guard` (the killed leader's command lives on), or
    let `Group.tick` never propose expiries (the name is never free again)."""
    via = ring.nodes[0].endpoint
    pids = {c: tmp_path / f"{c}.pid" for c in ("a", "b")}
    elect = {c: procs(f"elect-{c}", "elect", "jobs/primary", "--via", via, "--candidate", c,
                      "--exec", f"sleep 600 & echo $! > {pids[c]}; wait") for c in ("a", "b")}
    logs = {c: tmp_path / f"elect-{c}.log" for c in ("a", "b")}

    def leading() -> str | None:
        led = [c for c in ("a", "b") if (_events(logs[c]) or [{}])[-1].get("event") == "elected"]
        return led[0] if len(led) == 1 and pids[led[0]].exists() and pids[led[0]].read_text().strip() else None
    first = wait_for(leading, timeout=20, what="one candidate leading")
    other = "b" if first == "a" else "a"
    command = int(pids[first].read_text())
    said = json.loads(run_cli("leader", "jobs/primary", "--via", via, "--json").stdout)
    assert said["leader"] == first and said["epoch"] == _events(logs[first])[-1]["epoch"]

    try:
        killed_at = time.time()
        elect[first].send_signal(signal.SIGKILL)
        elect[first].wait()
        gained = wait_for(lambda: [e for e in _events(logs[other]) if e["event"] == "elected"], timeout=10,
                          what="the other candidate elected")[-1]
        assert gained["time"] - killed_at < 2.0, f"failover took {gained['time'] - killed_at:.2f} s"
        assert gained["epoch"] > said["epoch"]
        wait_for(lambda: not _alive(command), timeout=5, what="the killed leader's command gone")
        said = json.loads(run_cli("leader", "jobs/primary", "--via", via, "--json").stdout)
        assert said == {"name": "jobs/primary", "leader": other, "epoch": gained["epoch"]}
    finally:  # the command the test is about may have outlived its leader: it must not outlive the test
        try:
            os.killpg(os.getpgid(command), signal.SIGKILL)
        except ProcessLookupError:
            pass


def _alive(pid: int) -> bool:
    """Running: neither gone nor a zombie that its new parent has yet to reap."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_killing_a_groups_leader_loses_no_write_and_applies_none_twice(ring_factory):
    """One writer increments a counter by compare-and-set while the node leading the counter's group
    is SIGKILLed: writes resume within 2 s of the kill under a new group leader, every increment
    confirmed is there exactly once (a retry of one that was applied is answered, not applied again,
    which would show as a refused compare-and-set of the writer's own), and none is lost. The survivors
    saw the leader's process die (their connection to it closed) and elected another at once, without
    waiting out an election timeout.

    To see it fail: drop the session from `ConsensusClient.command` (a retried increment is applied
    again and refused), or make `Raft._advance_commit` count the leader alone (a write acknowledged by
    the dead leader alone is lost), or let `Raft.leader_gone` do nothing (no survivor hurries)."""
    ring = ring_factory()
    ring.start(4)
    ring.wait_consistent(timeout=30)
    endpoints = [n.endpoint for n in ring.nodes]
    wait_for(lambda: every_group_has(endpoints, 3), timeout=30, what="every group with 3 members")
    key = "counter"
    arc = str(arc_of(key_id(key), 64))
    with ConsensusClient(endpoints[0], timeout=10) as client:
        client.put(key, b"0")
        states = groups_of(endpoints)
        leader = next(e for e, groups in states.items() if groups.get(arc, {}).get("role") == "leader")
        victim = next(n for n in ring.nodes if n.endpoint == leader)
        entry = next(e for e in endpoints if e != leader)
        client.dht.entry_points = [entry]
        confirmed, gaps, killed_at = 0, [], None
        last_ok = time.monotonic()
        while confirmed < 60:
            if confirmed == 20 and killed_at is None:
                killed_at = time.monotonic()
                ring.kill(victim)
            value, version = client.get(key)
            client.put(key, str(int(value) + 1).encode(), if_version=version)  # VersionMismatch: applied twice
            confirmed += 1
            now = time.monotonic()
            gaps.append(now - last_ok)
            last_ok = now
        assert int(client.get(key)[0]) == confirmed
        hurried = [client.dht.info(e)["consensus"]["leaders_lost"] for e in endpoints if e != leader]
    print(f"writes stopped for {max(gaps):.2f} s at most; survivors that saw the leader die: {hurried}")
    assert max(gaps) < 2.5, f"writes stopped for {max(gaps):.2f} s after the group's leader was killed"
    assert any(hurried), "no survivor saw the leader's process die and hurried an election"


def test_a_group_without_its_majority_refuses_with_one_line(ring_factory):
    """Two of three processes killed: every group has lost its majority. A write is refused with one
    line that says so (exit 2), and a leader that is no longer leading is not named.

    To see it fail: let `Raft._quorum` be 1 (the survivor commits alone)."""
    ring = ring_factory()
    ring.start(3)
    ring.wait_consistent(timeout=30)
    endpoints = [n.endpoint for n in ring.nodes]
    wait_for(lambda: every_group_has(endpoints, 3), timeout=30, what="every group with 3 members")
    survivor = ring.nodes[0]
    for node in ring.nodes[1:]:
        ring.kill(node)
    out = run_cli("kv", "put", "lonely", "1", "--via", survivor.endpoint, "--timeout", "3")
    one_error_line(out, "majority")
    assert out.returncode == 2
    with ConsensusClient(survivor.endpoint, timeout=2) as client, pytest.raises(NoMajority):
        client.get("lonely")


def test_client_elect_gives_one_leader_and_fences_with_a_growing_epoch(ring):
    """`Client.elect`: of two clients campaigning for one name, one leads; when it resigns, the other
    leads under a higher epoch; `on_gain`/`on_loss` are told.

    To see it fail: make `KvMachine._campaign` grant a held name to anyone (two leaders at once)."""
    from chordpub import Client

    via = ring.nodes[0].endpoint
    gains: list[tuple[str, int]] = []
    with Client(via) as a, Client(via) as b:
        ea = a.elect("billing/primary", candidate="a", on_gain=lambda e: gains.append(("a", e)))
        assert ea.wait_leader(10)
        eb = b.elect("billing/primary", candidate="b", on_gain=lambda e: gains.append(("b", e)))
        time.sleep(0.6)  # b campaigns (twice a renewal) and must not lead meanwhile
        assert ea.is_leader and not eb.is_leader and a.leader("billing/primary") == ("a", ea.epoch)
        ea.resign()
        assert eb.wait_leader(10)
        assert eb.epoch > ea.epoch and b.leader("billing/primary") == ("b", eb.epoch)
    assert [g[0] for g in gains] == ["a", "b"]


def test_a_leader_resigns_from_its_own_callback_and_the_name_is_free_at_once(ring):
    """`on_gain` may call `resign()`: it returns within a second, `on_loss` follows with the same epoch,
    and the name is free long before its 10 s lease would have run out.

    To see it fail: call the callbacks where the election's lock is held (`_tell` calling `callback(epoch)`
    at once): the resignation waits 5 s for the lease clock's thread, which waits for that lock."""
    from chordpub import Client

    via = ring.nodes[0].endpoint
    made = threading.Event()
    handle: list = []
    told: list[tuple[str, int, float]] = []

    def gained(epoch: int) -> None:
        made.wait(10)
        t0 = time.monotonic()
        handle[0].resign()
        told.append(("resigned", epoch, time.monotonic() - t0))

    with Client(via) as a:
        handle.append(a.elect("callback/self", candidate="a", lease=10,
                              on_gain=gained, on_loss=lambda e: told.append(("lost", e, 0.0))))
        made.set()
        wait_for(lambda: len(told) == 2, 15, what="the resignation and the loss told")
        (what, epoch, took), (lost, lost_epoch, _) = told
        assert what == "resigned" and took < 1.0, told
        assert lost == "lost" and lost_epoch == epoch == handle[0].epoch and not handle[0].is_leader
        wait_for(lambda: a.leader("callback/self")[0] is None, 3, what="the name free (its lease is 10 s)")


def test_garbage_at_the_consensus_socket_changes_nothing_and_stops_nothing(ring):
    """Undecodable frames, unknown ops, commands and Raft messages of the wrong shape or for another
    member: error replies where one can be addressed, no group state changed (terms and commits as
    they were), and the groups still answer."""
    import msgpack
    import zmq

    via = ring.nodes[0].endpoint
    with ConsensusClient(via) as client:
        version = client.put("garbage/before", b"v")
    endpoints = [n.endpoint for n in ring.nodes]
    wait_for(lambda: every_group_has(endpoints, 3), timeout=30, what="every group with 3 members")
    target_member = DhtClient(via).info(via)["services"]["consensus"]
    before = {arc: (g["term"], g["commit"]) for arc, g in groups_of([via])[via].items()}
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect("tcp://" + target_member.partition("#")[0])
    rng = __import__("random").Random(7)
    cases = [rng.randbytes(rng.randint(0, 100)) for _ in range(50)] + [msgpack.packb(c) for c in (
        {"v": 1, "op": "cmd", "id": 1, "arc": 64, "cmd": {"op": "get", "key": "k"}},
        {"v": 1, "op": "cmd", "id": 2, "arc": 3, "cmd": {"op": "put", "key": "", "value": b"x"}},
        {"v": 1, "op": "cmd", "id": 3, "arc": 3, "cmd": {"op": "expire", "name": "n", "renewed": 1}},
        {"v": 1, "op": "raft", "id": 4, "src": "nobody", "g": "x#1", "m": []},
        {"v": 1, "op": "raft", "id": 5, "src": "a:1#1", "g": "b:1#1", "m": [[0, {"k": "vote"}]]},
        {"v": 1, "op": "raft", "id": 6, "src": "a:1#1", "g": "b:1#1", "m": "no"},
        {"v": 1, "op": "nope", "id": 7},
    )]
    for frame in cases:
        sock.send(frame)
    replies = []
    while sock.poll(1000):
        replies.append(wire.decode_reply(sock.recv()))
    sock.close()
    assert {r["id"] for r in replies} >= {1, 4, 6, 7}
    assert all(r["ok"] is False or r["answer"]["ok"] is False for r in replies)
    after = {arc: (g["term"], g["commit"]) for arc, g in groups_of([via])[via].items()}
    assert after == before
    with DhtClient(via) as dht:
        assert dht.info(via)["consensus"]["rejected"] >= 50, "what was dropped is counted in `node info`"
    with ConsensusClient(via) as client:
        assert client.get("garbage/before") == (b"v", version)


def test_a_client_whose_leader_left_the_group_asks_the_ring_again(ring_factory):
    """A client remembers each group's leader. The first node leads every group alone; three nodes join
    half a ring after it, so the groups of that half move to them and the first node leaves them. Asked
    again, the first node answers "not the leader" and names no one (it is no member: it hears no
    leader of those groups); the client then asks the ring who holds the group, and its next command
    is answered well within its timeout.

    To see it fail: never ask the ring again after such answers (`RELOOK_AFTER` never reached in
    `ConsensusClient._ask`: every command times out at the first node)."""
    ring = ring_factory()
    first = ring.start(1)[0]
    half = 1 << 63
    for offset in (half, half + (1 << 61), half + (1 << 62)):  # (first, first + half] is theirs now
        ring.add(join=first.endpoint, id=(first.id + offset) % (1 << 64))
    keys: dict[int, str] = {}
    for i in range(10_000):
        keys.setdefault(arc_of(key_id(f"moved/{i}"), 64), f"moved/{i}")
    endpoints = [n.endpoint for n in ring.nodes]
    with ConsensusClient(first.endpoint, timeout=5) as client:
        versions = {arc: client.put(key, b"v") for arc, key in keys.items()}  # every leader remembered
        wait_for(lambda: every_group_has(endpoints, 3), timeout=60, what="every group with 3 members")
        with DhtClient(first.endpoint) as dht:
            member = dht.info(first.endpoint)["services"]["consensus"]
        left = sorted({int(arc) for groups in groups_of(endpoints).values() for arc, g in groups.items()
                       if g["role"] == "leader" and member not in g["members"]})
        assert len(left) >= ARCS // 4, f"the groups the first node left: {left}"
        for arc in left:
            t0 = time.monotonic()
            assert client.get(keys[arc]) == (b"v", versions[arc])
            assert time.monotonic() - t0 < 2.0, f"arc {arc}: {time.monotonic() - t0:.2f}s"


def test_a_member_that_joins_after_the_log_was_compacted_gets_the_keys_from_a_snapshot(ring_factory):
    """Enough writes to one arc that its group folds its log into a snapshot; one member's process is
    killed and a new process joins, which the group's leader adds in its place: all it can get of the
    early writes is the snapshot. Then a second old member is replaced the same way, and the last old
    one is killed: the two newcomers are the majority, and every key is there with its version.

    To see it fail: make `Group.ready` never compact (the log is not folded: no snapshot is sent, and
    the test's check that one was taken fails), or restore nothing from it (`rd.snapshot` ignored: the
    early keys are gone once the old members are)."""
    from concurrent.futures import ThreadPoolExecutor

    from dht.consensus_group import COMPACT_EVERY, KEEP_ENTRIES

    ring = ring_factory()
    ring.start(3)
    ring.wait_consistent(timeout=30)
    wait_for(lambda: every_group_has([n.endpoint for n in ring.nodes], 3), timeout=30, what="3-member groups")
    arc = arc_of(key_id("snap/0"), 64)
    names = (f"snap/{i}" for i in range(200 * (COMPACT_EVERY + KEEP_ENTRIES)))
    keys = [k for k in names if arc_of(key_id(k), 64) == arc][:COMPACT_EVERY + KEEP_ENTRIES + 20]
    via = ring.nodes[0].endpoint
    clients = [ConsensusClient(via) for _ in range(4)]
    try:
        with ThreadPoolExecutor(4) as pool:
            versions = dict(zip(keys, pool.map(lambda ik: clients[ik[0] % 4].put(ik[1], ik[1].encode()),
                                               enumerate(keys)), strict=True))
    finally:
        for c in clients:
            c.close()
    first, second, keeper = ring.nodes

    def holds_it(node) -> bool:  # noqa: ANN001 - a NodeProcess
        """In the group, with everything written, from a snapshot: the leader's, since it was not there to
        take its own."""
        with DhtClient(keeper.endpoint) as dht:
            member = dht.info(node.endpoint)["services"]["consensus"]
        g = groups_of([node.endpoint])[node.endpoint].get(str(arc))
        return bool(g) and g["commit"] >= max(versions.values()) and member in g["members"] and g["snapshot"] > 0

    ring.kill(second)
    newcomer = ring.add(join=first.endpoint)
    wait_for(lambda: every_group_has([first.endpoint, keeper.endpoint, newcomer.endpoint], 3) and holds_it(newcomer),
             timeout=60, what="the newcomer in the group")
    ring.kill(first)
    later = ring.add(join=keeper.endpoint)
    wait_for(lambda: every_group_has([keeper.endpoint, newcomer.endpoint, later.endpoint], 3) and holds_it(later),
             timeout=60, what="a second newcomer in the group")
    ring.kill(keeper)  # the group's majority is the two newcomers: whichever leads answers from a snapshot
    with ConsensusClient(newcomer.endpoint, timeout=15) as client:
        for k in keys[:20] + keys[-5:]:
            assert client.get(k) == (k.encode(), versions[k]), k
