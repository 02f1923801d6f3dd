"""Mutants of a fuzzing input: one change to a well-formed (or almost) message, as a mutational fuzzer
makes it.

Hypothesis draws an input at the cost of dozens of draws (measured: most of the fuzz tests' CPU); a
mutant of it costs one unpack and one pack. A mutant is a near neighbour of the drawn input: one
value anywhere in its msgpack tree replaced by an edge value (out-of-range integers, NaN, huge or
empty strings, containers where scalars belong), one map entry or list item dropped or added, or, at
the byte level, the message cut short, a byte flipped or bytes inserted; for a multipart message also
a frame dropped or repeated. Those are the inputs a request handler meets from a buggy or hostile
peer that speaks almost the right protocol, and a fresh draw rarely lands right beside a valid one.
"""

from __future__ import annotations

import random

import msgpack

EDGE = [None, True, False, 0, -1, 1, 2**31, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), 0.5, -0.0, float("nan"),
        float("inf"), "", "x" * 300, "\x00", "op", b"", b"\xff" * 64, [], {}, [None], {"": None}, {"id": -1}]
KEYS = ["v", "op", "id", "at", "peer", "key_id", "k", "f", "items", "ttl", "count", "from", "to", "", 0, None]


def mutant(data: bytes | list[bytes], rnd: random.Random) -> bytes | list[bytes]:
    """One mutant of `data`: a message (bytes) or a multipart message (its frames)."""
    if isinstance(data, list):
        if data and rnd.random() < 0.8:
            i = rnd.randrange(len(data))
            return [*data[:i], mutant(data[i], rnd), *data[i + 1:]]
        return _frames(data, rnd)
    if rnd.random() < 0.3:
        return _bytes(data, rnd)
    try:
        tree = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception:  # not msgpack, or not a whole one: a byte-level change
        return _bytes(data, rnd)
    try:
        return msgpack.packb(_tree(tree, rnd), use_bin_type=True)
    except (OverflowError, ValueError, TypeError):
        return _bytes(data, rnd)


def _tree(tree: object, rnd: random.Random) -> object:
    """The tree with one change in a container chosen among all of them (the root included)."""
    containers = [c for c in _walk(tree) if isinstance(c, dict | list)]
    if not containers:
        return rnd.choice(EDGE)
    c = rnd.choice(containers)
    if isinstance(c, dict):
        keys = list(c)
        action = rnd.random()
        if keys and action < 0.5:
            c[rnd.choice(keys)] = rnd.choice(EDGE)
        elif keys and action < 0.75:
            del c[rnd.choice(keys)]
        else:
            c[rnd.choice(KEYS)] = rnd.choice(EDGE)
    else:
        action = rnd.random()
        if c and action < 0.5:
            c[rnd.randrange(len(c))] = rnd.choice(EDGE)
        elif c and action < 0.75:
            del c[rnd.randrange(len(c))]
        else:
            c.insert(rnd.randrange(len(c) + 1), rnd.choice(EDGE))
    return tree


def _walk(tree: object, depth: int = 0):  # noqa: ANN202 - a generator of the tree's nodes
    yield tree
    if depth < 8:
        children = tree.values() if isinstance(tree, dict) else tree if isinstance(tree, list) else ()
        for child in children:
            yield from _walk(child, depth + 1)


def _bytes(data: bytes, rnd: random.Random) -> bytes:
    if not data:
        return bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 9)))
    i = rnd.randrange(len(data))
    action = rnd.random()
    if action < 0.35:
        return data[:i]  # cut short
    if action < 0.7:
        return data[:i] + bytes([data[i] ^ rnd.randrange(1, 256)]) + data[i + 1:]  # a byte flipped
    if action < 0.85:
        return data[:i] + bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 5))) + data[i:]
    j = rnd.randrange(i, len(data) + 1)
    return data[:j] + data[i:j] + data[j:]  # a slice repeated


def _frames(frames: list[bytes], rnd: random.Random) -> list[bytes]:
    if frames and rnd.random() < 0.5:
        i = rnd.randrange(len(frames))
        return frames[:i] + frames[i + 1:]  # a frame dropped
    i = rnd.randrange(len(frames) + 1)
    return frames[:i] + [frames[i - 1] if i else b""] + frames[i:]  # a frame repeated (or an empty one first)
