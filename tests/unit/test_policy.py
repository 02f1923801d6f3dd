"""The policy (dht/policy.py) without sockets: patterns, deny over allow, groups, default deny, and
the file's mistakes said in one line."""

from __future__ import annotations

import pytest

from dht.policy import DEFAULT, Policy, PolicyError, PolicyFile

POLICY = """
[groups]
staff = ["alice", "bob"]

[principals.writer.publish]
allow = [">"]
deny = ["secret/>"]

[principals.reader.subscribe]
allow = ["open/>", "news/*/today"]
deny = ["open/private"]

[principals.staff.subscribe]
allow = ["staff/*"]

[principals.alice.publish]
allow = ["staff/alice"]
"""

CASES = [
    # principal, op, topic, allowed, deciding rule (a part of it)
    ("writer", "publish", "anything", True, 'writer.publish.allow ">"'),
    ("writer", "publish", "a/b/c", True, ">"),
    ("writer", "publish", "secret/plans", False, 'writer.publish.deny "secret/>"'),
    ("writer", "publish", "secret", True, ">"),  # > needs at least one level after "secret"
    ("writer", "subscribe", "anything", False, DEFAULT),
    ("reader", "subscribe", "open/a", True, "open/>"),
    ("reader", "subscribe", "open/a/b", True, "open/>"),
    ("reader", "subscribe", "open", False, DEFAULT),
    ("reader", "subscribe", "open/private", False, 'reader.subscribe.deny "open/private"'),
    ("reader", "subscribe", "open/private/x", True, "open/>"),  # the deny is exact
    ("reader", "subscribe", "news/eu/today", True, "news/*/today"),
    ("reader", "subscribe", "news/eu/west/today", False, DEFAULT),  # * is one level
    ("reader", "publish", "open/a", False, DEFAULT),
    ("alice", "subscribe", "staff/room", True, "staff.subscribe.allow"),  # through her group
    ("bob", "subscribe", "staff/room", True, "staff.subscribe.allow"),
    ("bob", "publish", "staff/alice", False, DEFAULT),
    ("alice", "publish", "staff/alice", True, "alice.publish.allow"),
    ("stranger", "subscribe", "open/a", False, DEFAULT),
    (None, "subscribe", "open/a", False, "no principal"),
]


@pytest.mark.parametrize("principal, op, topic, allowed, rule", CASES)
def test_the_matrix_of_principals_operations_and_patterns(principal, op, topic, allowed, rule):
    decision = Policy.parse(POLICY).decide(principal, op, topic)
    assert decision.allowed is allowed and rule in decision.rule, decision


def test_principals_are_those_the_rules_and_groups_name():
    policy = Policy.parse(POLICY)
    assert policy.principals == {"writer", "reader", "alice", "bob"}
    assert not policy.knows("staff") and not policy.knows("stranger")


@pytest.mark.parametrize("text, words", [
    ("[principals.a.publish]\nallow = ['a*']", "whole levels"),
    ("[principals.a.publish]\nallow = ['>/a']", "last level"),
    ("[principals.a.publish]\nallow = ['']", "non-empty"),
    ("[principals.a.read]\nallow = ['x']", "publish and subscribe"),
    ("[principals.a.publish]\npermit = ['x']", "allow and deny"),
    ("[principals.a.publish]\nallow = 'x'", "list of patterns"),
    ("[roles]\nx = 1", "unknown table"),
    ("[groups]\ng = 'a'", "must list"),
    ("[principals.'a b'.publish]\nallow = ['x']", "principal name"),
    ("not toml [", "not TOML"),
])
def test_a_bad_policy_is_one_line_that_says_where(text, words):
    with pytest.raises(PolicyError, match=words) as exc:
        Policy.parse(text, "p.toml")
    assert "\n" not in str(exc.value) and str(exc.value).startswith("p.toml")


def test_a_policy_file_reloads_when_it_changes_and_keeps_the_last_good_one(tmp_path):
    path = tmp_path / "acl.toml"
    path.write_text("[principals.a.subscribe]\nallow = ['t']\n")
    f = PolicyFile(path)
    assert f.policy.decide("a", "subscribe", "t").allowed and not f.check()
    path.write_text("[principals.a.subscribe]\ndeny = ['t']\n")
    assert f.check() and not f.policy.decide("a", "subscribe", "t").allowed and f.version == 2
    path.write_text("[principals.a.subscribe\n")
    assert not f.check() and "not TOML" in f.error and not f.policy.decide("a", "subscribe", "t").allowed
    with pytest.raises(PolicyError, match="cannot read"):
        PolicyFile(tmp_path / "missing.toml")
