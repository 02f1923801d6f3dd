"""dht/arcs.py: a name's arc, and a group's way from its members to the ring's, one member a step."""

from __future__ import annotations

from dht.arcs import ARCS, arc_end, arc_of, next_change


def test_arcs_cover_the_circle_and_each_ends_where_the_next_begins():
    bits = 64
    assert arc_of(0, bits) == 0 and arc_of((1 << bits) - 1, bits) == ARCS - 1
    for arc in range(ARCS):
        assert arc_of(arc_end(arc, bits), bits) == arc
        assert arc == ARCS - 1 or arc_of(arc_end(arc, bits) + 1, bits) == arc + 1


def walk(members: tuple[str, ...], wanted: list[str], leader: str) -> list[tuple[str, ...]]:
    steps = []
    while (nxt := next_change(members, wanted, leader)) is not None:
        assert len(set(nxt) ^ set(members)) == 1, "one member a step"
        steps.append(members := nxt)
        if leader not in members:
            break  # the leader stepped out: another member goes on
    return steps


def test_a_dead_member_leaves_before_its_replacement_joins():
    assert walk(("a", "b", "c"), ["a", "b", "d"], "a") == [("a", "b"), ("a", "b", "d")]


def test_a_group_grows_to_the_ring_one_member_at_a_time():
    assert walk(("a",), ["b", "a", "c"], "a") == [("a", "b"), ("a", "b", "c")]


def test_the_leader_steps_out_last_and_nothing_changes_without_a_view():
    assert walk(("a", "b", "c"), ["b", "c", "d"], "a") == [("a", "b", "c", "d"), ("b", "c", "d")]
    assert next_change(("a", "b"), [], "a") is None
    assert next_change(("a", "b", "c"), ["c", "a", "b"], "b") is None
