"""dht/scaling.py: where a new node splits a hot arc, and when the scaler grows, shrinks or holds.

To see it fail: make `split_point` return the arc's midpoint whatever the keys (the keys below crowd the
arc's first tenth: the new node gets all of them, not half), or drop the `looks < p.patience` check in
`Scaler.decide` (it grows on the first look above), or the `error = None` in `chordpub.autoscale.settle`
(a change that settled after one unanswered look is reported failed)."""

from __future__ import annotations

import pytest

from dht.scaling import Policy, Scaler, split_point

BITS = 16
SIZE = 1 << BITS


def owned_by_new(pred: int, new: int, keys: list[int]) -> int:
    return sum(1 for k in keys if 0 < (k - pred) % SIZE <= (new - pred) % SIZE)


@pytest.mark.parametrize("pred,node", [(100, 9000), (60000, 2000)])  # the second arc wraps past 0
@pytest.mark.parametrize("n", [1, 2, 7, 100])
def test_the_split_takes_half_of_the_keys_rounded_up_wherever_they_sit_in_the_arc(pred, node, n):
    arc = (node - pred) % SIZE
    keys = [(pred + 1 + i * (arc // 10) // max(n, 1)) % SIZE for i in range(n)]  # crowded in the arc's first tenth
    cut = split_point(pred, node, keys + [(node + 5) % SIZE], BITS)  # a key outside the arc is not counted
    if n == 1 and keys[0] == node:
        assert cut is None
        return
    assert cut is not None and 0 < (cut - pred) % SIZE < arc
    assert owned_by_new(pred, cut, keys) == (n + 1) // 2


def test_an_arc_without_keys_splits_at_its_midpoint_and_one_that_cannot_be_split_says_so():
    assert split_point(100, 300, [], BITS) == 200
    assert split_point(65000, 100, [], BITS) == (65000 + (100 - 65000) % SIZE // 2) % SIZE
    assert split_point(None, 300, [150], BITS) is None  # no predecessor known
    assert split_point(299, 300, [], BITS) is None  # nothing between
    assert split_point(100, 300, [300], BITS) is None  # the one key is the node's own id


def rows(*loads: float, split: int = 7) -> list[dict]:
    return [{"endpoint": f"n{i}", "records": v, "split_id": split} for i, v in enumerate(loads)]


def test_grow_waits_for_patience_and_the_cooldown_and_stops_at_max():
    s = Scaler(Policy(high=100, low=10, min_nodes=2, max_nodes=5, patience=2, cooldown=5))
    assert s.decide(rows(300, 50, 50), 0).action == "hold"  # one look above
    d = s.decide(rows(300, 50, 50), 1)
    assert (d.action, d.node, d.new_id, d.figures["max"], d.figures["mean"]) == ("grow", "n0", 7, 300, 400 / 3)
    s.changed(1)
    assert "cooling down" in s.decide(rows(150, 150, 50, 50), 2).reason
    assert s.decide(rows(150, 150, 50, 50), 7).action == "grow"  # the looks in the cool-down counted
    s.changed(7)
    s.decide(rows(150, 75, 75, 50, 50), 20)
    assert "--max" in s.decide(rows(150, 75, 75, 50, 50), 21).reason
    assert s.decide([{"endpoint": "n0", "records": 500, "split_id": None}], 30).action == "hold"


def test_a_look_below_the_threshold_starts_the_count_again():
    s = Scaler(Policy(high=100, low=0, patience=2, cooldown=0))
    s.decide(rows(300, 50), 0)
    s.decide(rows(90, 50), 1)
    assert s.decide(rows(300, 50), 2).action == "hold"


def test_shrink_takes_the_lightest_preferring_the_newest_node_it_started_and_stops_at_min():
    s = Scaler(Policy(high=100, low=10, min_nodes=2, patience=1, cooldown=0), started=["n1", "n2"])
    d = s.decide(rows(5, 0, 0, 3), 0)
    assert (d.action, d.node) == ("shrink", "n2")
    s.changed(0)
    assert s.decide(rows(5, 0, 3), 1).node == "n1"
    assert "--min" in s.decide(rows(0, 0), 2).reason


@pytest.mark.parametrize("policy,words", [
    (Policy(high=10, low=20), "thresholds out of order"),
    (Policy(high=10, low=10), "thresholds out of order"),
    (Policy(high=10, low=-1), "thresholds out of order"),
    (Policy(high=10, low=1, min_nodes=5, max_nodes=2), "--min"),
    (Policy(high=10, low=1, min_nodes=0), "--min"),
    (Policy(high=10, low=1, metric="weight"), "--metric"),
    (Policy(high=10, low=1, patience=0), "--patience"),
    (Policy(high=10, low=1, cooldown=-1), "--cooldown"),
])
def test_a_policy_out_of_order_is_refused_in_words(policy, words):
    with pytest.raises(ValueError, match=words):
        policy.validate()


def test_a_change_that_settles_after_a_failed_look_is_ok_and_one_that_never_does_is_not():
    """A node too busy to answer one look (DhtError) while the change goes on is not a failed change:
    the scaler once reported such a grow failed and stopped the node that had joined."""
    from chordpub.autoscale import settle
    from dht.client import DhtError

    looks = iter([DhtError("info on n0 failed: no reply"), False, True])

    def done() -> bool:
        look = next(looks)
        if isinstance(look, Exception):
            raise look
        return look

    out = settle(done, [], timeout=10)
    assert out["ok"] and out["error"] is None, out

    def busy() -> bool:
        raise DhtError("info on n0 failed: no reply")

    out = settle(busy, [], timeout=0.3)
    assert not out["ok"] and "no reply" in out["error"], out
