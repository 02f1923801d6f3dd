"""The gRPC gateway (chordpub/gateway.py) as a process, between gRPC callers — Python's grpcio and
Node.js's @grpc/grpc-js, both loading the repository's .proto or its stubs — and native clients.

To see them fail: make `Gateway.Subscribe` skip `send_initial_metadata` ("no subscription": a
caller cannot tell when it may publish); make `Gateway._open` pass `pending_limit=10**9` to a plain
subscription (the gateway takes in everything a slow caller is sent: "the best-effort caller is told
what it lost", 0 > 0); make `Gateway._settle` skip `msg.commit()` (the restarted durable stream starts
over: 1 != 21); make `Gateway._allowed` return at once (the policy's refusals succeed: "DID NOT RAISE"); make
`Gateway.Subscribe` skip `context.add_callback` (a stream that ended keeps its subscription: "the
expired stream's subscription gone from the record ... not reached").
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path

import grpc
import pytest

from chordpub import Client
from chordpub.launcher import LocalRing, stop_processes, wait_for
from chordpub.v1 import pubsub_pb2 as pb
from chordpub.v1 import pubsub_pb2_grpc as rpc
from tests.conftest import one_error_line, run_cli, start_module_ring
from tests.helpers.node_grpc import node_grpc_modules
from tests.helpers.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]
HB = 0.3


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from start_module_ring(tmp_path_factory, "gateway-ring", 2)


class GatewayProcess:
    """`chordpub gateway` as a process, and a channel to it (TLS when `tls_ca` is given, presenting the
    `client` (key, certificate) pair if any)."""

    def __init__(self, via: str, workdir: Path, port: int | None = None, *args: str, tls_ca: Path | None = None,
                 client: tuple[Path, Path] | None = None) -> None:
        self.via, self.workdir, self.args = via, workdir, args
        self.tls_ca, self.client = tls_ca, client
        self.port = port or free_ports(1)[0]
        self.data = workdir / "gateway-data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.start()

    def start(self) -> None:
        self.log = self.workdir / "gateway.log"
        self.proc = subprocess.Popen([sys.executable, "-m", "chordpub", "gateway", "--via", self.via, "--listen",
                                      f"127.0.0.1:{self.port}", "--data-dir", str(self.data), "--heartbeat",
                                      str(HB), *self.args], stdout=subprocess.DEVNULL,
                                     stderr=open(self.log, "a"), start_new_session=True)  # noqa: SIM115
        if self.tls_ca is None:
            self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        else:
            key, cert = (self.client[0].read_bytes(), self.client[1].read_bytes()) if self.client else (None, None)
            self.channel = grpc.secure_channel(f"127.0.0.1:{self.port}", grpc.ssl_channel_credentials(
                self.tls_ca.read_bytes(), private_key=key, certificate_chain=cert))
        grpc.channel_ready_future(self.channel).result(timeout=30)
        self.stub = rpc.PubSubStub(self.channel)

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) / 1024

    def stop(self, sig: int = signal.SIGTERM) -> None:
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def gateway(ring, tmp_path):
    gw = GatewayProcess(ring.nodes[0].endpoint, tmp_path)
    yield gw
    gw.stop()
    stop_processes([gw.proc], grace=1)


class Reader:
    """A Subscribe stream read on a thread; `in_place()` once the gateway says the subscription is."""

    def __init__(self, stub: rpc.PubSubStub, slow: float = 0.0, **request) -> None:  # noqa: ANN003
        self.call = stub.Subscribe(pb.SubscribeRequest(**request))
        self.got: list[pb.Delivery] = []
        self.error: grpc.RpcError | None = None
        self.slow = slow
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def in_place(self) -> None:
        assert dict(self.call.initial_metadata()).get("chordpub-subscribed"), "no subscription"

    def _read(self) -> None:
        try:
            for d in self.call:
                self.got.append(d)
                if self.slow:
                    time.sleep(self.slow)  # a caller that reads slowly (its own work)
        except grpc.RpcError as exc:
            self.error = exc

    def close(self) -> None:
        self.call.cancel()
        self.thread.join(10)


def test_grpc_callers_publish_to_native_subscribers_and_read_native_publishers(ring, gateway):
    via = ring.nodes[1].endpoint
    topics = ["grpc-a", "grpc-b", "grpc-c"]
    got: dict[str, list[bytes]] = {t: [] for t in topics}
    with Client(via, heartbeat=HB) as native:
        for t in topics:
            native.subscribe(t, callback=lambda m: got[m.topic].append(m.payload))
        for i in range(50):
            assert gateway.stub.Publish(pb.PublishRequest(topic="grpc-a", payload=bytes([i, 255, 0]))).seq == i + 1
        reply = gateway.stub.PublishStream(iter([pb.PublishRequest(topic=t, payload=f"{t}{i}".encode())
                                                 for i in range(50) for t in ("grpc-b", "grpc-c")]))
        assert reply.published == 100
        wait_for(lambda: all(len(v) == 50 for v in got.values()), 20, what="every message at the native subscriber")
        assert got["grpc-a"] == [bytes([i, 255, 0]) for i in range(50)]
        assert got["grpc-b"] == [f"grpc-b{i}".encode() for i in range(50)]

        native.advertise("native-src", reliable=True, history=100)
        for i in range(30):
            native.publish("native-src", f"early {i}")
        history = Reader(gateway.stub, topic="native-src", history=20)
        reliable = Reader(gateway.stub, topic="native-src", reliable=True)
        history.in_place()
        reliable.in_place()
        for i in range(30):
            native.publish("native-src", f"late {i}")
        wait_for(lambda: len(reliable.got) == 60 and len(history.got) == 50, 20, what="both gRPC subscribers")
        history.close()
        reliable.close()
    assert [d.seq for d in reliable.got] == list(range(1, 61)), "reliable: in order from the first message"
    assert [d.seq for d in history.got] == list(range(11, 61)) and all(d.recovered for d in history.got[:20])
    assert not any(d.recovered for d in history.got[20:]) and history.got[-1].payload == b"late 29"


NODE_SCRIPT = r"""
const grpc = require('@grpc/grpc-js');
const loader = require('@grpc/proto-loader');
const [proto, address, subTopic, pubTopic, payloadsB64] = process.argv.slice(2);
const def = loader.loadSync(proto, {keepCase: true, longs: String, defaults: true, includeDirs: []});
const v1 = grpc.loadPackageDefinition(def).chordpub.v1;
const client = new v1.PubSub(address, grpc.credentials.createInsecure());
const payloads = JSON.parse(payloadsB64).map(b => Buffer.from(b, 'base64'));
const received = [];
let published = 0;
const finish = () => {
  if (received.length < payloads.length || published < payloads.length) return;
  console.log(JSON.stringify({received}));
  call.cancel();
  client.close();
};
const call = client.Subscribe({topic: subTopic});
call.on('metadata', () => {
  console.log(JSON.stringify({subscribed: true}));
  const next = () => {
    if (published === payloads.length) return finish();
    client.Publish({topic: pubTopic, payload: payloads[published]}, (err, reply) => {
      if (err) { console.error(err.message); process.exit(3); }
      published += 1;
      next();
    });
  };
  next();
});
call.on('data', d => {
  received.push(Buffer.from(d.payload).toString('base64'));
  finish();
});
call.on('error', e => { if (e.code !== grpc.status.CANCELLED) { console.error(e.message); process.exit(4); } });
setTimeout(() => { console.error('timed out'); process.exit(5); }, 60000).unref();
"""


@pytest.fixture(scope="module")
def node_modules() -> Path:
    return node_grpc_modules()


def test_a_nodejs_client_publishes_and_subscribes_the_same_bytes(ring, gateway, node_modules, tmp_path):
    payloads = [os.urandom(n) for n in (1, 17, 300, 4096)] + [b"\x00\xff" * 50, "héllo ✓".encode()]
    script = tmp_path / "client.js"
    script.write_text(NODE_SCRIPT)
    with Client(ring.nodes[1].endpoint, heartbeat=HB) as native:
        got: list[bytes] = []
        native.subscribe("from-node", callback=lambda m: got.append(m.payload))
        native.advertise("to-node")
        env = {**os.environ, "NODE_PATH": str(node_modules)}
        proc = subprocess.Popen(["node", str(script), str(ROOT / "proto" / "chordpub" / "v1" / "pubsub.proto"),
                                 f"127.0.0.1:{gateway.port}", "to-node", "from-node",
                                 json.dumps([base64.b64encode(p).decode() for p in payloads])],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            assert json.loads(proc.stdout.readline()) == {"subscribed": True}, proc.stderr.read()
            for p in payloads:  # the native publisher's messages reach the Node.js subscriber...
                native.publish("to-node", p)
            out, err = proc.communicate(timeout=60)
        finally:
            stop_processes([proc], grace=1)
        assert proc.returncode == 0, err
        wait_for(lambda: len(got) == len(payloads), 20, what="the Node.js publisher's messages")
    received = [base64.b64decode(b) for b in json.loads(out.splitlines()[-1])["received"]]
    assert received == payloads, "the Node.js subscriber got the same bytes"
    assert got == payloads, "and the native subscriber got the Node.js publisher's, byte for byte"


def test_health_and_reflection(gateway):
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    health = health_pb2_grpc.HealthStub(gateway.channel)
    for service in ("", "chordpub.v1.PubSub"):
        assert health.Check(health_pb2.HealthCheckRequest(service=service)).status == \
            health_pb2.HealthCheckResponse.SERVING
    reflect = reflection_pb2_grpc.ServerReflectionStub(gateway.channel)
    reply = next(reflect.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
    assert "chordpub.v1.PubSub" in {s.name for s in reply.list_services_response.service}


def test_bad_input_gets_the_right_status_and_the_other_streams_go_on(ring, gateway, tmp_path):
    stub = gateway.stub
    watcher = Reader(stub, topic="still-served")
    watcher.in_place()
    cases = [
        (lambda: stub.Publish(pb.PublishRequest(topic="", payload=b"x")), grpc.StatusCode.INVALID_ARGUMENT,
         "a topic is"),
        (lambda: stub.Publish(pb.PublishRequest(topic="t", payload=b"x" * 1_000_001)),
         grpc.StatusCode.INVALID_ARGUMENT, "at most 1000000 bytes"),
        (lambda: stub.Publish(pb.PublishRequest(topic="t", payload=b"x", priority=12)),
         grpc.StatusCode.INVALID_ARGUMENT, "priority"),
        (lambda: next(iter(stub.Subscribe(pb.SubscribeRequest(topic="t", group="bad/name"))), None),
         grpc.StatusCode.INVALID_ARGUMENT, "group name"),
        (lambda: stub.Ack(pb.SettleRequest(delivery_ids=["999/someone/1/1"])), grpc.StatusCode.NOT_FOUND,
         "no delivery held"),
    ]
    for call, code, words in cases:
        with pytest.raises(grpc.RpcError) as exc:
            call()
        assert exc.value.code() == code and words in exc.value.details(), (code, exc.value.details())
        assert "\n" not in exc.value.details()
    gateway.stub.Publish(pb.PublishRequest(topic="still-served", payload=b"after the errors"))
    wait_for(lambda: [d.payload for d in watcher.got] == [b"after the errors"], 10, what="the other stream served")
    watcher.close()
    one_error_line(run_cli("gateway", "--via", ring.nodes[0].endpoint, "--listen", "127.0.0.1:0", "--tls-cert",
                           str(tmp_path / "missing.pem"), "--tls-key", str(tmp_path / "missing.key")), "cannot read")
    one_error_line(run_cli("gateway", "--via", ring.nodes[0].endpoint, "--tls-cert", "x.pem"), "go together")


def test_a_slow_grpc_subscriber_holds_the_gateways_memory_bounded_and_is_told_what_it_lost(ring, gateway):
    """60 s of a native publisher at 200 msg/s of 1 kB, two gRPC callers reading 20 a second. Their
    channel keeps HTTP/2's window small (64 kB, no BDP probing), else grpcio would read ahead into the
    caller's memory and the caller would not be slow at the gateway at all."""
    slow_channel = grpc.insecure_channel(f"127.0.0.1:{gateway.port}", options=[
        ("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 65536)])
    stub = rpc.PubSubStub(slow_channel)
    with Client(ring.nodes[1].endpoint, heartbeat=HB) as native, closing(slow_channel):
        native.advertise("firehose", reliable=True, history=20_000)
        best_effort = Reader(stub, slow=0.05, topic="firehose")
        reliable = Reader(stub, slow=0.05, topic="firehose", reliable=True)
        best_effort.in_place()
        reliable.in_place()
        rss, t0, sent = [], time.monotonic(), 0
        while time.monotonic() - t0 < 60:
            sent = native.publish("firehose", os.urandom(1000))
            if sent % 1000 == 0:
                rss.append(gateway.rss_mb())
            time.sleep(max(t0 + sent / 200 - time.monotonic(), 0))  # pacing the publisher at 200 a second
        best_effort.close()
        reliable.close()
    settled = rss[3:]  # after the first 20 s: queues full, allocator warm
    dropped = best_effort.got[-1].dropped + best_effort.got[-1].lost
    lag_ms = (time.time_ns() - reliable.got[-1].sent_ns) / 1e6
    assert max(settled) - min(settled) < 30, f"the gateway's RSS moved {rss} MB"
    assert dropped > 0 and len(best_effort.got) < sent, "the best-effort caller is told what it lost"
    assert [d.seq for d in reliable.got] == list(range(1, len(reliable.got) + 1)), "reliable: in order, nothing lost"
    assert len(reliable.got) < sent / 5 and lag_ms > 10_000, "the reliable caller is held back, not fed ahead"
    print(f"gateway: {sent} sent in 60 s; RSS {min(rss):.0f}-{max(rss):.0f} MB; best effort got "
          f"{len(best_effort.got)} and was told {dropped} dropped; reliable got {len(reliable.got)}, in order, "
          f"{lag_ms / 1000:.0f} s behind")


def test_a_durable_grpc_subscription_resumes_after_the_gateway_is_killed(ring, gateway):
    with Client(ring.nodes[1].endpoint, heartbeat=HB) as native:
        native.advertise("ledger")
        first = Reader(gateway.stub, topic="ledger", durable="books", manual_ack=True)
        first.in_place()
        for i in range(30):
            native.publish("ledger", f"entry {i + 1}")
        wait_for(lambda: len(first.got) == 30, 20, what="30 entries")
        acked = gateway.stub.Ack(pb.SettleRequest(delivery_ids=[d.delivery_id for d in first.got[:20]]))
        assert acked.settled == 20
        gateway.stop(signal.SIGKILL)
        first.close()
        for i in range(30, 50):
            native.publish("ledger", f"entry {i + 1}")
        gateway.start()
        again = Reader(gateway.stub, topic="ledger", durable="books", manual_ack=True)
        wait_for(lambda: len(again.got) >= 30, 30, what="the rest after the restart")
        again.close()
    assert [d.seq for d in again.got[:30]] == list(range(21, 51)), "resumed after the last acknowledged entry"
    assert all(d.redelivered for d in again.got[:10]) and not any(d.redelivered for d in again.got[10:30])


def make_certs(d: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1, and a client certificate whose common name is alice."""
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=test-ca")
    for name, extra in (("server", "subjectAltName=IP:127.0.0.1"), ("alice", "extendedKeyUsage=clientAuth")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={'127.0.0.1' if name == 'server' else name}")
        (d / f"{name}.ext").write_text(extra + "\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")
    return {n: d / n for n in ("ca.pem", "server.pem", "server.key", "alice.pem", "alice.key")}


POLICY = """
[principals.alice.publish]
allow = ["open/>"]
[principals.alice.subscribe]
allow = ["open/>"]
[principals.bob.subscribe]
allow = ["open/>"]
"""


def test_callers_named_by_client_certificate_or_bearer_token_are_held_to_the_policy(ring, tmp_path):
    """TLS with client certificates (alice by her certificate's common name), and bearer tokens (bob),
    each under the policy: what it allows goes through, what it does not is PERMISSION_DENIED, an
    unknown token UNAUTHENTICATED, a caller without a certificate is not served at all."""
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make the test's certificates")
    certs = make_certs(tmp_path)
    (tmp_path / "acl.toml").write_text(POLICY)
    (tmp_path / "tokens").write_text("# token principal\ns3cret-bob bob\n")
    tls = GatewayProcess(ring.nodes[0].endpoint, tmp_path / "tls", None, "--acl", str(tmp_path / "acl.toml"),
                         "--tls-cert", str(certs["server.pem"]), "--tls-key", str(certs["server.key"]),
                         "--tls-client-ca", str(certs["ca.pem"]), tls_ca=certs["ca.pem"],
                         client=(certs["alice.key"], certs["alice.pem"]))
    tokens = GatewayProcess(ring.nodes[0].endpoint, tmp_path / "tokens-gw", None, "--acl", str(tmp_path / "acl.toml"),
                            "--tokens", str(tmp_path / "tokens"))
    try:
        alice = tls.stub
        assert alice.Publish(pb.PublishRequest(topic="open/news", payload=b"by alice")).seq == 1
        with pytest.raises(grpc.RpcError) as exc:
            alice.Publish(pb.PublishRequest(topic="closed/news", payload=b"x"))
        assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED and "alice" in exc.value.details()
        anonymous = grpc.secure_channel(f"127.0.0.1:{tls.port}", grpc.ssl_channel_credentials(
            certs["ca.pem"].read_bytes()))
        with closing(anonymous), pytest.raises(grpc.RpcError) as exc:
            rpc.PubSubStub(anonymous).Publish(pb.PublishRequest(topic="open/news", payload=b"x"), timeout=5)
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE, "no client certificate: no connection"

        bob = [("authorization", "Bearer s3cret-bob")]
        feed = tokens.stub.Subscribe(pb.SubscribeRequest(topic="open/feed"), metadata=bob)
        assert dict(feed.initial_metadata()).get("chordpub-subscribed") == "open/feed"
        feed.cancel()
        for call, words in ((lambda: tokens.stub.Publish(pb.PublishRequest(topic="open/feed", payload=b"x"),
                                                          metadata=bob), "bob"),
                            (lambda: tokens.stub.Publish(pb.PublishRequest(topic="open/feed", payload=b"x")), ""),
                            (lambda: next(tokens.stub.Subscribe(pb.SubscribeRequest(topic="closed/feed"),
                                                                metadata=bob)), "bob")):
            with pytest.raises(grpc.RpcError) as exc:
                call()
            assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED and words in exc.value.details()
        with pytest.raises(grpc.RpcError) as exc:
            tokens.stub.Publish(pb.PublishRequest(topic="open/feed", payload=b"x"),
                                metadata=[("authorization", "Bearer guessed")])
        assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        tls.stop()
        tokens.stop()
    one_error_line(run_cli("gateway", "--via", ring.nodes[0].endpoint, "--acl", str(tmp_path / "acl.toml")),
                   "--tokens")


def test_a_callers_deadline_ends_its_stream_and_a_dead_ring_is_unavailable(ring, gateway, tmp_path):
    """A Subscribe with a deadline ends with DEADLINE_EXCEEDED and the gateway unsubscribes it from the
    ring (the record forgets it); a gateway whose ring no longer answers says UNAVAILABLE."""
    watched = Reader(gateway.stub, topic="with-a-deadline")
    watched.in_place()
    with pytest.raises(grpc.RpcError) as exc:
        for _ in gateway.stub.Subscribe(pb.SubscribeRequest(topic="with-a-deadline"), timeout=1.5):
            pass
    assert exc.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_for(lambda: gateway.stub.TopicInfo(pb.TopicInfoRequest(topic="with-a-deadline")).subscribers == 1, 20,
             what="the expired stream's subscription gone from the record (the other one stays)")
    watched.close()
    wait_for(lambda: gateway.stub.TopicInfo(pb.TopicInfoRequest(topic="with-a-deadline")).subscribers == 0, 20,
             what="a cancelled stream's subscription gone from the record")

    lone = LocalRing(tmp_path / "lone", options={"stabilize": 0.3})
    try:
        lone.start(1)
        alone = GatewayProcess(lone.nodes[0].endpoint, tmp_path / "alone", None, "--connect-timeout", "2")
        try:
            lone.kill(lone.nodes[0])
            with pytest.raises(grpc.RpcError) as exc:
                alone.stub.Publish(pb.PublishRequest(topic="nobody-answers", payload=b"x"), timeout=30)
            assert exc.value.code() == grpc.StatusCode.UNAVAILABLE and "within" in exc.value.details(), \
                exc.value.details()
        finally:
            alone.stop()
    finally:
        lone.stop()


def test_grpc_callers_share_a_topic_as_a_consumer_group_and_nak_sends_a_message_again(ring, gateway):
    """Two gRPC members of one group and a native one, 5 unacknowledged messages each at most: each
    message to one of them; a message a gRPC member naks comes again (to any member, flagged
    redelivered), one it acks does not."""
    with Client(ring.nodes[1].endpoint, heartbeat=HB) as native:
        mine: list = []
        native.subscribe("grpc-jobs", group="crew", prefetch=5, callback=lambda m: mine.append(m.seq))
        a = Reader(gateway.stub, topic="grpc-jobs", group="crew", manual_ack=True, prefetch=5)
        b = Reader(gateway.stub, topic="grpc-jobs", group="crew", manual_ack=True, prefetch=5)
        a.in_place()
        b.in_place()
        settled: set[str] = set()
        naked: list[int] = []

        def settle() -> int:
            """Ack what the gRPC members got, except the first delivery of all: nak it."""
            for d in [*a.got, *b.got]:
                if d.delivery_id in settled:
                    continue
                settled.add(d.delivery_id)
                nak = not naked
                if nak:
                    naked.append(d.seq)
                how = gateway.stub.Nak if nak else gateway.stub.Ack
                assert how(pb.SettleRequest(delivery_ids=[d.delivery_id])).settled == 1
            return len(settled)

        for i in range(60):
            native.publish("grpc-jobs", f"job {i + 1}")
        wait_for(lambda: settle() + len(mine) >= 61, 30, interval=0.05, what="every job, and the naked one again")
        seen = [d.seq for d in [*a.got, *b.got]] + mine
        a.close()
        b.close()
    assert sorted(seen) == sorted([*range(1, 61), *naked]), "each job once, the naked one twice"
    again = [d for d in [*a.got, *b.got] if d.seq == naked[0] and d.deliveries == 2]
    assert (again and again[0].redelivered) or mine.count(naked[0]) == 1
    assert a.got and b.got, "both gRPC members had a share"
