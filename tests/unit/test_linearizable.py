"""The linearizability checker the consensus tests judge histories with (tests/helpers/linearizable.py):
it accepts every history a linearizable store could give, and refuses the classic anomalies.

To see it fail: drop the real-time order (`search` not stopping at an operation invoked after another
returned: a stale read passes), or the check that a write's version grows (two writes giving one
version pass)."""

from __future__ import annotations

import math
import random

import pytest

from tests.helpers.linearizable import Op, apply, linearizable


def test_sequential_and_overlapping_histories_of_a_correct_store_pass():
    assert linearizable([Op("k", "put", b"a", output=("ok", 1), call=0, ret=1),
                         Op("k", "get", output=(b"a", 1), call=2, ret=3)])
    # a read overlapping the write may see either
    assert linearizable([Op("k", "put", b"a", output=("ok", 1), call=0, ret=5),
                         Op("k", "get", output=(None, 0), call=1, ret=2),
                         Op("k", "get", output=(b"a", 1), call=3, ret=4)])
    # a write that never returned may have taken effect, or not
    assert linearizable([Op("k", "put", b"a", call=0),
                         Op("k", "get", output=(b"a", 1), call=2, ret=3)])
    assert linearizable([Op("k", "put", b"a", call=0),
                         Op("k", "get", output=(None, 0), call=2, ret=3)])
    # versions are revisions: any higher one; a deleted key is absent (version 0), and if_version=0 creates
    assert linearizable([Op("k", "put", b"a", output=("ok", 7), call=0, ret=1),
                         Op("k", "put", b"b", if_version=7, output=("ok", 12), call=2, ret=3),
                         Op("k", "delete", if_version=7, output=("refused", 12), call=4, ret=5),
                         Op("k", "delete", output=("ok",), call=6, ret=7),
                         Op("k", "put", b"c", if_version=0, output=("ok", 15), call=8, ret=9),
                         Op("k", "get", output=(b"c", 15), call=10, ret=11)])
    # a write that never returned: the first read of it tells its version, and a later one must agree
    lost = [Op("k", "put", b"a", output=("ok", 3), call=0, ret=1), Op("k", "put", b"b", call=2),
            Op("k", "get", output=(b"b", 9), call=3, ret=4)]
    assert linearizable(lost)
    assert linearizable(lost + [Op("k", "put", b"c", if_version=9, output=("ok", 10), call=5, ret=6)])
    assert not linearizable(lost + [Op("k", "get", output=(b"b", 8), call=5, ret=6)])
    assert not linearizable([Op("k", "put", b"a", output=("ok", 3), call=0, ret=1),
                             Op("k", "put", b"b", output=("ok", 3), call=2, ret=3)]), "a version that did not grow"


@pytest.mark.parametrize("history", [
    # a stale read: the write had returned before the read began
    [Op("k", "put", b"a", output=("ok", 1), call=0, ret=1), Op("k", "get", output=(None, 0), call=2, ret=3)],
    # two winners of one compare-and-set
    [Op("k", "put", b"a", output=("ok", 1), call=0, ret=1),
     Op("k", "put", b"b", if_version=1, output=("ok", 2), call=2, ret=4),
     Op("k", "put", b"c", if_version=1, output=("ok", 2), call=3, ret=5)],
    # a read that goes back in time after another read saw the write
    [Op("k", "put", b"a", output=("ok", 1), call=0, ret=10),
     Op("k", "get", output=(b"a", 1), call=1, ret=2), Op("k", "get", output=(None, 0), call=3, ret=4)],
], ids=["stale-read", "two-cas-winners", "read-back-in-time"])
def test_the_classic_anomalies_are_refused(history):
    assert not linearizable(history)


def simulate(seed: int, clients: int = 4, ops: int = 40) -> list[Op]:
    """A history of a linearizable store: each operation takes effect at a random instant between its
    call and its return, in that order, on the model; some never return."""
    rng = random.Random(seed)
    planned = []
    for _ in range(ops):
        call = rng.uniform(0, 100)
        ret = call + rng.uniform(0.1, 10)
        kind = rng.choice(["put", "put", "get", "get", "delete"])
        cond = rng.random() < 0.5 and kind != "get"
        planned.append((rng.uniform(call, ret), call, ret, kind, cond, rng.random() < 0.05))
    state, history, index = (None, 0, 0), [], 0
    for _at, call, ret, kind, cond, lost in sorted(planned):
        if_version = state[1] if cond and rng.random() < 0.7 else (rng.randint(0, 3) if cond else None)
        op = Op("k", kind, b"v%d" % len(history) if kind == "put" else None, if_version)
        index += rng.randint(1, 3)  # the log index this operation would have: other keys' take some
        state, output = apply(state, op, index)
        history.append(Op(op.key, kind, op.value, if_version, None if lost else output, call,
                          math.inf if lost else ret))
    return history


@pytest.mark.parametrize("seed", range(20))
def test_random_histories_of_a_linearizable_store_pass_and_a_stale_read_in_them_is_caught(seed):
    history = simulate(seed)
    assert linearizable(history)
    reads = [i for i, o in enumerate(history) if o.kind == "get" and o.output is not None and o.output[1] > 0]
    if not reads:
        return
    i = reads[-1]
    stale = history[i]
    earlier = [o for o in history if o.ret < stale.call and o.kind != "get" and o.output and o.output[0] == "ok"]
    if not earlier:
        return
    history[i] = Op(stale.key, "get", output=(b"never written", stale.output[1]), call=stale.call, ret=stale.ret)
    assert not linearizable(history), "a read of a value nobody wrote"
