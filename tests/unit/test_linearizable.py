"""The linearizability checker the consensus tests judge histories with (tests/helpers/linearizable.py):
it accepts every history a linearizable store could give, and refuses the classic anomalies.

To see it fail: drop the real-time order (`search` not stopping at an operation invoked after another
returned: a stale read passes), or the output check (two winners of one compare-and-set pass)."""

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
    state, history = (None, 0), []
    for _at, call, ret, kind, cond, lost in sorted(planned):
        if_version = state[1] if cond and rng.random() < 0.7 else (rng.randint(0, 3) if cond else None)
        op = Op("k", kind, b"v%d" % len(history) if kind == "put" else None, if_version)
        state, output = apply(state, op)
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
