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
