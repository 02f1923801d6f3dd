"""A pattern subscription's follower (pubsub/patterns.py) against its prefix record's announcements,
without sockets: what it follows, and what its bound keeps it from following, said where the
application looks (`Subscription.warnings`, the `warnings` of `sub --json`).

To see it fail, drop the count of topics past the bound (`not_followed` never raised): the warning
is then only in the log."""

from __future__ import annotations

from pubsub import patterns
from pubsub.delivery import Subscription
from pubsub.directory import PublisherEntry
from pubsub.patterns import Announcements, PatternFollower, announce_field, announce_value
from pubsub.subscription import TopicState

P = PublisherEntry("pub", "127.0.0.1:1", "127.0.0.1:2")


def test_a_pattern_past_its_bound_follows_no_more_and_says_so(monkeypatch):
    monkeypatch.setattr(patterns, "MAX_TOPICS_PER_PATTERN", 2)
    attached: list[str] = []
    follower = PatternFollower("dev/*/temp", lambda t, _e: attached.append(t), lambda _t, _e: None, lambda _t: None)
    index = Announcements()
    topics = [f"dev/{i}/temp" for i in range(3)] + ["dev/0/hum"]
    touched = index.apply({announce_field(P.id, t): announce_value(t, P) for t in topics}, [])
    follower.refresh(touched, index)
    assert sorted(attached) == sorted(follower.topics) and len(attached) == 2, "two followed, the bound"
    assert "dev/0/hum" not in follower.topics
    assert follower.not_followed == 1
    sub = Subscription("dev/*/temp", TopicState("dev/*/temp", "me"), lambda _t: None)
    sub.pattern = follower
    assert any("past its bound of 2" in w for w in sub.warnings), "where the application looks"
