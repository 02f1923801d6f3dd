"""Raft's messages on the wire (dht/raft_wire.py): each comes back as it went, through msgpack, and
anything else is a WireError before the state machine sees it.

To see these fail: let an append's entries skip an index (`_entries` not checking `index`: a log
with a hole reaches `Raft.step`), or take a bool for a term (`_uint` without its `bool` check)."""

from __future__ import annotations

import random

import msgpack
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dht.raft import Append, AppendReply, Entry, Raft, TimeoutNow, Vote, VoteReply
from dht.raft_wire import decode, encode
from dht.wire import WireError

uint = st.integers(0, 2**40)
member = st.text(min_size=1, max_size=20)


@st.composite
def appends(draw: st.DrawFn) -> Append:
    prev = draw(uint)
    n = draw(st.integers(0, 5))
    entries = tuple(Entry(draw(uint), prev + 1 + i, draw(st.binary(max_size=50)),
                          draw(st.none() | st.lists(member, min_size=1, max_size=5, unique=True).map(tuple)))
                    for i in range(n))
    return Append(draw(member), draw(member), draw(uint), prev, draw(uint), entries, draw(uint), draw(uint))


messages = (st.builds(Vote, member, member, uint, uint, uint, st.booleans(), st.booleans())
            | st.builds(TimeoutNow, member, member, uint)
            | st.builds(VoteReply, member, member, uint, st.booleans(), st.booleans(), uint)
            | appends()
            | st.builds(AppendReply, member, member, uint, st.booleans(), uint, uint))


@settings(max_examples=300, deadline=None)
@given(messages)
def test_every_message_comes_back_as_it_went(msg):
    assert decode(msgpack.unpackb(msgpack.packb(encode(msg), use_bin_type=True), raw=False)) == msg


@settings(max_examples=500, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.binary(max_size=8) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                                 max_size=8), max_leaves=30))
def test_anything_else_is_a_wire_error_and_a_decoded_one_never_breaks_the_state_machine(body):
    node = Raft("a", ("a", "b", "c"), random.Random(1).randint)
    try:
        msg = decode(body)
    except WireError:
        return
    node.step(msg)
    node.ready()


@pytest.mark.parametrize("bad, why", [
    ({"k": "append", "src": "b", "dst": "a", "term": 1, "prev_index": 3, "prev_term": 1, "commit": 0, "sent": 0,
      "entries": [[1, 4, b"", None], [1, 6, b"", None]]}, "follow each other"),
    ({"k": "vote", "src": "b", "dst": "a", "term": True, "last_index": 0, "last_term": 0}, "integer"),
    ({"k": "vote", "src": "", "dst": "a", "term": 1, "last_index": 0, "last_term": 0}, "member"),
    ({"k": "append", "src": "b", "dst": "a", "term": 1, "prev_index": 0, "prev_term": 0, "commit": 0, "sent": 0,
      "entries": [[1, 1, b"", ["x", "x"]]]}, "twice"),
    ({"k": "elect", "src": "b", "dst": "a", "term": 1}, "unknown"),
])
def test_a_malformed_message_says_what_is_wrong(bad, why):
    with pytest.raises(WireError, match=why):
        decode(bad)


@settings(max_examples=300, deadline=None)
@given(st.lists(messages.map(lambda m: m if random.Random(m.term).random() < 0.3 else type(m)(
    *(("b", "a") if hasattr(m, "src") else ()), *list(m.__dict__.values())[2:])), max_size=25))
@example([Append("b", "a", 0, 0, 0, (Entry(0, 1, b""), Entry(1, 2, b"")), 0)])  # an entry of term 0 passed
def test_well_formed_messages_of_any_content_never_break_the_state_machine(msgs):  # for one the log held
    """Well-formed, but from anyone, of any term, claiming anything: refused or taken, never an exception,
    and a member's log keeps its indexes in order. To see it fail, let `_on_append` skip `_consecutive`."""
    node = Raft("a", ("a", "b", "c"), random.Random(2).randint)
    for msg in msgs:
        node.step(msg)
        node.tick()
        node.ready()
    assert [e.index for e in node.log] == list(range(1, len(node.log) + 1))
