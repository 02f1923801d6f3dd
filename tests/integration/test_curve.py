"""--curve: CurveZMQ on every socket, admission by the keys in DIR/authorized, nothing readable on the wire."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import threading
from pathlib import Path

import pytest
import zmq.auth

from chordpub import Client
from dht.curve import Curve, start_authenticator, stop_authenticators
from tests.conftest import IN_CI, one_error_line, run_cli

ROLES = ("client", "node", "publisher", "server", "subscriber")


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("curve") / "keys"
    proc = run_cli("keys", "generate", str(directory), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["roles"] == sorted(ROLES)
    return directory


def test_keys_generate_writes_a_keypair_per_role_and_the_admitted_public_keys(keys):
    for role in ROLES:
        public, secret = zmq.auth.load_certificate(str(keys / f"{role}.key_secret"))
        assert len(public) == len(secret) == 40
        assert stat.S_IMODE((keys / f"{role}.key_secret").stat().st_mode) == 0o600
    admitted = sorted(p.name for p in (keys / "authorized").iterdir())
    assert admitted == [f"{r}.key" for r in ROLES if r != "server"]
    one_error_line(run_cli("keys", "generate", str(keys)), "already holds keys")


def test_a_curve_ring_serves_clients_with_the_keys_and_no_one_else(ring_factory, keys, tmp_path):
    ring = ring_factory(setup=Curve.load(keys, "client").setup, curve=keys)
    ring.start(3)
    ring.wait_consistent(30)
    ep = ring.nodes[0].endpoint
    served = run_cli("node", "info", ep, "--curve", str(keys), "--json")
    assert served.returncode == 0 and json.loads(served.stdout)["endpoint"] == ep
    check = run_cli("ring", "check", ep, "--curve", str(keys), "--json")
    assert check.returncode == 0 and json.loads(check.stdout)["nodes"] == 3
    # no keys at all: the CURVE handshake never completes, and the client says so after its timeout
    one_error_line(run_cli("node", "lookup", ep, "some-topic"), "no reply from", "--curve")
    # the server's public key but a client key that is not in authorized/: ZAP says no
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    for role in ROLES:
        shutil.copy(keys / f"{role}.key_secret", stranger / f"{role}.key_secret")
    shutil.copy(keys / "server.key", stranger / "server.key")
    (stranger / "authorized").mkdir()
    os.remove(stranger / "client.key_secret")
    zmq.auth.create_certificates(str(stranger), "client")
    one_error_line(run_cli("node", "lookup", ep, "some-topic", "--curve", str(stranger)), "no reply from")
    one_error_line(run_cli("node", "info", ep, "--curve", str(tmp_path / "missing")), "no keys directory")
    # one-shot commands need neither the server's secret nor the other roles' keys
    cli_only = tmp_path / "cli-only"
    (cli_only / "authorized").mkdir(parents=True)
    for name in ("server.key", "client.key", "client.key_secret"):
        shutil.copy(keys / name, cli_only / name)
    assert run_cli("node", "info", ep, "--curve", str(cli_only), "--json").returncode == 0


class LoopbackCapture:
    """Every frame on the loopback interface while active (AF_PACKET; needs root)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.1)
        self.data = bytearray()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.data += self.sock.recv(70000)
            except TimeoutError:
                continue

    def __enter__(self) -> LoopbackCapture:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


def exchange(ring, topic: str, payload: bytes, keys: Path | None) -> int:  # noqa: ANN001
    """A subscribing and a publishing Client (CURVE with `keys`) exchange 5 messages; returns how many
    arrived."""
    via = ring.nodes[0].endpoint
    with Client(via, curve=keys, role="subscriber") as subscriber, \
            Client(via, curve=keys, role="publisher") as publisher:
        sub = subscriber.subscribe(topic)
        for _ in range(5):
            publisher.publish(topic, payload)
        return sum(1 for _ in range(5) if sub.get(timeout=5) is not None)


@pytest.fixture
def capture_allowed():
    if os.geteuid() != 0:
        if IN_CI:
            pytest.fail("capturing loopback traffic needs root under CI")
        pytest.skip("capturing loopback traffic needs root")
    yield
    stop_authenticators()  # the ZAP thread this test started in our own process


def test_the_wire_carries_no_topic_and_no_payload_under_curve(ring_factory, keys, capture_allowed):
    curve = Curve.load(keys, "client")
    start_authenticator(curve)
    secure = ring_factory(setup=curve.setup, curve=keys)
    secure.start(2)
    secure.wait_consistent(30)
    with LoopbackCapture() as wire:
        assert exchange(secure, "topic-name-on-the-wire", b"PAYLOAD-IN-CLEAR-" * 4, keys) == 5
    assert b"topic-name-on-the-wire" not in wire.data
    assert b"PAYLOAD-IN-CLEAR-" not in wire.data
    # the same exchange without --curve shows both: the capture does see our traffic
    plain = ring_factory()
    plain.start(2)
    plain.wait_consistent(30)
    with LoopbackCapture() as wire:
        assert exchange(plain, "plain-topic-name", b"PLAIN-PAYLOAD-" * 4, None) == 5
    assert b"plain-topic-name" in wire.data and b"PLAIN-PAYLOAD-" in wire.data


def test_the_demo_runs_every_process_under_curve(keys, tmp_path):
    proc = run_cli("demo", "--curve", str(keys), "--seconds", "2", "--nodes", "3", "--lookups", "50",
                   "--out", str(tmp_path), "--json", "--no-analysis", timeout=240)  # (Spark's part: test_cli's)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert summary["lookups"] == 50 and summary["failed"] == 0
    assert "analysis" not in summary  # --no-analysis: no Spark session
    for mode in ("direct", "relay"):
        assert all(t["delivered"] > 0.5 * t["expected"] and t["duplicates"] == 0
                   for t in summary["pubsub"][mode].values())
    assert json.loads((Path(summary["run_dir"]) / "manifest.json").read_text())["config"]["curve"] == str(keys)


def test_on_a_curve_ring_a_pattern_follows_each_topic_its_records_name_from_its_first_message(ring_factory, keys):
    """On a CURVE ring a pattern subscription takes no topic on a publisher's own word: it puts no
    pattern filter on its socket (a pattern frame names its publisher and topic, unchecked), and follows
    each matching topic by the topic's exact filter once the topic's announcement names the publisher,
    from its first message.

    To see it fail, let a best-effort pattern take its topics by its frames on a CURVE ring too
    (`client.io.setup is None` gone from `by_frames`): its topic is followed by the pattern's frames."""
    curve = Curve.load(keys, "client")
    start_authenticator(curve)
    try:
        ring = ring_factory(setup=curve.setup, curve=keys)
        ring.start(2)
        ring.wait_consistent(30)
        via = ring.nodes[0].endpoint
        with Client(via, curve=keys, role="subscriber", heartbeat=0.5) as subscriber, \
                Client(via, curve=keys, role="publisher", heartbeat=0.5) as publisher:
            sub = subscriber.subscribe("secure/*")
            for i in range(3):
                publisher.publish("secure/a", f"m{i}")
            got = [sub.get(timeout=10) for _ in range(3)]
            assert [(m.topic, m.seq) for m in got if m is not None] == [("secure/a", n) for n in (1, 2, 3)]
            state = subscriber.io.topics["secure/a"]
            assert state.exact and state.via_pattern is None, "followed by the pattern's frames"
            assert not subscriber.io.intake.takers
    finally:
        stop_authenticators()
