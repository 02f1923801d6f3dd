"""The dedup window of idempotent publishing (pubsub/dedup.py): bounded in time, ids and bytes, and
counting what its bounds push out early.

To see it fail: never expire (`expire` returning at once: an id reused after the window is refused),
or evict without counting (`self.evicted += 1` gone: the bound's early losses are not recorded)."""

from __future__ import annotations

import pytest

from pubsub.dedup import DedupBounds, DedupWindow, Published, check_msg_id

S = 1_000_000_000  # a second in ns


def test_an_id_within_the_window_is_a_duplicate_and_after_it_is_new():
    w = DedupWindow(DedupBounds(seconds=2.0))
    assert w.seen("a", 0) is None
    w.add("a", 1, 0)
    w.add("b", 2, 1 * S)
    assert w.seen("a", 1 * S) == 1 and w.duplicates == 1
    assert w.seen("a", 3 * S) is None, "reused after the window: a new message (documented)"
    assert w.seen("b", 3 * S) == 2 and len(w) == 1
    assert w.evicted == 0


def test_the_bounds_push_out_the_oldest_ids_and_count_them():
    w = DedupWindow(DedupBounds(seconds=60.0, ids=3, bytes=1000))
    for i in range(5):
        w.add(f"id{i}", i + 1, i)
    assert len(w) == 3 and w.evicted == 2
    assert w.seen("id0", 10) is None and w.seen("id4", 10) == 5
    small = DedupWindow(DedupBounds(seconds=60.0, ids=100, bytes=10))
    small.add("aaaaa", 1, 0)
    small.add("bbbbbb", 2, 0)
    assert small.seen("aaaaa", 0) is None and small.evicted == 1 and small.bytes == 6
    assert w.stats() == {"window_s": 60.0, "max_ids": 3, "max_bytes": 1000, "ids": 3, "bytes": 9, "evicted": 2,
                         "duplicates": 1}


def test_a_restored_window_forgets_what_the_window_let_go():
    w = DedupWindow(DedupBounds(seconds=5.0))
    w.restore([("old", 1, 0), ("new", 2, 8 * S)], now_ns=10 * S)
    assert w.seen("old", 10 * S) is None and w.seen("new", 10 * S) == 2


def test_published_is_the_sequence_number_and_says_whether_it_was_a_duplicate():
    first, again = Published(7), Published(7, duplicate=True)
    assert first == again == 7 and not first.duplicate and again.duplicate
    assert repr(again) == "Published(7, duplicate=True)" and again + 1 == 8


@pytest.mark.parametrize("bad", ["", "x" * 257, 5, None])
def test_a_bad_msg_id_is_refused_in_one_line(bad):
    with pytest.raises(ValueError, match="a msg_id is 1..256 characters"):
        check_msg_id(bad)
    with pytest.raises(ValueError, match="positive"):
        DedupBounds(seconds=0)
