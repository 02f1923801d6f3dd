"""Is a recorded history of key-value operations linearizable? Wing & Gong's search (J. Parallel Distrib.
Comput. 1993), split per key as Knossos and Porcupine do (P-compositionality: a history is linearizable
when each key's is), with the states already tried for each set of linearized operations remembered.

An operation is linearizable first among those left when it was invoked before every one of them had
returned; its recorded output must be what the key's model gives. An operation that never returned (a
timeout, a killed client) may have taken effect at any time after its invocation, or never.

The model is the ring's keys with versions: `put(value)` -> new version, `put(value, if_version)` ->
new version or refused with the version found, `get()` -> (value, version), `delete()` and
`delete(if_version)` -> ok or refused. A missing key has version 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

State = tuple[bytes | None, int]  # (value or None when absent, version)


@dataclass(frozen=True)
class Op:
    key: str
    kind: str  # "put", "get" or "delete"
    value: bytes | None = None  # put's
    if_version: int | None = None  # a conditional put or delete
    output: tuple | None = None  # what it returned: put ("ok", version) | ("refused", found); get (value, version);
    # delete ("ok",) | ("refused", found); None: it never returned
    call: float = 0.0
    ret: float = math.inf  # inf: never returned


def apply(state: State, op: Op) -> tuple[State, tuple]:
    """The model: the state after `op` and what `op` returns."""
    value, version = state
    if op.kind == "get":
        return state, (value, version)
    if op.if_version is not None and op.if_version != version:
        return state, ("refused", version)
    if op.kind == "put":
        return (op.value, version + 1), ("ok", version + 1)
    if op.kind == "delete":
        return (None, version + 1 if value is not None else version), ("ok",)
    raise ValueError(f"unknown operation {op.kind!r}")


def linearizable(history: list[Op]) -> bool:
    """True when the history is linearizable (every key's part of it)."""
    keys: dict[str, list[Op]] = {}
    for op in history:
        keys.setdefault(op.key, []).append(op)
    return all(_key_linearizable(ops) for ops in keys.values())


def _key_linearizable(ops: list[Op]) -> bool:
    ops = sorted(ops, key=lambda o: o.call)
    everything = (1 << len(ops)) - 1
    pending = sum(1 << i for i, o in enumerate(ops) if o.output is None)
    tried: set[tuple[int, State]] = set()

    def search(done: int, state: State) -> bool:
        if done | pending == everything:
            return True  # what is left never returned: it may never have taken effect
        if (done, state) in tried:
            return False
        tried.add((done, state))
        left = [i for i in range(len(ops)) if not done >> i & 1]
        first_return = min(ops[i].ret for i in left)
        for i in left:
            op = ops[i]
            if op.call > first_return:
                break  # (sorted by call) invoked after another returned: it cannot come first
            after, output = apply(state, op)
            if op.output is not None and output != op.output:
                continue
            if search(done | 1 << i, after):
                return True
        return False

    return search(0, (None, 0))
