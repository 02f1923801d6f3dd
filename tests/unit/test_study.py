"""Study grids and their checks (topologies/study.py) and the five patterns' verdicts (traces/patterns.py),
without processes: each pattern true, false and "cannot tell". To see it fail, make pattern 2's or 4's
false branch return None in `traces.patterns.patterns`."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from topologies.run_summary import subscribers_per_topic
from topologies.study import StudyError, StudySpec
from traces.patterns import fit_growth, patterns


def spec(tmp_path: Path, text: str) -> StudySpec:
    path = tmp_path / "study.toml"
    path.write_text(text)
    return StudySpec.from_toml(path)


def test_a_grid_is_every_combination_times_repeats_with_names_from_what_varies(tmp_path):
    s = spec(tmp_path, 'backend = "local"\nrepeats = 2\n[grid]\npubs = [1, 2]\nsubs = [1, 4]\nmode = ["direct", '
                       '"relay"]\nrate = 20\n')
    points = s.points()
    assert len(points) == 2 * 2 * 2 * 2
    assert points[0].name == "001-p1-s1-direct-r1" and points[1].name == "002-p1-s1-direct-r2"
    assert len({p.name for p in points}) == len(points)
    assert {p.params["rate"] for p in points} == {20.0} and points[-1].params["topo"] == "loopback"
    assert points[-1].to_dict()["subscribers_per_topic"] == {"topic0": 4}


def test_single_is_sized_to_each_point_one_host_per_process(tmp_path):
    s = StudySpec.make({"pubs": [1, 3], "subs": [2], "dht": [2]}, {"backend": "mininet"})
    assert [p.params["topo"] for p in s.points()] == ["single,5", "single,7"]


@pytest.mark.parametrize("text, words", [
    ("pub = [1, 2]\n", "unknown key 'pub'"),
    ("pubs = []\n", "empty grid: 'pubs' has no values"),
    ("pubs = [1, 0]\n", "pubs: expected an integer >= 1"),
    ('mode = ["direct", "broker"]\n', "mode: expected one of direct, relay"),
    ('topo = ["ring,4"]\n', "unknown topology 'ring'"),
    ('backend = "local"\ndelay = "5ms"\n', "the local backend runs every process on loopback"),
    ("topics = 1\ntopics_per_sub = 2\n", "topics_per_sub 2 is more than topics 1"),
    ("pubs = [1, 1]\n", "a value is repeated"),
    ("pubs = [1\n", "is not TOML"),
])
def test_bad_study_files_are_refused_with_one_line(tmp_path, text, words):
    with pytest.raises(StudyError, match=None) as err:
        spec(tmp_path, text)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_topology_that_cannot_hold_a_points_processes_is_refused_up_front(tmp_path):
    s = spec(tmp_path, 'topo = ["single,4"]\npubs = [1, 4]\nsubs = 2\n')
    with pytest.raises(StudyError, match=r"'single,4' has 4 hosts and cannot hold a point's 8 processes"):
        s.check_capacity()
    huge = StudySpec.make({"pubs": [5000], "subs": [5000]}, {"backend": "local"})
    with pytest.raises(StudyError, match="processes"):
        huge.check_capacity()


def test_subscribers_are_dealt_over_topics_like_the_experiment_deals_them():
    assert subscribers_per_topic(5, 2, 3) == {"topic0": 3, "topic1": 4, "topic2": 3}


def test_the_fit_recovers_a_known_exponent_and_says_how_sure_it_is():
    rng = np.random.default_rng(1)
    x = [p * s for p in (1, 2, 4, 8) for s in (1, 2, 4, 8)]
    y = [2.0 + 0.01 * v ** 2 * (1 + 0.02 * rng.standard_normal()) for v in x]
    fit = fit_growth(x, y)
    lo, hi = fit["exponent_ci"]
    assert abs(fit["exponent"] - 2) < 0.05 and lo < fit["exponent"] < hi and hi - lo < 0.2
    assert abs(fit["base_ms"] - 2) < 0.3
    assert fit_growth([1, 2, 4], [1, 2, 3]) is None  # too few points to say anything


def point(mode: str, pubs: int, subs: int, p50: float, p99: float) -> dict:
    return {"mode": mode, "pubs": pubs, "subs": subs, "topics": 1, "topo": "single", "latency_p50_ms": p50,
            "latency_p99_ms": p99}


def test_the_five_patterns_on_a_broker_that_grows_quadratically_and_a_direct_path_that_grows_linearly():
    points = []
    for p in (1, 2, 4, 8):
        for s in (1, 2, 4, 8):
            x = p * s
            points.append(point("direct", p, s, 1.0 + 0.05 * x, 1.2 + 0.06 * x))
            points.append(point("relay", p, s, 1.5 + 0.01 * x ** 2, 6.0 + 0.05 * x ** 2))
    v = patterns(points)
    assert v["1"]["holds"] and v["1"]["direct_faster"] == 16
    assert v["2"]["holds"] and v["2"]["p99_over_p50_median"]["relay"] > v["2"]["p99_over_p50_median"]["direct"]
    assert v["3"]["holds"] and v["4"]["holds"] and v["4"]["z"] > 1.96
    assert v["5"]["per_mode"]["direct"]["shape"] == "linear"
    assert v["5"]["per_mode"]["relay"]["shape"] == "super-linear" and v["5"]["per_mode"]["relay"]["quadratic"]
    assert v["5"]["holds"]


def test_a_relay_faster_with_no_heavier_tail_that_grows_slower_than_direct_fails_patterns_1_2_and_4():
    """The false branches: the relay faster (1), its tail no heavier than direct's (2), its latency
    growing more slowly (4): each said False, not "cannot tell"."""
    points = []
    for p in (1, 2, 4, 8):
        for s in (1, 2, 4, 8):
            x = p * s
            points.append(point("direct", p, s, 1.0 + 0.01 * x ** 2, (1.0 + 0.01 * x ** 2) * 3.0))
            points.append(point("relay", p, s, 0.5 + 0.001 * x, (0.5 + 0.001 * x) * 2.0))
    v = patterns(points)
    assert v["2"]["holds"] is False and v["2"]["relay_over_direct"] < 1.1
    assert v["4"]["holds"] is False and v["4"]["z"] < -1.96
    assert v["1"]["holds"] is False and v["1"]["direct_faster"] == 0


def test_tails_alike_within_ten_to_twenty_percent_cannot_tell_pattern_2():
    points = [point(m, p, 1, 1.0, 2.0 * (1.15 if m == "relay" else 1.0)) for m in ("direct", "relay")
              for p in (1, 2)]
    assert patterns(points)["2"]["holds"] is None


def test_flat_latency_does_not_grow_and_few_points_cannot_tell():
    flat = [point(m, p, s, 1.0 + 0.001 * ((p + s) % 3), 1.1) for m in ("direct", "relay")
            for p in (1, 2, 4) for s in (1, 2, 4)]
    assert patterns(flat)["3"]["holds"] is False
    few = [point(m, p, 1, 1.0, 2.0) for m in ("direct", "relay") for p in (1, 2)]
    v = patterns(few)
    assert v["3"]["holds"] is None and v["5"]["holds"] is None and v["4"]["holds"] is None
    assert not math.isnan(v["2"]["p99_over_p50_median"]["direct"])
