"""Per-topic authorization where the bytes flow: a curve ring and publishers under one policy file.

A matrix of principals x operations x patterns through the Python API (and a sample through the CLI);
a raw pyzmq CURVE peer with a valid key that may not read a topic gets none of it — live, history,
relay; a prefix that overlaps a denied topic gets nothing of it; a policy changed on disk takes
effect within two heartbeats; bad policies are one line.

To see them fail: make `Gate.take` apply every subscription (`allowed = True`): the raw peer receives
the topic it may not read; make `ChordNode._denied` return None: the matrix's refusals succeed; make
`PublishingSide.check_policy` return at once: the newly denied subscriber keeps receiving.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import msgpack
import pytest
import zmq

from chordpub import Client
from chordpub.launcher import wait_for
from dht.curve import Curve
from pubsub.envelope import Envelope, topic_filter
from tests.conftest import one_error_line, run_cli
from tests.helpers.prometheus import scrape, value

HB = 0.5
PRINCIPALS = ("alice", "bob", "carol", "snoop")
POLICY = """
[principals.alice.publish]
allow = ["news/sports", "news/*/live", "logs/>"]
deny = ["logs/secret/>"]
[principals.alice.subscribe]
allow = ["news/>"]
deny = ["news/hidden"]

[principals.bob.subscribe]
allow = ["logs/>", "news/sports", "open/>"]
deny = ["open/private"]
[principals.bob.publish]
allow = ["bob/*"]

[principals.carol.publish]
allow = ["*", "open/>"]
deny = ["forbidden"]

[principals.snoop.subscribe]
allow = ["nothing/at/all"]
"""

# principal, operation, topic, allowed: each cell asserted through the API
MATRIX = [
    ("alice", "publish", "news/sports", True),           # exact
    ("alice", "publish", "news/football", False),        # exact elsewhere, default deny
    ("alice", "publish", "news/eu/live", True),           # *
    ("alice", "publish", "news/eu/west/live", False),     # * is one level
    ("alice", "publish", "logs/app", True),               # >
    ("alice", "publish", "logs/app/errors", True),        # > takes the rest
    ("alice", "publish", "logs", False),                  # > needs one level
    ("alice", "publish", "logs/secret/keys", False),      # deny over allow
    ("alice", "subscribe", "news/weather", True),
    ("alice", "subscribe", "news/hidden", False),         # deny over allow
    ("alice", "subscribe", "logs/app", False),
    ("bob", "subscribe", "logs/app/errors", True),
    ("bob", "subscribe", "news/sports", True),
    ("bob", "subscribe", "news/weather", False),
    ("bob", "subscribe", "open/private", False),          # deny over an overlapping >
    ("bob", "publish", "bob/notes", True),
    ("bob", "publish", "news/sports", False),
    ("carol", "publish", "anything", True),               # * at the top level
    ("carol", "publish", "forbidden", False),
    ("carol", "publish", "two/levels", False),
    ("carol", "subscribe", "anything", False),            # nothing allows it
    ("snoop", "subscribe", "news/sports", False),
]


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("acl") / "keys"
    assert run_cli("keys", "generate", str(directory)).returncode == 0
    for name in PRINCIPALS:
        added = run_cli("keys", "add", name, str(directory), "--json")
        assert added.returncode == 0 and json.loads(added.stdout)["principal"] == name, added.stderr
    one_error_line(run_cli("keys", "add", "alice", str(directory)), "already holds")
    return directory


@pytest.fixture(scope="module")
def acl(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("policy") / "acl.toml"
    path.write_text(POLICY)
    return path


@pytest.fixture(scope="module")
def ring(tmp_path_factory, keys, acl):
    from chordpub.launcher import LocalRing

    ring = LocalRing(tmp_path_factory.mktemp("acl-ring"), options={"stabilize": 0.2, "curve": keys, "acl": acl},
                     setup=Curve.load(keys, "client").setup)
    try:
        ring.start(3)
        ring.wait_consistent(timeout=60)
        yield ring
    finally:
        ring.stop()


def client(ring, keys: Path, principal: str, acl: Path | None = None, **options) -> Client:  # noqa: ANN001, ANN003
    return Client(ring.nodes[0].endpoint, curve=keys, role=principal, heartbeat=HB, acl=acl, **options)


def test_the_matrix_of_principals_operations_and_patterns(ring, keys, acl):
    clients = {p: client(ring, keys, p, acl) for p in ("alice", "bob", "carol", "snoop")}
    outcomes = {}
    try:
        for principal, op, topic, _ in MATRIX:
            c = clients[principal]
            try:
                if op == "publish":
                    c.advertise(topic)
                else:
                    c.subscribe(topic).unsubscribe()
                outcomes[(principal, op, topic)] = True
            except PermissionError as exc:
                assert str(exc).startswith(f"permission denied: {principal} may not {op} {topic!r} ("), exc
                outcomes[(principal, op, topic)] = False
        # refused, the client still serves its other topics
        seen = []
        clients["bob"].subscribe("news/sports", callback=lambda m: seen.append(m.text))
        clients["alice"].publish("news/sports", "goal")
        wait_for(lambda: seen == ["goal"], 10, what="bob's allowed topic after his refusals")
    finally:
        for c in clients.values():
            c.close()
    assert outcomes == {(p, o, t): allowed for p, o, t, allowed in MATRIX}
    via = ring.nodes[1].endpoint
    refused = run_cli("sub", "--via", via, "--topic", "news/hidden", "--curve", str(keys), "--principal", "alice",
                      "--seconds", "2")
    one_error_line(refused, "permission denied: alice may not subscribe 'news/hidden'", "news/hidden")
    assert refused.returncode == 2
    refused = run_cli("pub", "--via", via, "--topic", "logs/secret/x", "--message", "x", "--curve", str(keys),
                      "--principal", "alice")
    one_error_line(refused, "alice may not publish 'logs/secret/x'", 'deny "logs/secret/>"')



def test_a_first_publish_the_policy_refuses_returns_and_its_messages_are_dead_lettered_with_the_reason(ring, keys):
    """A first `publish()` on a new topic does not wait for the topic's registration; when the ring
    refuses it, the messages that waited are dead-lettered with the refusal (nothing lost unrecorded),
    and the next publish tries again. To see it fail, leave the publisher without the client's dead
    letters (`self.publisher.on_dead_letter = None` in Client): the refused messages vanish untraced."""
    letters: list = []
    with client(ring, keys, "alice", on_dead_letter=letters.append) as alice:
        assert [alice.publish("logs/secret/y", f"m{i}") for i in range(3)] == [1, 2, 3]
        wait_for(lambda: letters, 10, what="the refused messages dead-lettered")
        (letter,) = letters
        assert (letter.topic, letter.from_seq, letter.to_seq) == ("logs/secret/y", 1, 3)
        assert "permission denied: alice may not publish 'logs/secret/y'" in letter.reason
        assert "logs/secret/y" not in alice.publications
        with pytest.raises(PermissionError):
            alice.advertise("logs/secret/y")


def test_a_pattern_receives_only_the_topics_its_principal_may_subscribe(ring, keys, acl):
    """bob may subscribe `open/>` but not `open/private`: his `open/>` gets every other open topic and
    no message of open/private (his pattern learns the topic, and carol's gate refuses it to him); a
    pattern no allowed topic could match is refused at the ring, and a topic carol may not publish is
    never announced to anyone. To see it fail, let a prefix record's items through whatever they
    hold (`item_refusal` returning None for one): bob's `news/*/live` is then placed although he may
    read no topic it matches."""
    with client(ring, keys, "carol", acl) as carol, client(ring, keys, "bob") as bob:
        for t in ("open/a", "open/private", "open/b"):
            carol.advertise(t)
        sub = bob.subscribe("open/>")
        for i in range(5):
            for t in ("open/a", "open/private", "open/b"):
                carol.publish(t, f"{t}:{i}")
        got: list = []

        def both() -> bool:
            while (m := sub.get(timeout=0.05)) is not None:
                got.append(m)
            return len(got) >= 10

        wait_for(both, 15, what="the open topics bob may read")
        assert sub.get(timeout=0.5) is None
        assert sorted({m.topic for m in got}) == ["open/a", "open/b"]
        with pytest.raises(PermissionError, match="bob may not subscribe 'news/\\*/live'"):
            bob.subscribe("news/*/live")
    print(f"policy: bob's open/> got {len(got)} messages of open/a and open/b, none of open/private")

class RawPeer:
    """A pyzmq CURVE peer holding a valid key: it connects where it likes and asks what it likes."""

    def __init__(self, keys: Path, principal: str) -> None:
        self.context = zmq.Context()
        self.curve = Curve.load(keys, principal, listen=False)
        self.subs: list[zmq.Socket] = []

    def sub(self, endpoint: str, prefix: bytes = b"") -> zmq.Socket:
        sock = self.context.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        self.curve.setup(sock, False)
        sock.setsockopt(zmq.SUBSCRIBE, prefix)
        sock.connect(f"tcp://{endpoint}")
        self.subs.append(sock)
        return sock

    def ask(self, endpoint: str, op: str, **fields) -> dict:  # noqa: ANN003
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        self.curve.setup(sock, False)
        sock.connect(f"tcp://{endpoint}")
        sock.send(msgpack.packb({"v": 1, "op": op, "id": 1, **fields}, use_bin_type=True))
        assert sock.poll(5000), f"no answer to {op} from {endpoint}"
        reply = msgpack.unpackb(sock.recv(), raw=False)
        sock.close()
        return reply

    def close(self) -> None:
        for s in self.subs:
            s.close()
        self.context.term()


def payloads_of(sock: zmq.Socket, topic: str) -> list[bytes]:
    out = []
    while sock.poll(0):
        frame = sock.recv()
        try:
            env = Envelope.decode(frame, probes=True)
        except Exception:  # noqa: BLE001 - whatever it is, look for the topic's bytes in it
            out += [frame] if topic.encode() in frame else []
            continue
        if env.topic == topic and env.seq:
            out.append(env.payload)
    return out


def test_a_key_that_may_not_read_gets_no_byte_live_history_or_relay(ring, keys, acl):
    snoop = RawPeer(keys, "snoop")
    try:
        with client(ring, keys, "alice", acl, metrics_port=0) as alice, client(ring, keys, "bob") as bob:
            alice.advertise("logs/app", history=100)
            alice.advertise("logs/relayed", mode="relay")
            got: dict[str, list[str]] = {"logs/app": [], "logs/relayed": []}
            for t in got:
                bob.subscribe(t, mode="relay" if t == "logs/relayed" else "direct",
                              callback=lambda m: got[m.topic].append(m.text))
            owner = bob.topic_info("logs/relayed")["owner"]["endpoint"]
            relay_out = json.loads(run_cli("node", "info", owner, "--curve", str(keys), "--json").stdout)[
                "services"]["relay_out"]
            sockets = [snoop.sub(alice.publishing.endpoint), snoop.sub(relay_out),
                       snoop.sub(alice.publishing.endpoint, topic_filter("logs/app"))]
            t0, n = time.monotonic(), 0
            while time.monotonic() - t0 < 10:  # 10 s of publishing
                n += 1
                for t in got:
                    alice.publish(t, f"{t} #{n}")
                time.sleep(0.02)  # pacing the publisher, not synchronizing
            wait_for(lambda: all(len(v) == n for v in got.values()), 10, what="bob got everything")
            leaked = [p for s in sockets for t in got for p in payloads_of(s, t)]
            history = snoop.ask(alice.service_endpoint, "last", topic="logs/app", count=10)
            repair = snoop.ask(alice.service_endpoint, "range", topic="logs/app", **{"from": 1})
            samples = scrape(alice.metrics_endpoint)
    finally:
        snoop.close()
    assert not leaked, f"the snoop read {len(leaked)} messages of topics it may not read"
    denied = {op: value(samples, "chordpub_denials_total", op=op) for op in ("subscribe", "history")}
    for reply in (history, repair):
        assert not reply["ok"] and reply["err"].startswith("permission denied: snoop may not subscribe 'logs/app'")
    assert denied["subscribe"] >= 2 and denied["history"] >= 2, denied  # counted where the metrics show it
    print(f"policy: {n} messages on each of 2 topics in 10 s: bob got all, the snoop's raw sockets (live and "
          f"relay, empty and exact prefixes) none; history and repair refused")


def test_a_prefix_that_overlaps_a_denied_topic_receives_nothing_of_it(ring, keys, acl):
    peer = RawPeer(keys, "bob")  # bob may read open/> but not open/private
    try:
        with client(ring, keys, "carol", acl) as carol:
            for t in ("open/news", "open/private"):
                carol.advertise(t)
            socks = {"empty": peer.sub(carol.publishing.endpoint),
                     "open/news": peer.sub(carol.publishing.endpoint, topic_filter("open/news")),
                     "open/private": peer.sub(carol.publishing.endpoint, topic_filter("open/private"))}
            news: list[bytes] = []

            def flowing() -> bool:
                carol.publish("open/news", "n")
                carol.publish("open/private", "p")
                news.extend(payloads_of(socks["open/news"], "open/news"))
                return len(news) >= 20

            wait_for(flowing, 20, interval=0.02, what="bob's allowed topic flowing")
            private = [p for s in socks.values() for p in payloads_of(s, "open/private")]
    finally:
        peer.close()
    assert not private, "a subscription overlapping the denied topic let some of it through"


def test_a_policy_changed_on_disk_takes_effect_within_two_heartbeats(ring, keys, acl):
    """The ring's nodes and the publisher read the same file: it changes under all of them."""
    try:
        changed(ring, keys, acl)
    finally:
        acl.write_text(POLICY)


def changed(ring, keys: Path, acl: Path) -> None:  # noqa: ANN001
    with client(ring, keys, "carol", acl) as carol, client(ring, keys, "bob") as bob, \
            client(ring, keys, "alice") as alice:
        carol.advertise("open/feed")
        got: dict[str, list[int]] = {"bob": [], "alice": []}
        bob.subscribe("open/feed", callback=lambda m: got["bob"].append(int(m.text)))
        with pytest.raises(PermissionError):
            alice.subscribe("open/feed")
        stop, sent = threading.Event(), [0]

        def feed() -> None:
            while not stop.is_set():
                sent[0] = carol.publish("open/feed", str(sent[0] + 1))
                stop.wait(0.01)  # 100 a second

        thread = threading.Thread(target=feed, daemon=True)
        thread.start()
        try:
            wait_for(lambda: len(got["bob"]) >= 20, 20, what="bob receiving")
            changed_at = time.monotonic()
            acl.write_text(_swap(POLICY))
            wait_for(lambda: time.monotonic() - changed_at >= 2 * HB, 10, interval=0.01, what="two heartbeats")
            cutoff = sent[0]  # what was sent up to two heartbeats after the change
            alice.subscribe("open/feed", callback=lambda m: got["alice"].append(int(m.text)))
            wait_for(lambda: len(got["alice"]) >= 20, 20, what="alice, newly allowed, receiving")
        finally:
            stop.set()
            thread.join(5)
    late = [s for s in got["bob"] if s > cutoff]
    assert not late, f"bob, newly denied, got {len(late)} messages sent more than two heartbeats after the change"
    print(f"policy: changed on disk; bob's last message was #{max(got['bob'])} (#{cutoff} two heartbeats "
          f"later), alice got {len(got['alice'])} once allowed")


def _swap(policy: str) -> str:
    """The policy with open/> taken from bob and open/feed given to alice."""
    return (policy.replace('allow = ["logs/>", "news/sports", "open/>"]', 'allow = ["logs/>", "news/sports"]')
            .replace('allow = ["news/>"]\ndeny = ["news/hidden"]', 'allow = ["news/>", "open/feed"]\n'
                     'deny = ["news/hidden"]'))


def test_bad_policies_and_principals_are_one_line_and_start_nothing(keys, acl, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[principals.x.publish]\nallow = ['a*b']\n")
    one_error_line(run_cli("node", "start", "--port", "0", "--curve", str(keys), "--acl", str(bad)), "bad pattern")
    broken = tmp_path / "broken.toml"
    broken.write_text("[principals.x.publish\n")
    one_error_line(run_cli("ring", "up", "--nodes", "1", "--base-port", "0", "--curve", str(keys), "--acl",
                           str(broken)), "not TOML")
    one_error_line(run_cli("sub", "--via", "127.0.0.1:1", "--topic", "t", "--acl", str(acl)), "--acl needs --curve")
    one_error_line(run_cli("pub", "--via", "127.0.0.1:1", "--topic", "t", "--message", "x", "--curve", str(keys),
                           "--principal", "nobody"), "principal")
    one_error_line(run_cli("acl", "check", "nobody", "t", "--acl", str(acl)), "unknown principal 'nobody'")
    one_error_line(run_cli("acl", "check", "bob", "t", "--acl", str(tmp_path / "missing.toml")), "cannot read")
    checked = run_cli("acl", "check", "bob", "open/private", "--acl", str(acl), "--json")
    assert checked.returncode == 0 and json.loads(checked.stdout) == {
        "principal": "bob", "topic": "open/private", "publish": "deny", "subscribe": "deny",
        "rule": {"publish": "no rule allows it (default deny)", "subscribe": 'bob.subscribe.deny "open/private"'}}
    one_op = json.loads(run_cli("acl", "check", "alice", "news/eu/live", "--acl", str(acl), "--op", "publish",
                                "--json").stdout)
    assert one_op == {"principal": "alice", "topic": "news/eu/live", "publish": "allow",
                      "rule": 'alice.publish.allow "news/*/live"'}
    # --exit-code: a script tests the answer by exit status
    assert run_cli("acl", "check", "alice", "news/eu/live", "--acl", str(acl), "--op", "publish",
                   "--exit-code").returncode == 0
    denied = run_cli("acl", "check", "bob", "open/private", "--acl", str(acl), "--exit-code")
    assert denied.returncode == 1 and "may not subscribe" in denied.stdout, denied
    # a pattern: whether some topic it matches is allowed, and what deny rules withhold
    pattern = json.loads(run_cli("acl", "check", "bob", "open/>", "--acl", str(acl), "--op", "subscribe",
                                 "--json").stdout)
    assert pattern == {"principal": "bob", "topic": "open/>", "subscribe": "allow",
                       "rule": 'bob.subscribe.allow "open/>"', "withheld": {"subscribe": ["open/private"]}}
    assert run_cli("acl", "check", "bob", "secret/*", "--acl", str(acl), "--op", "subscribe",
                   "--exit-code").returncode == 1
    one_error_line(run_cli("acl", "check", "bob", "open/*x", "--acl", str(acl)), "whole levels")


def test_the_nodes_count_their_refusals(ring, keys):
    samples = {}
    for node in ring.nodes:
        info = json.loads(run_cli("node", "info", node.endpoint, "--curve", str(keys), "--json").stdout)
        samples[node.endpoint] = info.get("denials", {})
    assert sum(sum(d.values()) for d in samples.values()) > 0, samples


def test_groups_the_archive_topic_info_and_subscribe_many_obey_the_policy_too(ring, keys, acl):
    """To see it fail, let `subscribe_many` return before its registrations are answered: snoop's returns."""
    from dht.client import DhtClient

    with client(ring, keys, "alice", acl) as alice, client(ring, keys, "snoop") as snoop, \
            client(ring, keys, "bob") as bob:
        alice.advertise("logs/archived", archive=True)
        alice.publish("logs/archived", "kept")
        with pytest.raises(PermissionError, match="snoop may not subscribe 'logs/archived'"):
            snoop.subscribe("logs/archived", group="thieves")
        with pytest.raises(PermissionError, match="snoop may not subscribe"):
            snoop.topic_info("logs/archived")
        with pytest.raises(PermissionError, match="snoop may not subscribe"):  # the ring's answer, awaited
            snoop.subscribe_many(["logs/many/1", "logs/archived"])
        with DhtClient(ring.nodes[1].endpoint, setup=Curve.load(keys, "snoop", listen=False).setup) as dht, \
                pytest.raises(PermissionError, match="permission denied: snoop may not subscribe 'logs/archived'"):
            dht.record_item({"k": "logs/archived", "names": "log/"})  # the archive's segments
        got = []
        bob.subscribe("logs/archived", group="readers", callback=lambda m: got.append(m.text))
        alice.publish("logs/archived", "for the group")
        wait_for(lambda: got == ["for the group"], 10, what="bob's group member")
