"""--data-dir: a node killed and restarted with the same id rejoins with its store, takes back its
range, and hands what it no longer owns to the node that owns it now (then drops it)."""

from __future__ import annotations

import signal
from pathlib import Path

from chordpub.launcher import await_ready, spawn_node, stop_processes, wait_for
from dht.client import DhtClient
from dht.durable import FILE
from dht.ids import key_id
from tests.conftest import PERIOD, one_error_line, run_cli

BITS = 16
IDS = {"a": 10_000, "b": 20_000, "x": 40_000, "c": 60_000}  # x owns (20000, 40000]
Y = 30_000  # joins while x is away: takes (20000, 30000]


def keys_in(lo: int, hi: int, n: int) -> list[str]:
    out, i = [], 0
    while len(out) < n:
        k = f"key-{i}"
        if lo < key_id(k, BITS) <= hi:
            out.append(k)
        i += 1
    return out


def test_a_restarted_node_rejoins_with_its_keys_and_hands_back_what_it_lost(tmp_path: Path):
    options = {"bits": BITS, "replicas": 1, "stabilize": PERIOD}  # one copy: only the disk can bring keys back
    procs: dict[str, object] = {}

    def start(name: str, node_id: int, port: int = 0, join: str | None = None):
        extra = {"id": node_id, **({"data_dir": tmp_path / f"{name}-data"} if name == "x" else {})}
        proc = spawn_node(tmp_path, name, port=port, join=join, options={**options, **extra})
        procs[name] = proc
        return await_ready(proc, tmp_path, name)

    try:
        first = start("a", IDS["a"])
        nodes = {"a": first, **{n: start(n, IDS[n], join=first.endpoint) for n in ("b", "x", "c")}}
        x_port = int(nodes["x"].endpoint.rsplit(":", 1)[1])
        with DhtClient(first.endpoint) as client:
            def owner(k: str) -> int | None:
                found = client.lookup(k)
                return found.owner.id if found.ok else None

            lower, upper = keys_in(20_000, 30_000, 5), keys_in(30_000, 40_000, 5)
            wait_for(lambda: all(owner(k) == IDS["x"] for k in lower + upper), 30, what="x owning its range")
            for k in lower + upper:
                client.put(k, k.encode())
            assert (tmp_path / "x-data" / FILE).exists()

            procs["x"].send_signal(signal.SIGKILL)
            procs["x"].wait(timeout=5)
            wait_for(lambda: all(owner(k) == IDS["c"] for k in upper), 30, what="c taking over x's range")
            assert all(client.get(k) is None for k in lower + upper)  # one copy, and it is on x's disk
            start("y", Y, join=first.endpoint)
            wait_for(lambda: all(owner(k) == Y for k in lower), 30, what="y owning (20000, 30000]")
            client.put(upper[0], b"written while x was away")  # lands on c

            x = start("x", IDS["x"], port=x_port, join=first.endpoint)  # same host:port and id, same disk
            assert x.id == IDS["x"]
            wait_for(lambda: all(owner(k) == IDS["x"] for k in upper), 30, what="x owning its range again")
            # its own keys are back (the one written meanwhile is the newer version, handed over by c) ...
            wait_for(lambda: [client.get(k) for k in upper] == [b"written while x was away",
                                                                *(k.encode() for k in upper[1:])],
                     30, what="x's keys back")
            # ... and the ones y now owns were handed to y, then dropped by x after a replica lease
            wait_for(lambda: all(client.get(k) == k.encode() for k in lower), 30, what="y holding x's old keys")
            wait_for(lambda: client.info(x.endpoint)["stored"] == len(upper), 30, what="x dropping what y owns")
    finally:
        stop_processes(procs.values())


def test_a_data_dir_of_another_node_is_refused(tmp_path: Path):
    proc = spawn_node(tmp_path, "n", options={"bits": BITS, "id": 5, "data_dir": tmp_path / "data"})
    try:
        node = await_ready(proc, tmp_path, "n")
    finally:
        stop_processes([proc])
    assert node.id == 5
    one_error_line(run_cli("node", "start", "--bits", str(BITS), "--id", "6", "--port", "0",
                           "--data-dir", str(tmp_path / "data")), "holds the store of node 5")
