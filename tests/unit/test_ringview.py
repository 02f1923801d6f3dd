"""dht/ringview.py: what `ring watch` shows of each look at the ring, and what it noticed between looks."""

from __future__ import annotations

import pytest

from dht.ringview import DEAD, DETACHED, LEFT, NEW, UP, RingView

BITS = 8


def info(nid: int, ring: list[int], r: int = 3, served: int = 0, left: tuple[str, ...] = (),
         successors: list[int] | None = None, keys: int = 0, records: int = 0) -> dict:
    """A node's info as DhtClient.info gives it; its successor list the true one unless given."""
    order = sorted(ring)
    at = order.index(nid)
    succ = successors if successors is not None else [order[(at + j) % len(order)] for j in range(1, r + 1)]
    return {"id": nid, "endpoint": f"n{nid}", "bits": BITS, "r": r, "keys": keys, "records": records,
            "successors": [{"id": s, "endpoint": f"n{s}"} for s in succ if s != nid],
            "lookups_served": served, "neighbours_left": list(left)}


def infos(ring: list[int], **kw: object) -> list[dict]:
    return [info(n, ring, **kw) for n in ring]


def by_endpoint(rows: list) -> dict:
    return {r.endpoint: r for r in rows}


def test_rows_are_in_ring_order_and_arcs_share_the_circle():
    view = RingView()
    rows = view.look(infos([200, 10, 100, 50]), set(), set(), now=0.0)
    assert [r.id for r in rows] == [10, 50, 100, 200]
    assert sum(r.arc for r in rows) == pytest.approx(1.0)
    assert by_endpoint(rows)["n10"].arc == pytest.approx((256 - 200 + 10) / 256)  # it owns (200, 10]
    assert by_endpoint(rows)["n50"].arc == pytest.approx(40 / 256)
    assert all(r.status == UP and (r.successors_ok, r.successors_want) == (3, 3) for r in rows)


def test_a_lone_node_owns_the_whole_circle():
    rows = RingView().look([info(7, [7])], set(), set(), now=0.0)
    assert rows[0].arc == 1.0 and rows[0].successors_want == 0


def test_lookup_rate_is_the_difference_between_two_looks():
    view = RingView()
    view.look(infos([10, 100], served=5), set(), set(), now=1.0)
    rows = view.look(infos([10, 100], served=25), set(), set(), now=3.0)
    assert [r.lookups_per_s for r in rows] == [10.0, 10.0]


def test_a_node_that_appears_is_new_and_the_first_look_marks_none():
    view = RingView(new_for=5.0)
    assert all(r.status == UP for r in view.look(infos([10, 100]), set(), set(), now=0.0))
    rows = by_endpoint(view.look(infos([10, 60, 100]), set(), set(), now=1.0))
    assert rows["n60"].status == NEW and rows["n10"].status == UP
    assert by_endpoint(view.look(infos([10, 60, 100]), set(), set(), now=7.0))["n60"].status == UP
    assert [e for _, e in view.recent_events()] == ["n60 joined"]


def test_a_node_that_went_silent_is_dead_and_stale_lists_count_it_gone():
    view = RingView(keep=10.0)
    view.look(infos([10, 60, 100, 200]), set(), set(), now=0.0)
    # n60 was killed: n10 still lists it, the walk stepped over it
    stale = [info(10, [10, 60, 100, 200]), info(100, [10, 100, 200]), info(200, [10, 100, 200])]
    rows = by_endpoint(view.look(stale, {"n60"}, set(), now=1.0))
    assert rows["n60"].status == DEAD and rows["n60"].arc is None
    assert rows["n10"].successors_gone == 1
    assert (rows["n10"].successors_ok, rows["n10"].successors_want) == (0, 2)
    assert by_endpoint(view.look(infos([10, 100, 200]), set(), set(), now=5.0))["n60"].status == DEAD
    assert "n60" not in by_endpoint(view.look(infos([10, 100, 200]), set(), set(), now=12.0))
    assert [e for _, e in view.recent_events()] == ["n60 died"]


def test_a_node_a_neighbour_was_told_about_has_left():
    view = RingView()
    view.look(infos([10, 60, 100]), set(), set(), now=0.0)
    after = [info(10, [10, 100], left=("n60",)), info(100, [10, 100], left=("n60",))]
    assert by_endpoint(view.look(after, set(), set(), now=1.0))["n60"].status == LEFT


def test_a_node_off_the_walk_that_still_answers_is_detached_not_gone():
    view = RingView()
    view.look(infos([10, 60, 100]), set(), set(), now=0.0)
    rows = by_endpoint(view.look(infos([10, 100]), set(), {"n60"}, now=1.0))
    assert rows["n60"].status == DETACHED
    rows = by_endpoint(view.look(infos([10, 100]), {"n60"}, set(), now=2.0))  # and then it dies
    assert rows["n60"].status == DEAD


def test_a_dead_node_seen_before_the_first_look_is_marked_from_a_successor_list():
    stale = [info(10, [10, 60, 100]), info(100, [10, 100])]
    rows = by_endpoint(RingView().look(stale, {"n60"}, set(), now=0.0))
    assert rows["n60"].status == DEAD


def test_events_are_bounded():
    view = RingView(max_events=3)
    ring = [10]
    view.look(infos(ring), set(), set(), now=0.0)
    for k in range(20, 120, 10):
        ring.append(k)
        view.look(infos(ring), set(), set(), now=float(k))
    assert [e for _, e in view.recent_events()] == ["n90 joined", "n100 joined", "n110 joined"]
