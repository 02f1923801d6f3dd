"""Consensus against etcd on one machine: compare-and-set throughput and latency, failover, elections.

    python benchmarks/consensus.py [--seconds 10] [--clients 1,16] [--names 1000] [--election-nodes 16]
                                   [--json]

Both run 3 members on loopback with the same Raft timing (100 ms heartbeat, 1 s election timeout,
etcd's defaults and chordpub's): etcd 3 (`apt-get install etcd-server`, its v3 JSON gateway over
keep-alive HTTP, so no client library is needed) and a 3-node chordpub ring (every arc's group on
the 3 nodes). Each client thread owns one key and does compare-and-set on it in a loop (etcd: a txn
comparing the key's mod_revision; chordpub: `put(if_version=)`), for --seconds, with 1 and 16
client threads; latency is per operation at the caller. Failover: one client writes in a loop while
the process leading its key is SIGKILLed; the figure is the time from the kill to the next write
that succeeds. Elections: a ring of --election-nodes nodes and --names names campaigned for once
each from 16 threads: grants per second.

etcd writes its log to disk (fsync per commit) and chordpub's groups keep theirs in memory: the
throughput ratio compares the two systems as they ship, not equal work. Prints each figure with
its ratio to etcd's.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chordpub.launcher import LocalRing, wait_for  # noqa: E402
from dht.arcs import ARCS, arc_of  # noqa: E402
from dht.client import DhtClient  # noqa: E402
from dht.consensus_client import ConsensusClient  # noqa: E402
from dht.ids import key_id  # noqa: E402
from dht.transport import RpcClient  # noqa: E402
from tests.helpers.ports import free_ports  # noqa: E402


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class Etcd:
    """Three etcd members on loopback, and a tiny client of their v3 JSON gateway."""

    def __init__(self, workdir: Path) -> None:
        self.procs: list[subprocess.Popen] = []
        try:
            self._start(workdir)
        except TimeoutError:
            logs = "; ".join(f"m{i}: {_tail(workdir / f'etcd-{i}.log')}" for i in range(3))
            self.stop()  # (members left running would outlive the benchmark)
            raise TimeoutError(f"no etcd leader within 30 s ({logs})") from None

    def _start(self, workdir: Path) -> None:
        ports = free_ports(6)
        self.clients = [f"127.0.0.1:{p}" for p in ports[:3]]
        peers = [f"http://127.0.0.1:{p}" for p in ports[3:]]
        cluster = ",".join(f"m{i}={peers[i]}" for i in range(3))
        self.procs = []
        for i in range(3):
            log = open(workdir / f"etcd-{i}.log", "w")  # noqa: SIM115 - the child's
            self.procs.append(subprocess.Popen(
                ["etcd", "--name", f"m{i}", "--data-dir", str(workdir / f"etcd-{i}"),
                 "--listen-client-urls", f"http://{self.clients[i]}", "--advertise-client-urls",
                 f"http://{self.clients[i]}", "--listen-peer-urls", peers[i], "--initial-advertise-peer-urls",
                 peers[i], "--initial-cluster", cluster, "--initial-cluster-state", "new",
                 "--heartbeat-interval", "100", "--election-timeout", "1000"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        wait_for(lambda: self.leader() is not None, timeout=30, what="an etcd leader")  # (member 0 is falsy)

    def call(self, conn: http.client.HTTPConnection, path: str, body: dict) -> dict:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        reply = conn.getresponse()
        data = reply.read()
        if reply.status != 200:
            raise RuntimeError(f"etcd {path}: {reply.status} {data[:200]!r}")
        return json.loads(data)

    def leader(self) -> int | None:
        """The index of the member that leads, or None."""
        for i, c in enumerate(self.clients):
            if self.procs[i].poll() is not None:
                continue
            try:
                conn = http.client.HTTPConnection(c, timeout=1)
                status = self.call(conn, "/v3/maintenance/status", {})
                conn.close()
            except (OSError, RuntimeError):
                continue
            if status.get("leader") and status["leader"] == status["header"]["member_id"]:
                return i
        return None

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        self.procs = []


def _tail(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return lines[-1][:300] if lines else "empty log"


class EtcdWriter:
    def __init__(self, etcd: Etcd, member: int, key: str, timeout: float = 5.0) -> None:
        self.etcd, self.key, self.timeout = etcd, b64(key), timeout
        self.conn = http.client.HTTPConnection(etcd.clients[member], timeout=timeout)
        self.version = int(etcd.call(self.conn, "/v3/kv/put", {"key": self.key, "value": b64("0")})["header"]
                           ["revision"])

    def cas(self, value: str) -> None:
        try:
            out = self.etcd.call(self.conn, "/v3/kv/txn", {
                "compare": [{"key": self.key, "target": "MOD", "mod_revision": str(self.version),
                             "result": "EQUAL"}],
                "success": [{"request_put": {"key": self.key, "value": b64(value)}}]})
        except (OSError, RuntimeError, http.client.HTTPException):
            self.conn.close()  # (an http.client connection is unusable after an error: a new one)
            self.conn = http.client.HTTPConnection(f"{self.conn.host}:{self.conn.port}", timeout=self.timeout)
            raise
        if not out.get("succeeded"):  # a write of ours that went through before its answer was lost
            got = self.etcd.call(self.conn, "/v3/kv/range", {"key": self.key})
            self.version = int(got["kvs"][0]["mod_revision"])
            raise RuntimeError("etcd refused a compare-and-set: a lost answer's write went through")
        self.version = int(out["header"]["revision"])

    def close(self) -> None:
        self.conn.close()


class RingWriter:
    def __init__(self, via: str, key: str) -> None:
        self.client, self.key = ConsensusClient(via, timeout=10), key
        self.version = self.client.put(key, b"0")

    def cas(self, value: str) -> None:
        self.version = self.client.put(self.key, value.encode(), if_version=self.version)

    def close(self) -> None:
        self.client.close()


def run_cas(writers: list, seconds: float) -> dict:
    """Every writer in its own thread, compare-and-set in a loop for `seconds`."""
    latencies: list[list[float]] = [[] for _ in writers]
    stop = threading.Event()

    def loop(i: int) -> None:
        w, n = writers[i], 0
        while not stop.is_set():
            t = time.perf_counter()
            w.cas(str(n))
            latencies[i].append(time.perf_counter() - t)
            n += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(len(writers))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)  # the measuring window
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    flat = sorted(x for lat in latencies for x in lat)
    return {"ops_s": len(flat) / elapsed, "p50_ms": 1000 * statistics.median(flat),
            "p99_ms": 1000 * flat[min(len(flat) - 1, int(0.99 * len(flat)))]}


def failover(write, kill) -> float:  # noqa: ANN001 - callables
    """Seconds from `kill()` to the next `write()` that succeeds, while one thread writes in a loop."""
    done: list[float] = []
    killed_at: list[float] = []
    stop = threading.Event()

    def loop() -> None:
        n = 0
        while not stop.is_set():
            started_after_kill = bool(killed_at)  # a write in flight at the kill does not count
            try:
                write(str(n))
            except Exception:  # noqa: BLE001 - a write refused or timed out during the failover
                continue
            n += 1
            if started_after_kill and not done:
                done.append(time.monotonic())

    t = threading.Thread(target=loop)
    t.start()
    time.sleep(1.0)  # writes flowing before the kill
    killed_at.append(time.monotonic())
    kill()
    wait_for(lambda: done, timeout=60, what="a write after the kill")
    stop.set()
    t.join()
    return done[0] - killed_at[0]


def ring_leader_of(ring: LocalRing, key: str):  # noqa: ANN201 - a NodeProcess
    arc = str(arc_of(key_id(key), 64))
    with DhtClient(ring.nodes[0].endpoint) as dht, RpcClient(timeout=1.0, retries=0) as rpc:
        for n in ring.nodes:
            member = dht.info(n.endpoint)["services"]["consensus"]
            groups = rpc.call(member.partition("#")[0], "state").body["groups"]
            if groups.get(arc, {}).get("role") == "leader":
                return n
    return None


def groups_full(ring: LocalRing, size: int) -> bool:
    with DhtClient(ring.nodes[0].endpoint) as dht, RpcClient(timeout=1.0, retries=0) as rpc:
        led = {}
        for n in ring.nodes:
            member = dht.info(n.endpoint)["services"]["consensus"]
            reply = rpc.call(member.partition("#")[0], "state")
            for arc, g in (reply.body["groups"] if reply.ok else {}).items():
                if g["role"] == "leader":
                    led[arc] = len(g["members"])
        return len(led) == ARCS and all(v == size for v in led.values())


def elections(workdir: Path, nodes: int, names: int) -> float:
    """Grants per second: `names` names campaigned for once each from 16 threads on a ring of `nodes`."""
    ring = LocalRing(workdir, options={"stabilize": 0.5})
    try:
        ring.start(nodes, timeout=120)
        ring.wait_consistent(timeout=120)
        wait_for(lambda: groups_full(ring, 3), timeout=120, what="every group with 3 members")
        clients = [ConsensusClient(ring.nodes[i % nodes].endpoint, timeout=10) for i in range(16)]
        granted = [0] * 16

        def campaign(i: int) -> None:
            for j in range(i, names, 16):
                if clients[i].campaign(f"svc/{j}", f"c{i}", 60.0)["ok"]:
                    granted[i] += 1

        for c in clients:  # the ring's arcs learned before the clock starts
            c.leader("warm-up")
        threads = [threading.Thread(target=campaign, args=(i,)) for i in range(16)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        for c in clients:
            c.close()
        assert sum(granted) == names, granted
        return names / elapsed
    finally:
        ring.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="Each throughput window.")
    ap.add_argument("--clients", default="1,16", help="Client threads, comma-separated.")
    ap.add_argument("--names", type=int, default=1000, help="Names for the elections figure (0: skip it).")
    ap.add_argument("--election-nodes", type=int, default=16, help="Ring size for the elections figure.")
    ap.add_argument("--json", action="store_true", help="Print one JSON object.")
    args = ap.parse_args()
    out: dict = {"cas": []}
    with tempfile.TemporaryDirectory(prefix="chordpub-consensus-") as tmp:
        work = Path(tmp)
        etcd = Etcd(work)
        ring = LocalRing(work / "ring", options={"stabilize": 0.5})
        try:
            ring.start(3, timeout=60)
            ring.wait_consistent(timeout=60)
            wait_for(lambda: groups_full(ring, 3), timeout=60, what="every group with 3 members")
            for n in (int(c) for c in args.clients.split(",")):
                e_writers = [EtcdWriter(etcd, i % 3, f"bench/{n}/{i}") for i in range(n)]
                r_writers = [RingWriter(ring.nodes[i % 3].endpoint, f"bench/{n}/{i}") for i in range(n)]
                e, r = run_cas(e_writers, args.seconds), run_cas(r_writers, args.seconds)
                for w in e_writers + r_writers:
                    w.close()
                row = {"clients": n, "etcd": e, "chordpub": r, "ratio": r["ops_s"] / e["ops_s"]}
                out["cas"].append(row)
                if not args.json:
                    print(f"CAS, {n} client(s): chordpub {r['ops_s']:.0f}/s (p50 {r['p50_ms']:.2f} ms, p99 "
                          f"{r['p99_ms']:.2f} ms), etcd {e['ops_s']:.0f}/s (p50 {e['p50_ms']:.2f} ms, p99 "
                          f"{e['p99_ms']:.2f} ms): {row['ratio']:.2f}x etcd's throughput", flush=True)
            victim = ring_leader_of(ring, "bench/failover")
            writer = RingWriter(next(n for n in ring.nodes if n is not victim).endpoint, "bench/failover")
            victim = ring_leader_of(ring, "bench/failover")
            r_fail = failover(writer.cas, lambda: os.kill(victim.proc.pid, signal.SIGKILL))
            leader = etcd.leader()
            # each asks again after 0.5 s without an answer, as chordpub's client asks another member
            e_writer = EtcdWriter(etcd, (leader + 1) % 3, "bench/failover", timeout=0.5)
            e_fail = failover(e_writer.cas, lambda: etcd.procs[leader].send_signal(signal.SIGKILL))
            out["failover"] = {"chordpub_s": r_fail, "etcd_s": e_fail, "ratio": r_fail / e_fail}
            if not args.json:
                print(f"failover after SIGKILL of the leader: chordpub {r_fail:.2f} s, etcd {e_fail:.2f} s: "
                      f"{r_fail / e_fail:.2f}x etcd's", flush=True)
        finally:
            ring.stop()
            etcd.stop()
        if args.names:
            rate = elections(work / "elections", args.election_nodes, args.names)
            out["elections"] = {"nodes": args.election_nodes, "names": args.names, "grants_s": rate}
            if not args.json:
                print(f"elections: {args.names} names over {args.election_nodes} nodes, {rate:.0f} grants/s",
                      flush=True)
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
