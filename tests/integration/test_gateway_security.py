"""The gRPC gateway's security and limits: callers named by client certificate or bearer token and
held to a policy, a caller's deadline, a ring that no longer answers (chordpub/gateway.py; docs/grpc.md).

To see them fail: make `Gateway._allowed` return at once (the policy's refusals succeed: "DID NOT
RAISE"); make `Gateway._withheld` withhold nothing (bob's pattern gets open/secret); make
`Gateway.Subscribe` skip `context.add_callback` (a stream that ended keeps its subscription: "the
expired stream's subscription gone from the record ... not reached").
"""

from __future__ import annotations

import shutil
from contextlib import closing

import grpc
import pytest

from chordpub.launcher import LocalRing, wait_for
from chordpub.v1 import pubsub_pb2 as pb
from chordpub.v1 import pubsub_pb2_grpc as rpc
from tests.conftest import one_error_line, run_cli, start_module_ring
from tests.helpers.gateway import GatewayProcess, Reader, make_certs


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    yield from start_module_ring(tmp_path_factory, "gateway-security-ring", 2)


POLICY = """
[principals.alice.publish]
allow = ["open/>"]
[principals.alice.subscribe]
allow = ["open/>"]
[principals.bob.subscribe]
allow = ["open/>"]
deny = ["open/secret"]
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
        pattern = Reader(tokens.stub, metadata=bob, topic="open/*")  # the gateway's own key reads all of it
        pattern.in_place()
        for _ in range(3):
            for topic in ("open/a", "open/secret"):
                alice.Publish(pb.PublishRequest(topic=topic, payload=topic.encode()))
        wait_for(lambda: len(pattern.got) >= 3, 15, what="bob's pattern: the open topics he may read")
        pattern.close()
        assert {d.topic for d in pattern.got} == {"open/a"}, "nothing of open/secret reaches bob"
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
