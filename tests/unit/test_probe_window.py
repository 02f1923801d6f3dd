"""Probe requests to one publisher are windowed, and the requests waiting for the window are bounded
(pubsub/confirm.py): a pattern that matched thousands of one publisher's topics at once sent every
probe together, and the publisher answered slower than their timeout.

To see these fail: make `Confirmations._ask` send whatever the window holds (its `PROBE_WINDOW` check
never true: every request goes out at once), or queue past `PROBE_QUEUE` (the test's bound of 10
is then never reached and no subscription hears why it was not confirmed)."""

from __future__ import annotations

from concurrent.futures import Future

from dht.transport import Reply
from pubsub import confirm
from pubsub.confirm import PROBE_WINDOW, Confirmations
from pubsub.directory import PublisherEntry
from pubsub.subscription import TopicState

A = PublisherEntry("pub-a", "127.0.0.1:1", "127.0.0.1:2")


class Unanswered:
    """An RpcClient whose requests wait until the test answers them."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict, object]] = []

    def send(self, endpoint: str, op: str, on_reply, timeout: float, **fields) -> None:  # noqa: ANN001
        self.sent.append((endpoint, op, fields, on_reply))


def test_probes_to_one_publisher_go_out_a_window_at_a_time_and_the_queue_behind_is_bounded(monkeypatch, caplog):
    monkeypatch.setattr(confirm, "PROBE_QUEUE", 10)
    rpc = Unanswered()
    conf = Confirmations(rpc, later=lambda _delay, _fn: None, alive=lambda _ts, _st: True)  # type: ignore[arg-type]
    futures = []
    for i in range(PROBE_WINDOW + 20):
        ts = TopicState(f"t/{i}", "me")
        new, _gone = ts.reconcile([A])
        done: Future = Future()
        conf.wait(ts, new, done, ts, timeout=30)
        futures.append(done)
    assert len(rpc.sent) == PROBE_WINDOW, "no more than a window in flight"
    assert all(op == "probe" and endpoint == A.repair for endpoint, op, _f, _r in rpc.sent)
    assert len(conf.queued[A.repair]) == 10, "the rest wait, up to the bound"
    beyond = futures[PROBE_WINDOW + 10:]
    assert all(f.done() for f in beyond) and not any(f.done() for f in futures[:PROBE_WINDOW + 10])
    refused = [r.getMessage() for r in caplog.records if "wait at this publisher already" in r.getMessage()]
    assert len(refused) == 20 - 10, "each subscription past the bound is told why, in the log"
    _endpoint, _op, fields, on_reply = rpc.sent[0]
    on_reply(Reply(True, {"token": 1}))
    assert len(rpc.sent) == PROBE_WINDOW + 1 and len(conf.queued[A.repair]) == 9, "an answer lets the next one go"
    assert rpc.sent[-1][2]["topic"] == f"t/{PROBE_WINDOW}", "in the order they were asked"
