"""Where a placement pass asks the ring (dht/group_placement.py): a pass that finds the ring as the last
one left it asks each arc's owner one `get_links`, no lookup and no `info`; a ring that moved under it
is seen by those same questions, and every pass answers what a placement that remembers nothing
answers; `forget` (the ring moved at this node, or a peer's process died) makes the next pass ask
everything again.

To see it fail: make `_owner_of` trust the owner it remembers whatever its predecessor says
(`if links is not None:`): after a node joins, a pass answers with the arcs' old owners, and differs
from a fresh placement's; make `forget` do nothing: the pass after it asks no `info`.
"""

from __future__ import annotations

from collections import Counter

from dht.arcs import ARCS, arc_end
from dht.group_placement import Placement


def counted(placement: Placement) -> Counter:
    """Counts of the lookups and `info`s the placement asks from now on."""
    calls: Counter = Counter()
    for name in ("lookup_id", "info"):
        real = getattr(placement.dht, name)

        def wrapper(*args, _real=real, _name=name, **kwargs):  # noqa: ANN002, ANN003, ANN202
            calls[_name] += 1
            return _real(*args, **kwargs)

        setattr(placement.dht, name, wrapper)
    return calls


def a_pass(placement: Placement) -> dict[int, list[str] | None]:
    known: dict = {}
    return {arc: placement.wanted(arc_end(arc, 64), known) for arc in range(ARCS)}


def members_of(answers: dict[int, list[str] | None]) -> set[str]:
    return {m for members in answers.values() for m in members or ()}


def fresh_pass(via: str) -> dict[int, list[str] | None]:
    placement = Placement(via, 2)
    try:
        return a_pass(placement)
    finally:
        placement.close()


def test_a_quiet_pass_asks_each_owner_its_links_only_and_sees_a_join_as_a_fresh_one_would(ring_factory):
    ring = ring_factory(replicas=2)
    ring.start(4)
    ring.wait_consistent(timeout=60)
    via = ring.nodes[0].endpoint
    placement = Placement(via, 2)
    try:
        calls = counted(placement)
        first = a_pass(placement)
        assert all(members and len(members) == 2 for members in first.values()), first
        # each process in a group asked its member id once (which processes are in one depends on
        # where the ring's ids fell: a clean-clone run had one that neither owns an arc end nor follows one)
        assert calls["lookup_id"] > 0 and calls["info"] == len(members_of(first)), calls
        calls.clear()
        assert a_pass(placement) == first == fresh_pass(via)
        assert calls == Counter(), calls  # nothing moved: links only

        ring.add(join=via, id=arc_end(3, 64))  # a newcomer that takes arc 3's end from its owner
        ring.wait_consistent(timeout=60)
        calls.clear()
        moved = a_pass(placement)
        assert moved == fresh_pass(via)  # the owners that lost an arc to the newcomer are seen to
        assert moved[3] != first[3] and moved[3][0] not in members_of(first)
        # the newcomer's member id, and any other process new to the groups; the others' are remembered
        assert calls["info"] == len(members_of(moved) - members_of(first)), calls

        placement.forget()
        calls.clear()
        assert a_pass(placement) == moved
        assert calls["info"] == len(members_of(moved)), calls
    finally:
        placement.close()
