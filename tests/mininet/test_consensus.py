"""Consensus on Mininet, through a minute of partitions and SIGKILLs: 8 nodes on a chain of switches (a cut
link splits the hosts anywhere along it; two cuts make three groups), 4 `chordpub elect` candidates on
different hosts, 5 clients of the linearizable keys, and an exclusive topic with a stronger and a weaker
publisher and two subscribers. One scripted start (the leading candidate's host cut off alone; then the
stronger publisher's; then the leading candidate SIGKILLed), then random phases: cuts of
2-10 s, a node SIGKILLed and restarted, the leading candidate SIGKILLed and another started. All hosts
share this machine's clock, so the intervals the candidates log compare exactly.

Checked, each by its own test on the one run:
- never two leaders: no two candidates' leadership intervals overlap, and epochs grow from one grant to
  the next; a leader SIGKILLed is replaced within 2 s; after every heal a leader is back within 2 s;
- the keys' history (5 clients, 10 keys, invocation and completion times and results) is linearizable
  (tests/helpers/linearizable.py; tests/unit/test_consensus_group.py shows it refusing a group that
  answers reads from any member without the log, `BrokenReads`);
- fencing: the stronger publisher, cut off from its group, is replaced by the weaker under a higher
  epoch, and takes the topic back after the heal; no subscriber delivers a message of an older epoch
  after one of a newer.

To see it fail: let a holder that cannot renew go on leading past its lease (dht/election.py's
`_run` never calling `_lose` at the lease's end: the cut-off first leader and its successor overlap), or
let a compare-and-set write whatever version it finds (dht/kv_machine.py's `_put`: the keys' history
is refused), or drop the subscriber's epoch check (pubsub/subscription.py: what the cut-off publisher
sent before it stopped arrives after the heal, after its successor's messages, and is delivered).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dht.processes import stop_processes, wait_for
from tests.helpers.linearizable import Op, linearizable
from tests.mininet.conftest import host_left_clean
from topologies.host_templates import fork_on_host
from topologies.partition import PORT, chain, partitioned_ring

pytestmark = pytest.mark.mininet
HOSTS = 8
SECONDS = 60  # of chaos
NAME = "lock"
FAILOVER = 2.0  # seconds: a new leader after the leader's SIGKILL, or after a heal
CANDIDATE_HOSTS = (1, 3, 5, 7)  # 1-based host numbers
KV_HOSTS = (2, 4, 6, 8, 1)
STRONG, WEAK = 8, 2  # the hosts of the exclusive topic's stronger and weaker publishers
FOLLOW_HOSTS = (4, 6)


class Chaos:
    """The run's processes and what happened when (wall-clock times)."""

    def __init__(self, ring, workdir: Path) -> None:  # noqa: ANN001 - PartitionedRing
        self.ring, self.workdir = ring, workdir
        self.hosts = ring.hosts
        self.candidates: dict[str, subprocess.Popen] = {}  # candidate name -> its elect process
        self.kills: dict[str, float] = {}  # candidate name -> when it was SIGKILLed
        self.leader_kills: list[float] = []
        self.heals: list[float] = []
        self.cuts: list[tuple[float, float, list[int]]] = []  # (from, to, links cut)
        self.ended = 0.0  # when the chaos ended
        self.fence_cut = (0.0, 0.0)  # when the stronger publisher's host was cut off

    def host(self, number: int):  # noqa: ANN201 - a mininet Host
        return self.hosts[number - 1]

    def spawn(self, number: int, *args: str, out: str) -> subprocess.Popen:
        """Start `args` on host `number`: its stdout to `out`, its stderr there too (a .log) or beside it."""
        host = self.host(number)
        err = None if out.endswith(".log") else self.workdir / f"{Path(out).stem}.err"
        forked = fork_on_host(host, [sys.executable, *args], self.workdir / out, err)
        if forked is not None:
            self.ring.procs.append(forked)
            return forked
        with open(self.workdir / out, "ab") as sink:
            errs = subprocess.STDOUT if out.endswith(".log") else open(self.workdir / f"{Path(out).stem}.err", "ab")  # noqa: SIM115
            try:
                p = host.popen([sys.executable, *args], stdout=sink, stderr=errs, stdin=subprocess.DEVNULL)
            finally:
                if errs is not subprocess.STDOUT:
                    errs.close()
        self.ring.procs.append(p)
        return p

    def said(self) -> str:
        """What each candidate and node last said: the reason a wait failed, kept in the test's report
        (the files themselves go with pytest's old temporary directories)."""
        lines = []
        for path in sorted(self.workdir.glob("elect-*.*")) + sorted(self.workdir.glob("h*-*.log")):
            text = [t for t in path.read_text(errors="replace").splitlines()
                    if path.suffix != ".log" or " WARNING " in t or " ERROR " in t]
            lines += [f"{path.name}: {t[:200]}" for t in text[-3:]]
        return "\n".join(lines)

    def via(self, number: int) -> str:
        return self.ring.endpoint(self.host(number))

    def start_candidate(self, name: str, number: int) -> None:
        self.candidates[name] = self.spawn(number, "-m", "chordpub", "elect", NAME, "--via", self.via(number),
                                           "--candidate", name, "--exec", "sleep 1000", out=f"elect-{name}.jsonl")

    def events(self) -> list[dict]:
        rows = []
        for name in self.candidates:
            for line in (self.workdir / f"elect-{name}.jsonl").read_text().splitlines():
                if line.startswith("{"):
                    rows.append(json.loads(line))
        return sorted(rows, key=lambda r: r["time"])

    def host_of(self, candidate: str) -> int:
        return CANDIDATE_HOSTS[int(candidate[1:]) % len(CANDIDATE_HOSTS)]

    def leading(self) -> str | None:
        """The candidate whose last event says it leads (and that is alive)."""
        last: dict[str, str] = {}
        for r in self.events():
            last[r["candidate"]] = r["event"]
        alive = [c for c, e in last.items() if e == "elected" and c not in self.kills]
        return alive[0] if alive else None

    def kill_leader(self) -> None:
        name = wait_for(self.leading, 10, interval=0.05, what="a leading candidate")
        self.candidates[name].send_signal(signal.SIGKILL)
        self.kills[name] = time.time()
        self.leader_kills.append(self.kills[name])
        self.candidates[name].wait(timeout=10)
        name = f"c{len(self.candidates)}"
        self.start_candidate(name, self.host_of(name))

    def topic_info(self, topic: str) -> dict:
        p = self.host(1).popen([sys.executable, "-m", "chordpub", "topic", "info", topic, "--via", self.via(1),
                                "--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        out, _ = p.communicate(timeout=60)
        return json.loads(out) if p.returncode == 0 else {}

    def isolate(self, number: int, seconds: float) -> tuple[float, float]:
        """Cut host `number` off alone (a minority of every group) for `seconds`; when."""
        self.cut([i for i in (number - 1, number) if 1 <= i < HOSTS], seconds)
        return self.cuts[-1][:2]

    def cut(self, links: list[int], seconds: float) -> None:
        for i in links:
            self.ring.link(False, f"s{i}", f"s{i + 1}")
        start = time.time()
        pause(seconds)
        for i in links:
            self.ring.link(True, f"s{i}", f"s{i + 1}")
        self.cuts.append((start, time.time(), links))
        self.heals.append(time.time())

    def kill_node(self, number: int, seconds: float) -> None:
        host = self.host(number)
        self.ring.kill_node(host, PORT)
        pause(seconds)
        join = next(n for n in range(1, HOSTS + 1) if n != number)
        self.ring.start_node(host, PORT, self.via(join))


def pause(seconds: float) -> None:
    """How long a phase of the schedule lasts (the experiment's timing, not a wait for anything)."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, 0.5))


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - Chaos
    workdir = tmp_path_factory.mktemp("consensus")
    with host_left_clean(), partitioned_ring(0, 0, workdir, graph=chain(HOSTS)) as ring:
        run = Chaos(ring, workdir)
        ring.start_nodes()
        assert ring.wait_ring(run.host(1), HOSTS)["seconds"] is not None
        for i in range(len(CANDIDATE_HOSTS)):
            run.start_candidate(f"c{i}", run.host_of(f"c{i}"))
        def first_leader() -> str | None:
            if all(p.poll() is not None for p in run.candidates.values()):
                raise RuntimeError("every candidate exited before one led")
            return run.leading()

        try:
            wait_for(first_leader, 60, interval=0.1, what="a first leader")
        except (TimeoutError, RuntimeError) as exc:
            raise AssertionError(f"{exc}; what the candidates and nodes said:\n{run.said()}") from None
        for i, number in enumerate(KV_HOSTS):
            run.spawn(number, "-m", "tests.helpers.kv_worker", "--via", run.via(number), "--name", f"w{i}",
                      "--seconds", str(SECONDS + 5), "--seed", str(i), "--rate", "20",
                      "--out", str(workdir / f"kv-{i}.jsonl"),
                      out=f"kv-{i}.log")
        follows = []
        for number in FOLLOW_HOSTS:
            ready = workdir / f"follow-{number}.ready"
            follows.append(run.spawn(number, "-m", "tests.helpers.follow", "--via", run.via(number), "--topic",
                                     "fenced", "--count", "1000000", "--seconds", str(SECONDS + 15), "--out",
                                     str(workdir / f"follow-{number}.json"), "--host", run.host(number).IP(),
                                     "--ready", str(ready), out=f"follow-{number}.log"))
            wait_for(ready.exists, 30, interval=0.05, what="a subscriber of the exclusive topic")
        for number, strength in ((STRONG, 2), (WEAK, 1)):
            run.spawn(number, "-m", "chordpub", "pub", "--via", run.via(number), "--topic", "fenced", "--host",
                      run.host(number).IP(), "--strength", str(strength), "--reliable", "--count", "0", "--rate",
                      "10", "--trace", str(workdir / f"pub-{number}.jsonl"), out=f"pub-{number}.log")

        def both_publish() -> bool:
            said = {p["strength"]: p.get("exclusive") or {} for p in run.topic_info("fenced").get("publishers", [])}
            return bool(said.get(2, {}).get("leading")) and said.get(1, {}).get("standby", 0) > 0

        wait_for(both_publish, 60, interval=0.5, what="the stronger publisher leading and the weaker standing by")
        end = time.monotonic() + SECONDS
        # the leading candidate cut off: it must stop first (the groups may still be moving to the hosts the
        # ring wants, and a group's leader that leaves it takes an election to replace: wait for one to lead)
        run.isolate(run.host_of(wait_for(run.leading, 10, interval=0.05, what="a leading candidate")), 6.0)
        pause(3.0)
        run.fence_cut = run.isolate(STRONG, 8.0)  # the stronger publisher cut off: the weaker takes over
        pause(4.0)  # the stronger one takes the topic back
        run.kill_leader()
        rng = random.Random(41)
        while time.monotonic() < end - 4:
            what = rng.choice(("cut", "cut", "node", "leader"))
            if what == "cut":
                run.cut(sorted(rng.sample(range(1, HOSTS), rng.choice((1, 1, 2)))), rng.uniform(2, 10))
            elif what == "node":
                run.kill_node(rng.randrange(2, HOSTS + 1), rng.uniform(2, 5))
            else:
                run.kill_leader()
            pause(3.0)  # a leader settles (and is measured) before the next blow
        for p in follows:
            p.wait(timeout=60)
        run.ended = time.time()
        stop_processes(ring.procs, grace=3)
        yield run


def intervals(run: Chaos) -> list[tuple[float, float, str, int]]:
    """(from, to, candidate, epoch) of every leadership, ended by its `lost` event or its SIGKILL."""
    out, open_ = [], {}
    for r in run.events():
        if r["event"] == "elected":
            open_[r["candidate"]] = (r["time"], r["epoch"])
        elif r["candidate"] in open_:
            start, epoch = open_.pop(r["candidate"])
            out.append((start, r["time"], r["candidate"], epoch))
    for name, (start, epoch) in open_.items():
        out.append((start, run.kills.get(name, run.ended), name, epoch))
    return sorted(out)


def test_never_two_leaders_and_epochs_grow(chaos):
    spans = intervals(chaos)
    assert len({(c, e) for _, _, c, e in spans}) >= 4, f"leadership changed hands too rarely to tell: {spans}"
    for (a1, b1, c1, e1), (a2, _, c2, e2) in zip(spans, spans[1:], strict=False):
        assert b1 < a2, f"{c1} led {a1:.3f}..{b1:.3f} (epoch {e1}) and {c2} from {a2:.3f} (epoch {e2})"
        assert e2 > e1 or (c2, e2) == (c1, e1), f"epoch {e2} of {c2} after {e1} of {c1}"


def test_a_killed_leader_and_a_healed_partition_have_a_leader_again_within_the_bound(chaos):
    spans = intervals(chaos)

    def leader_from(t: float) -> float:
        """Seconds from `t` until some candidate led (0: one led at `t` already)."""
        starts = [a for a, b, _, _ in spans if b > t]
        return max(0.0, min(starts) - t) if starts else float("inf")

    failovers = [round(leader_from(t), 3) for t in chaos.leader_kills]
    healed = [round(leader_from(t), 3) for t in chaos.heals]
    print(f"failover after a leader's SIGKILL: {failovers} s; a leader after a heal: {healed} s")
    assert failovers and max(failovers) <= FAILOVER, failovers
    assert healed and max(healed) <= FAILOVER, healed


def test_the_keys_history_is_linearizable(chaos):
    history = []
    for path in sorted(chaos.workdir.glob("kv-*.jsonl")):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            out = r["output"]
            if out is not None and r["kind"] == "get":
                out = (None if out[0] is None else out[0].encode(), out[1])
            elif out is not None:
                out = tuple(out)
            history.append(Op(r["key"], r["kind"], None if r["value"] is None else r["value"].encode(),
                              r["if_version"], out, r["call"], float("inf") if r["ret"] is None else r["ret"]))
    assert linearizable(history)
    done = [op for op in history if op.output is not None]
    assert len(done) >= 200 and any(op.output[0] == "refused" for op in done if op.kind != "get"), len(done)


def test_a_cut_off_exclusive_publisher_is_replaced_and_never_delivered_after_its_successor(chaos):
    strong = json.loads(chaos.workdir.joinpath(f"pub-{STRONG}.jsonl").read_text().splitlines()[0])["publisher"]
    weak_rows = [json.loads(x) for x in chaos.workdir.joinpath(f"pub-{WEAK}.jsonl").read_text().splitlines()]
    cut_from, cut_to = chaos.fence_cut
    assert any(cut_from < r["sent_ns"] / 1e9 < cut_to for r in weak_rows), "the weaker never took over in the cut"
    for number in FOLLOW_HOSTS:
        got = json.loads(chaos.workdir.joinpath(f"follow-{number}.json").read_text())
        epochs = got["epochs"]
        assert len(set(epochs)) >= 3 and strong in got["seqs"], "stronger, weaker, stronger again"
        assert epochs == sorted(epochs), "a message of an older epoch delivered after a newer one"
