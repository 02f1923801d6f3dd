"""The one grammar of topics and patterns (dht/subjects.py): parsing, matching, and where a pattern and
the topics it matches meet on the ring."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dht.subjects import (
    MATCH_CACHE,
    PREFIX_LEVELS,
    PatternError,
    PatternTrie,
    announced_at,
    check_publishable,
    check_subscribable,
    covers,
    is_pattern,
    matches,
    overlaps,
    parse,
    pattern_record,
)


def reference(pattern: str, topic: str) -> bool:
    """What the grammar says, as a regular expression: the check for the trie and `matches`."""
    levels = [{"+": "*", "#": ">"}.get(level, level) for level in pattern.split("/")]
    parts = []
    for level in levels:
        parts.append({"*": "[^/]*", ">": ".*"}.get(level, re.escape(level)))
    return re.fullmatch("/".join(parts), topic) is not None


@pytest.mark.parametrize("bad, says", [
    ("a/>/b", "only as the last level"),
    ("a*", "whole levels"),
    ("a/x>", "whole levels"),
    ("a//*", "empty level"),
    ("a/" * 40 + ">", "at most 32"),
    ("a/#/b", "only as the last level"),
])
def test_bad_patterns_are_refused_with_one_line_that_says_why(bad, says):
    with pytest.raises(PatternError, match=re.escape(says)) as err:
        check_subscribable(bad)
    assert "\n" not in str(err.value)


def test_mqtt_wildcards_read_as_nats_ones_and_other_signs_stay_literal():
    assert parse("sensors/+/temp") == ("sensors", "*", "temp")
    assert parse("orders/#") == ("orders", ">")
    assert check_subscribable("chat/room#1/c++") == "chat/room#1/c++" and not is_pattern("chat/room#1/c++")
    assert is_pattern("a/+") and is_pattern("a/>") and not is_pattern("a/b")


@pytest.mark.parametrize("topic", ["a/*", ">", "a/+/b", "#", "x/>"])
def test_a_topic_with_a_wildcard_level_cannot_be_published(topic):
    with pytest.raises(PatternError, match="wildcard level"):
        check_publishable(topic)


def test_plain_topics_stay_publishable():
    for topic in ("a", "a/b", "c++/room#1", "a*b", "orders/2024/x>y"):
        assert check_publishable(topic) == topic


def test_a_pattern_registers_where_every_topic_it_matches_is_announced():
    assert pattern_record(parse("dev/*/temp")) == "dev/>"
    assert pattern_record(parse("dev/7/>")) == "dev/7/>"
    assert pattern_record(parse("a/b/c/d/*")) == "a/b/>"  # cut to PREFIX_LEVELS
    assert announced_at("dev/7/temp") == ["dev/>", "dev/7/>"]
    assert announced_at("dev") == [] and announced_at("a/b") == ["a/>"]
    assert len(announced_at("a/b/c/d/e/f")) == PREFIX_LEVELS
    for pattern in ("dev/*/temp", "dev/7/>", "a/b/c/d/*", "a/>"):
        for topic in ("dev/7/temp", "dev/7/x/y", "a/b/c/d/e", "a/b"):
            if matches(parse(pattern), topic):
                assert pattern_record(parse(pattern)) in announced_at(topic), (pattern, topic)


@pytest.mark.parametrize("pattern", [">", "*/temp", "#", "+/x"])
def test_a_pattern_without_a_literal_first_level_is_refused_saying_why(pattern):
    with pytest.raises(PatternError, match="no literal first level"):
        pattern_record(parse(pattern))


LEVEL = st.sampled_from(["a", "b", "dev", "7"])
TOPIC = st.lists(LEVEL, min_size=1, max_size=5).map("/".join)
PATTERN = st.lists(st.sampled_from(["a", "b", "dev", "7", "*", "+"]), min_size=1, max_size=4).flatmap(
    lambda ls: st.sampled_from(["", "/>", "/#"]).map(lambda end: "/".join(ls) + end))


@settings(max_examples=300, deadline=None)
@given(st.lists(PATTERN, min_size=1, max_size=8), st.lists(TOPIC, min_size=1, max_size=8))
def test_the_trie_and_matches_agree_with_the_grammar(patterns, topics):
    trie = PatternTrie()
    for i, p in enumerate(patterns):
        trie.add(p, i)
    for topic in topics:
        want = {i for i, p in enumerate(patterns) if reference(p, topic)}
        assert {i for i, p in enumerate(patterns) if matches(parse(p), topic)} == want
        assert trie.match(topic) == want
        assert trie.match(topic) == want  # from the cache
    for i, p in enumerate(patterns[: len(patterns) // 2]):
        trie.remove(p, i)
    for topic in topics:
        assert trie.match(topic) == {i for i, p in enumerate(patterns) if i >= len(patterns) // 2
                                     and reference(p, topic)}


def test_removing_every_pattern_empties_the_trie_and_its_cache_stays_bounded():
    trie = PatternTrie()
    trie.add("dev/*/temp", "s1")
    trie.add("dev/>", "s2")
    for i in range(MATCH_CACHE + 10):
        trie.match(f"dev/{i}/temp")
    assert len(trie._cache) <= MATCH_CACHE
    trie.remove("dev/*/temp", "s1")
    trie.remove("dev/>", "s2")
    assert len(trie) == 0 and trie._root == {} and trie.match("dev/1/temp") == frozenset()


UNIVERSE = ["/".join(t) for n in range(1, 6) for t in __import__("itertools").product(["a", "b", "dev", "7", "q"],
                                                                                         repeat=n)]


@settings(max_examples=200, deadline=None)
@given(PATTERN, PATTERN)
def test_overlaps_and_covers_agree_with_the_topics_both_match(a, b):
    """What a policy decides for a pattern (dht/policy.py decide_pattern) rests on these two."""
    pa, pb = parse(a), parse(b)
    in_a = {t for t in UNIVERSE if matches(pa, t)}
    in_b = {t for t in UNIVERSE if matches(pb, t)}
    assert overlaps(pa, pb) == bool(in_a & in_b)
    assert covers(pa, pb) == (in_b <= in_a)


def test_a_publisher_entry_keeps_every_field_on_the_wire():
    """`PublisherEntry.to_bytes` names its fields one by one (for speed): a field added to the class
    and not to it would be lost on the ring. Every field, each away from its default, comes back.

    To see it fail, leave a field out of `to_bytes` (`archive`)."""
    import dataclasses

    import msgpack

    from pubsub.directory import PublisherEntry
    from pubsub.patterns import announce_value

    entry = PublisherEntry("p", "127.0.0.1:1", "127.0.0.1:2", strength=3, history=7, mode="relay",
                           retain={"messages": 5}, archive=True, patterns=True)
    defaults = PublisherEntry("p", "e", "r")
    assert all(getattr(entry, f.name) != getattr(defaults, f.name) for f in dataclasses.fields(PublisherEntry)
               if f.name not in ("id",))
    assert set(msgpack.unpackb(entry.to_bytes())) == {f.name for f in dataclasses.fields(PublisherEntry)}
    assert PublisherEntry.from_bytes(entry.to_bytes()) == entry
    assert announce_value("a/b", entry) == announce_value("a/b", entry.to_bytes())


def test_publisher_entries_are_parsed_once_by_their_bytes_within_a_bound():
    """A publisher's entry comes in the same bytes for each of its topics: parsed once, the same entry
    each time after, while the parsed ones stay within MAX_PARSED; malformed bytes are refused every
    time and never kept.

    To see it fail, keep every parsed entry (`_PARSED.clear()` gone): the bound is passed."""
    from pubsub import directory
    from pubsub.directory import MAX_PARSED, PublisherEntry

    raw = PublisherEntry("p", "127.0.0.1:1", "127.0.0.1:2").to_bytes()
    assert PublisherEntry.from_bytes(raw) is PublisherEntry.from_bytes(raw)
    for i in range(MAX_PARSED + 10):
        PublisherEntry.from_bytes(PublisherEntry(f"p{i}", "127.0.0.1:1", "127.0.0.1:2").to_bytes())
        assert len(directory._PARSED) <= MAX_PARSED
    for _ in range(2):
        with pytest.raises(ValueError):
            PublisherEntry.from_bytes(b"\x81\xa2id\x01")
    assert b"\x81\xa2id\x01" not in directory._PARSED
