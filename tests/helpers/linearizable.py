"""Is a recorded history of key-value operations linearizable? Wing & Gong's search (J. Parallel Distrib.
Comput. 1993), split per key as Knossos and Porcupine do (P-compositionality: a history is linearizable
when each key's is), with the states already tried for each set of linearized operations remembered.

An operation is linearizable first among those left when it was invoked before every one of them had
returned; its recorded output must be what the key's model gives. An operation that never returned (a
timeout, a killed client) may have taken effect at any time after its invocation, or never.

The model is a consensus group's keys (dht/kv_machine.py), whose versions are revisions, as etcd's:
every write gives the key a version higher than any it had (the log index of the write), a deleted key
is absent with version 0, and `if_version=0` means "only if absent". `put(value)` -> ("ok", version),
`put(value, if_version)` -> ("ok", version) or ("refused", version found), `get()` -> (value, version),
`delete()` and `delete(if_version)` -> ("ok",) or ("refused", version found). Which higher version a
write gets is the store's choice: the model takes the one it returned, and after a write that never
returned, the first observation of the key tells it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

UNKNOWN = -1  # the version a write that never returned gave the key: some version above every earlier one
State = tuple[bytes | None, int, int]  # (value or None when absent, version, the highest version the key had)


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


def apply(state: State, op: Op, version: int) -> tuple[State, tuple]:
    """The model run forward (a generator of histories): the state after `op` and its output, a write
    taking `version` (above every version so far)."""
    value, current, top = state
    if op.kind == "get":
        return state, (value, current)
    if op.if_version is not None and op.if_version != current:
        return state, ("refused", current)
    if op.kind == "put":
        return (op.value, version, max(top, version)), ("ok", version)
    if op.kind == "delete":
        return (None, 0, top), ("ok",)
    raise ValueError(f"unknown operation {op.kind!r}")


def steps(state: State, op: Op) -> list[State]:
    """The states `op` may leave when it took effect on `state` and returned what it recorded (any
    output, when it never returned); [] when its output is impossible there."""
    value, current, top = state
    out = op.output
    if op.kind == "get":
        if out is None:
            return [state]
        if out[0] != value:
            return []
        if current == UNKNOWN:
            return [(value, out[1], out[1])] if out[1] > top else []
        return [state] if out[1] == current else []
    if op.kind not in ("put", "delete"):
        raise ValueError(f"unknown operation {op.kind!r}")
    after: list[State] = []
    want = op.if_version
    # refused: the version was not the one asked for
    if want is not None and (out is None or out[0] == "refused"):
        found = current if out is None else out[1]
        if current == UNKNOWN and out is not None:  # the refusal tells the unknown version
            if found > top and found != want:
                after.append((value, found, found))
        elif found == current and current != want:
            after.append(state)
    # taken: the version was the one asked for (or none was asked)
    if out is None or out[0] == "ok":
        if want is None or want == current or (current == UNKNOWN and want > top):
            if op.kind == "delete":
                after.append((None, 0, top if want is None or current != UNKNOWN else want))
            elif out is None:
                after.append((op.value, UNKNOWN, top if current != UNKNOWN or want is None else want))
            elif out[1] > max(top, want or 0):
                after.append((op.value, out[1], out[1]))
    return after


def linearizable(history: list[Op]) -> bool:
    """True when the history is linearizable (every key's part of it)."""
    keys: dict[str, list[Op]] = {}
    for op in history:
        keys.setdefault(op.key, []).append(op)
    return all(_key_linearizable(ops) for ops in keys.values())


def _key_linearizable(ops: list[Op]) -> bool:
    ops = sorted((o for o in ops if o.kind != "get" or o.output is not None), key=lambda o: o.call)  # (a read
    # that never returned constrains nothing)
    everything = (1 << len(ops)) - 1
    pending = sum(1 << i for i, o in enumerate(ops) if o.output is None)
    tried: set[tuple[int, State]] = set()
    stack: list[tuple[int, State]] = [(0, (None, 0, 0))]  # depth first, without recursion: a key's
    while stack:  # history may be thousands of operations long
        done, state = stack.pop()
        if done | pending == everything:
            return True  # what is left never returned: it may never have taken effect
        if (done, state) in tried:
            continue
        tried.add((done, state))
        left = [i for i in range(len(ops)) if not done >> i & 1]
        first_return = min(ops[i].ret for i in left)
        children = []
        for i in left:
            op = ops[i]
            if op.call > first_return:
                break  # (sorted by call) invoked after another returned: it cannot come first
            children.extend((done | 1 << i, after) for after in steps(state, op))
        stack.extend(reversed(children))  # tried in the same order as a recursive search would
    return False
