"""Shared fixtures: real node processes on loopback, always stopped, even when a test fails."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from chordpub.launcher import LocalRing

PERIOD = 0.2  # stabilization period used by the ring tests (seconds)
IN_CI = os.environ.get("CI", "").lower() == "true"
# the suite's longest chains, started first when it is spread over workers (pytest-xdist)
FIRST = ("mininet", "spark", "test_chaos", "test_fuzz", "notebook")  # (the longest ring-test modules among
# them ran slower: the 10,000-topic pattern test took 131 s beside the Spark chain and the notebooks, 25 s
# among the unit tests)
# last in their worker's queue: away from the suite's first minutes, when every long chain starts at once (a
# node that had just joined answered no renewal for 7 s there, and 1,499 leases lapsed)
LATE = ("tests/mininet/test_autoscale.py",)
WAITING_SHARE = 0.85  # the ring tests' modules end this far into the unit tests' (`_spread`)
# ring-test modules of minutes, placed midway (`_spread`): last in the alphabet, the wildcards module ran alone
# for 40-75 s after the other workers had finished; first beside the long chains, it ran several times slower
LONG_RING_MODULES = ("tests/integration/test_wildcards.py",)
MIDWAY = 0.35


def suite_group(nodeid: str) -> str:
    """The worker queue a test must share: every Mininet test one (one emulated network at a time),
    every Spark test one (one JVM), each other module one (its module-scoped ring is started once); a
    notebook is a job of its own."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/mininet/"):
        return "mininet"
    if path.startswith("tests/spark/"):
        return "spark"
    return nodeid if path.endswith(".ipynb") else path


def _rank(item: pytest.Item) -> int:
    group = suite_group(item.nodeid)
    name = "notebook" if group == item.nodeid else Path(group).stem if "/" in group else group
    return FIRST.index(name) if name in FIRST else len(FIRST)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--vnodes", type=int, default=1, help="Ring positions each node process of the ring tests "
                     "holds (`node start --vnodes`): `make test PYTEST_ARGS='--vnodes 4 tests/integration/"
                     "test_ring.py tests/integration/test_chaos.py'` runs the ring and chaos tests on virtual nodes.")


@pytest.fixture(scope="session")
def vnodes(request: pytest.FixtureRequest) -> int:
    """Ring positions per node process of the rings `ring_factory` starts (the --vnodes option)."""
    return request.config.getoption("vnodes")


def _spread(items: list[pytest.Item]) -> dict[str, float]:
    """Where each module after the long chains goes, from 0 to 1: the ring tests' modules (which mostly
    wait on rings) spread among the unit tests' (which only compute), so that a worker waiting on a ring
    has one computing beside it rather than another waiting (a run's middle used 1.1-1.6 of the 2 cores
    when the unit tests all came last); the last stretch is unit modules alone, small enough to even
    out the workers' ends."""
    kinds: dict[str, list[str]] = {"tests/integration/": [], "tests/unit/": []}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        for prefix, paths in kinds.items():
            if path.startswith(prefix) and _rank(item) == len(FIRST) and path not in paths:
                paths.append(path)
    where = {path: i / len(paths) * (WAITING_SHARE if prefix == "tests/integration/" else 1.0)
             for prefix, paths in kinds.items() for i, path in enumerate(paths)}
    return where | {path: MIDWAY for path in where if path in LONG_RING_MODULES}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest chains first, so that no worker starts one when the others are nearly done; then the
    rest, spread (`_spread`)."""
    where = _spread(items)
    items.sort(key=lambda item: (_rank(item), item.nodeid.split("::", 1)[0] in LATE,
                                 where.get(item.nodeid.split("::", 1)[0], 0.0)))  # stable: a module's tests
    # keep their order


def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN001, ANN201 - xdist's types
    """Workers take whole groups (`suite_group`), in collection order."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def __init__(self, config: pytest.Config, log) -> None:  # noqa: ANN001
            super().__init__(config, log)
            config.option.loadscopereorder = False  # keep the order above

        def _split_scope(self, nodeid: str) -> str:
            return suite_group(nodeid)

    return GroupScheduling(config, log)


@pytest.fixture
def ring_factory(tmp_path: Path, vnodes: int):
    """make(**node_options) -> a LocalRing whose processes are all killed at teardown; each process holds
    --vnodes ring positions (the pytest option) unless the options say."""
    rings: list[LocalRing] = []

    def make(setup=None, **options) -> LocalRing:  # noqa: ANN001 - a dht.transport.SocketSetup
        defaults = {"stabilize": PERIOD, **({"vnodes": vnodes} if vnodes > 1 else {})}
        ring = LocalRing(tmp_path / f"ring{len(rings)}", options={**defaults, **options}, setup=setup)
        rings.append(ring)
        return ring

    yield make
    for ring in rings:
        ring.stop()
    leftovers = [n.proc.pid for r in rings for n in r.nodes if n.proc.poll() is None]
    assert not leftovers, f"node processes left running: {leftovers}"


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run `chordpub ARGS` as a user would (a process of its own, forked from the warm template as the
    launcher's are: dht/spawner.py); returns the completed process (text)."""
    from dht.spawner import start

    argv = [str(a) for a in args]
    with tempfile.TemporaryDirectory(prefix="cli-") as d:
        out, err = Path(d) / "out", Path(d) / "err"
        proc = start(argv, out, err=err)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        return subprocess.CompletedProcess([sys.executable, "-m", "chordpub", *argv], code, out.read_text(),
                                           err.read_text())


def one_error_line(proc: subprocess.CompletedProcess, *words: str) -> None:
    """The CLI's contract for bad input: non-zero exit, nothing on stdout, one line on stderr."""
    assert proc.returncode != 0
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


def start_module_ring(tmp_path_factory, name: str, nodes: int, **options):  # noqa: ANN001, ANN201
    """A consistent ring of `nodes` processes for a test module (use as a generator fixture body)."""
    ring = LocalRing(tmp_path_factory.mktemp(name), options={"stabilize": PERIOD, **options})
    try:
        ring.start(nodes)
        ring.wait_consistent(timeout=60, fingers=True)
        yield ring
    finally:
        ring.stop()


def start_ready(module: str, argv: list[str], out: Path, err: Path, ready: str, started: list | None = None,
                timeout: float = 120.0):  # noqa: ANN201 - a Popen or a ForkedProcess
    """`python -m MODULE ARGV` forked from the template (dht/spawner.py `start`: a test's helper starts as
    cheaply as a node), its stdout to the new file `out` and its stderr to `err`, returned (and appended to
    `started`) once it has printed the line `ready`; one that exits first fails the test with its errors."""
    from dht.processes import wait_for
    from dht.spawner import start

    out.unlink(missing_ok=True)
    p = start(argv, out, err, module=module)
    if started is not None:
        started.append(p)
    said = f"{ready}\n"
    wait_for(lambda: p.poll() is not None or said in out.read_text(), timeout, what=f"{module} {ready}")
    assert p.poll() is None, f"{module} exited ({p.returncode}): {err.read_text()[-2000:]}"
    return p


@pytest.fixture
def procs(tmp_path: Path):
    """spawn(name, *cli_args) -> a `chordpub` process (dht/spawner.py's `start`: a Popen or its forked
    like), logging to tmp_path/name.log; all killed at teardown."""
    from chordpub.launcher import stop_processes
    from dht.spawner import ForkedProcess, start

    started: list[subprocess.Popen | ForkedProcess] = []

    def spawn(name: str, *args: str) -> subprocess.Popen | ForkedProcess:
        p = start(list(args), tmp_path / f"{name}.log")
        started.append(p)
        return p

    yield spawn
    stop_processes(started, grace=3)


def jsonl(path: Path) -> list[dict]:
    """The whole JSON lines of a file a process may still be writing (a torn last line is skipped)."""
    import json

    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]


class JsonlTail:
    """The complete JSON lines a process appends to a file, read from where the last call stopped: a poll
    of a file of 100,000 rows costs the rows added since, not all of them (re-reading them every half
    second held the GIL of the test process, whose Client then renewed its leases late)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def new(self) -> list[dict]:
        import json

        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1  # a torn last line waits for its end
        self.offset += end
        return [json.loads(x) for x in chunk[:end].splitlines() if x.endswith(b"}")]


class ClientParts:
    """A client's io loop and registrar, built (sockets bound) but never started: their handlers are
    called directly, as the threads would call them."""

    def __init__(self) -> None:
        import zmq

        from dht.rpc_server import RpcServer
        from pubsub.io_loop import IoLoop
        from pubsub.publishing import PublishingSide
        from pubsub.registrar import Registrar
        from pubsub.service import SERVICE_SCHEMAS

        self.context = zmq.Context()
        service = RpcServer("127.0.0.1", 0, lambda _r: {}, context=self.context, schemas=SERVICE_SCHEMAS)
        self.publishing = PublishingSide(self.context, "127.0.0.1", service.endpoint, None)
        self.io = IoLoop(service, self.publishing, self.context, None, heartbeat=1.0)
        self.registrar = Registrar("127.0.0.1:1", self.context, None, heartbeat=1.0)

    def close(self) -> None:
        self.io.close_unstarted()
        self.registrar.close_unstarted()
        self.publishing.close()
        self.context.destroy(linger=0)


@pytest.fixture
def parts():
    p = ClientParts()
    yield p
    p.close()


@pytest.fixture
def worker_processes(tmp_path: Path):
    """start(name, via, topic, group, **options) -> (process, output file): consumer-group members as
    processes of their own (tests/helpers/worker.py), all stopped at teardown."""
    from chordpub.launcher import stop_processes

    started: list[subprocess.Popen] = []

    def start(name: str, via: str, topic: str, group: str, **options: object) -> tuple[subprocess.Popen, Path]:
        out = tmp_path / f"{name}.jsonl"
        args = ["--via", via, "--topic", topic, "--group", group, "--out", str(out)]
        for k, v in options.items():
            args += [f"--{k.replace('_', '-')}"] + ([] if v is True else [str(v)])
        p = start_ready("tests.helpers.worker", args, tmp_path / f"{name}.stdout", tmp_path / f"{name}.log", "ready",
                        started)
        return p, out

    yield start
    stop_processes(started, grace=5)
