"""A subscription's latency histogram (pubsub/stats.py): fixed memory, quantiles within a bucket's width,
and only the buckets its latencies fell in."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from pubsub import stats
from pubsub.stats import LatencyHistogram


def test_the_latency_histogram_holds_its_memory_and_its_quantiles():
    h = LatencyHistogram()
    xs = np.random.default_rng(2).lognormal(0.0, 1.0, 200_000)
    assert h.counts == [], "no buckets before the first latency (a topic nothing came on holds none)"
    h.add(float(xs.max()))
    assert len(h.counts) == 1, "a first latency makes its own bucket only"
    h.add(float(xs.min()))  # its buckets, from the lowest latency's to the highest's, are made here
    assert len(h.counts) < stats._BUCKETS, "only from the lowest to the highest bucket a latency fell in"
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for x in xs:
        h.add(float(x))
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    # what pubsub/stats.py allocated and still holds: other threads of this process (a test worker's
    # leftovers) allocate meanwhile too, and are not the histogram's
    mine = [tracemalloc.Filter(True, stats.__file__)]
    grown = sum(d.size_diff for d in after.filter_traces(mine).compare_to(before.filter_traces(mine), "filename"))
    assert grown < 10_000, grown
    for q in (0.5, 0.9, 0.99):
        assert h.quantile(q) == pytest.approx(float(np.quantile(xs, q)), rel=0.02)
    assert h.quantile(0.0) == pytest.approx(xs.min()) and h.quantile(1.0) == pytest.approx(xs.max(), rel=0.02)
    assert LatencyHistogram().quantile(0.5) is None


def test_histograms_of_different_ranges_merge_into_what_one_would_have_counted():
    """Each histogram holds its own range of buckets; merged, they count what one histogram fed
    every latency counts. To see it fail, merge without aligning the ranges (`offset = 0`)."""
    low, high, whole = LatencyHistogram(), LatencyHistogram(), LatencyHistogram()
    for ms in (0.05, 0.07, 0.2):
        low.add(ms)
        whole.add(ms)
    for ms in (3.0, 40.0, 41.0, 900.0):
        high.add(ms)
        whole.add(ms)
    merged = LatencyHistogram()
    merged.merge(low)
    merged.merge(high)  # above what it holds
    assert merged.buckets() == whole.buckets() and merged.count == 7
    high.merge(low)  # below what it holds
    assert high.buckets() == whole.buckets()
    assert [merged.quantile(q) for q in (0.1, 0.5, 0.9)] == [whole.quantile(q) for q in (0.1, 0.5, 0.9)]
