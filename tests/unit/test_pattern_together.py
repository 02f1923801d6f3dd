"""Two patterns of one client that meet a new topic in one announcement take it in one turn of the io
loop (pubsub/patterns.py's `PatternWatches`, `IoLoop.together`): posted one after the other, the io loop
could deliver the topic's first messages to the first pattern before the second had taken it, and the
second pattern, reliable or not, never had them (seen as 15 of a topic's 20 messages in a loaded run).

To see it fail, drop `with self._together():` from `PatternWatches._watch`'s `changed`: each follower's
attach is then posted on its own."""

from __future__ import annotations

from dht.subjects import parse, pattern_record
from pubsub.directory import PublisherEntry
from pubsub.patterns import PatternFollower, PatternWatches, announce_field, announce_value

A = PublisherEntry("pub-a", "127.0.0.1:1", "127.0.0.1:2")


def test_two_patterns_meeting_one_new_topic_take_it_in_one_turn_of_the_io_loop(parts, monkeypatch):
    posted: list[int] = []  # the size of each batch of calls posted to the io loop
    call_all = parts.io.mailbox.call_all

    def counted(fns) -> None:  # noqa: ANN001
        fns = list(fns)
        posted.append(len(fns))
        call_all(fns)

    monkeypatch.setattr(parts.io.mailbox, "call_all", counted)
    registered: list = []
    watches = PatternWatches("me", registered.append, lambda *_: None, parts.io.together)
    taken: list[tuple[str, str]] = []
    record = pattern_record(parse("dev/>"))
    assert record == pattern_record(parse("dev/*/temp")), "one prefix record for both"
    for pattern in ("dev/*/temp", "dev/>"):
        watches.add(record, PatternFollower(
            pattern, lambda topic, _entries, p=pattern: parts.io.call(lambda: taken.append((p, topic))),
            lambda *_: None, lambda *_: None))
    reg = registered[-1]
    reg.fields = {announce_field(A.id, "dev/1/temp"): announce_value("dev/1/temp", A)}
    reg.on_placed(reg)
    assert posted == [2], "both patterns' attaches posted at once"
    parts.io.mailbox.run()
    assert taken == [("dev/*/temp", "dev/1/temp"), ("dev/>", "dev/1/temp")]
    parts.io.call(lambda: taken.append(("alone", "")))
    assert posted == [2, 1], "outside the block a call goes at once"
