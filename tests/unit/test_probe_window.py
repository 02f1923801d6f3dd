"""Probe requests to one publisher are batched per turn of the io loop and windowed, and the topics
waiting for the window are bounded (pubsub/confirm.py): a pattern that matched thousands of one
publisher's topics at once sent every probe together, and the publisher answered slower than their
timeout.

To see these fail: make `Confirmations._send` send whatever waits (its `PROBE_WINDOW` check dropped:
every request goes out at once), or one topic a request (`PROBE_BATCH` ignored), or queue past
`PROBE_QUEUE` (the test's bound is then never reached and no subscription hears why it was not
confirmed), or ask a joining stream's start on its own although its probe's reply said it (`ask_start`
in place of `on_start`)."""

from __future__ import annotations

from concurrent.futures import Future

from dht.transport import Reply
from pubsub import confirm
from pubsub.confirm import PROBE_WINDOW, Confirmations
from pubsub.directory import PublisherEntry
from pubsub.envelope import Envelope
from pubsub.subscription import TopicState

A = PublisherEntry("pub-a", "127.0.0.1:1", "127.0.0.1:2")


class Unanswered:
    """An RpcClient whose requests wait until the test answers them."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict, object]] = []

    def send(self, endpoint: str, op: str, on_reply, timeout: float, **fields) -> None:  # noqa: ANN001
        self.sent.append((endpoint, op, fields, on_reply))


def waiting_topics(conf: Confirmations, ts: TopicState) -> Future:
    new, _gone = ts.reconcile([A])
    done: Future = Future()
    conf.wait(ts, new, done, ts, timeout=30)
    return done


def test_probes_to_one_publisher_go_out_batched_a_window_at_a_time_and_the_queue_behind_is_bounded(
        monkeypatch, caplog):
    batch = 3
    monkeypatch.setattr(confirm, "PROBE_BATCH", batch)
    monkeypatch.setattr(confirm, "PROBE_QUEUE", PROBE_WINDOW * batch + 10)
    rpc, turn = Unanswered(), []
    conf = Confirmations(rpc, later=lambda _delay, fn: turn.append(fn), alive=lambda _ts, _st: True)  # type: ignore[arg-type]
    futures = [waiting_topics(conf, TopicState(f"t/{i}", "me")) for i in range(PROBE_WINDOW * batch + 20)]
    assert not rpc.sent and len(turn) == 1, "asked together once the turn ends"
    turn.pop()()
    assert len(rpc.sent) == PROBE_WINDOW, "no more than a window in flight"
    assert all(op == "probes" and endpoint == A.repair for endpoint, op, _f, _r in rpc.sent)
    assert [f["topics"] for _e, _op, f, _r in rpc.sent[:2]] == [["t/0", "t/1", "t/2"], ["t/3", "t/4", "t/5"]], \
        "the topics of a turn go together, in the order they were asked"
    assert len(conf.queued[A.repair]) == 10, "the rest wait, up to the bound"
    beyond = futures[PROBE_WINDOW * batch + 10:]
    assert all(f.done() for f in beyond) and not any(f.done() for f in futures[:PROBE_WINDOW * batch + 10])
    refused = [r.getMessage() for r in caplog.records if "wait at this publisher already" in r.getMessage()]
    assert len(refused) == 20 - 10, "each subscription past the bound is told why, in the log"
    _endpoint, _op, fields, on_reply = rpc.sent[0]
    on_reply(Reply(True, {"token": 1, "lasts": {"t/0": None, "t/1": 7}, "refused": {"t/2": "not yours"}}))
    assert len(rpc.sent) == PROBE_WINDOW + 1 and len(conf.queued[A.repair]) == 10 - batch, \
        "an answer lets the next one go"
    assert rpc.sent[-1][2]["topics"] == [f"t/{PROBE_WINDOW * batch + k}" for k in range(batch)]
    assert futures[2].done() and not futures[0].done() and not futures[1].done(), \
        "a topic the publisher refused is given up on; the others wait for their probe"
    assert "not yours" in " ".join(r.getMessage() for r in caplog.records)


def test_a_stream_joining_a_running_publisher_starts_where_its_probe_reply_says_and_asks_only_without_it():
    """Joining a publisher that has sent 41 messages: the probe's reply names its newest seq, so no
    `last` request of its own goes out (10,000 of them, unwindowed, piled up at one publisher and timed
    out); once the probe has come, 42 on are owed and 41, come late, is not delivered. A reply that
    names none (an older publisher), or a probe given up on, has the start asked on its own."""
    rpc, asked = Unanswered(), []
    conf = Confirmations(rpc, later=lambda _delay, _fn: None, alive=lambda _ts, _st: True,  # type: ignore[arg-type]
                         ask_start=lambda ts, st: asked.append(ts.topic))
    states = {}
    for topic in ("new", "old", "silent"):
        ts = states[topic] = TopicState(topic, "me")
        new, _gone = ts.reconcile([A])
        assert new[0].start_on_probe and not ts.starts, "its start waits for the probe's reply"
        conf.wait(ts, new, Future(), ts, timeout=30)
        conf._send(A.repair)  # each its own turn (and request)
    replies = {fields["topics"][0]: on_reply for _e, _op, fields, on_reply in rpc.sent}
    replies["new"](Reply(True, {"token": 5, "lasts": {"new": 41}, "refused": {}}))
    replies["old"](Reply(True, {"token": 5, "lasts": {"old": None}, "refused": {}}))
    assert asked == ["old"], "asked on its own only when the reply did not say"
    st = states["new"].streams[A.id]
    assert st.catching_up, "not started before the probe comes: what the reply counts may still be on its way"
    st.see_probe(5)  # the probe comes (the io loop's part)
    conf.seen(states["new"], st)
    for seq in (41, 42):
        states["new"].on_message(Envelope("new", A.id, seq, 1, b"x"), 3)
    assert [(m.seq, m.first_owed) for m in states["new"].deliveries] == [(42, 42)]
    conf.check(10**9)  # the deadline passes: the probe that never came is given up on
    assert asked == ["old", "silent"]


class RefusedAtOnce(Unanswered):
    """An RpcClient that answers a request it cannot send within `send`, as RpcClient does for an endpoint
    it cannot parse (a publisher's record naming none: gone, its archive's holder dead with the owner)."""

    def send(self, endpoint: str, op: str, on_reply, timeout: float, **fields) -> None:  # noqa: ANN001
        super().send(endpoint, op, on_reply, timeout, **fields)
        on_reply(Reply(False, err=f"malformed endpoint {endpoint!r}"))


def test_probes_refused_within_the_send_finish_their_subscriptions_and_the_loop_goes_on(monkeypatch):
    """A request answered before `send` returns runs the next sends from within the loop that made it:
    the first loop must not then tidy away what that inner one already removed (a KeyError there stopped
    a Client's io loop, and its subscriptions with it).

    To see it fail, let `Confirmations._send` delete its queue unconditionally once it is empty."""
    monkeypatch.setattr(confirm, "PROBE_BATCH", 1)
    rpc, turn = RefusedAtOnce(), []
    conf = Confirmations(rpc, later=lambda _delay, fn: turn.append(fn), alive=lambda _ts, _st: True)  # type: ignore[arg-type]
    futures = [waiting_topics(conf, TopicState(f"t/{i}", "me")) for i in range(3)]
    turn.pop()()
    assert len(rpc.sent) == 3 and all(f.done() for f in futures), "each told at once that it could not confirm"
    assert not conf.queued and not conf.in_flight


def test_a_publisher_gone_to_its_archive_before_its_probe_is_asked_again_is_not_asked():
    """A publisher whose record entry turns into its archive's (no endpoints: gone, its messages kept by the
    topic's owner) while its probe is awaited has nothing live to confirm: the subscription stops waiting
    for it, and no request goes to an empty endpoint.

    To see it fail, drop the endpoint check in `Confirmations._probe`: the probe is asked again of ''."""
    rpc, turn = Unanswered(), []
    conf = Confirmations(rpc, later=lambda _delay, fn: turn.append(fn), alive=lambda _ts, _st: True)  # type: ignore[arg-type]
    ts = TopicState("kept", "me")
    done = waiting_topics(conf, ts)
    turn.pop()()
    assert [e for e, *_ in rpc.sent] == [A.repair]
    ts.reconcile([PublisherEntry(A.id, "", "", None, 10, "direct", archive=True)])
    rpc.sent[0][3](Reply(True, {"token": 1, "lasts": {"kept": 5}, "refused": {}}))  # its probe not come yet
    while turn:  # the probe asked again after its backoff
        turn.pop()()
    assert done.done() and [e for e, *_ in rpc.sent] == [A.repair]
