"""The gRPC gateway (chordpub/gateway.py) as a process, between gRPC callers — Python's grpcio and
Node.js's @grpc/grpc-js, both loading the repository's .proto or its stubs — and native clients.

To see them fail: make `Gateway.Subscribe` skip `send_initial_metadata` ("no subscription": a
caller cannot tell when it may publish); make `Gateway._open` pass `pending_limit=10**9` to a plain
subscription (the gateway takes in everything a slow caller is sent: "the best-effort caller is told
what it lost", 0 > 0); make `Gateway._settle` skip `msg.commit()` (the restarted durable stream starts
over: 1 != 21). The callers' names, policies and deadlines: test_gateway_security.py.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
from contextlib import closing
from pathlib import Path

import grpc
import pytest

from chordpub import Client
from chordpub.launcher import stop_processes, wait_for
from chordpub.v1 import pubsub_pb2 as pb
from chordpub.v1 import pubsub_pb2_grpc as rpc
from tests.conftest import one_error_line, run_cli, start_module_ring
from tests.helpers.gateway import HB, Reader
from tests.helpers.node_grpc import node_grpc_modules

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from start_module_ring(tmp_path_factory, "gateway-ring", 2)


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



def test_a_grpc_subscription_to_a_pattern_gets_each_matching_topic_and_names_it(ring, gateway):
    """`Subscribe` takes a pattern as `Client.subscribe` does: each Delivery names its concrete topic."""
    via = ring.nodes[0].endpoint
    with Client(via, heartbeat=HB) as native:
        reader = Reader(gateway.stub, topic="grpc-p/+/v", reliable=True)
        reader.in_place()
        for i in range(10):
            for room in ("a", "b"):
                native.publish(f"grpc-p/{room}/v", f"{room}{i}")
            native.publish("grpc-p/a/other", "not matched")
        wait_for(lambda: len(reader.got) >= 20, 20, what="20 deliveries through the pattern")
        reader.close()
    for room in ("a", "b"):
        assert [d.payload for d in reader.got if d.topic == f"grpc-p/{room}/v"] == \
            [f"{room}{i}".encode() for i in range(10)]
    assert len(reader.got) == 20

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

        def members_joined() -> bool:  # else the native member, in the publisher's own process, may take every job
            native.advertise("grpc-jobs")
            with native.publishing.lock:
                crew = native.publishing.groups.stats("grpc-jobs").get("crew", {}).get("members", {})
            return sum(m["connected"] for m in crew.values()) == 3

        wait_for(members_joined, 30, what="the three members joined at the publisher")
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
