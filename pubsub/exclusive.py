"""Exclusive topics fenced by an election: at most one publisher of such a topic sends at a time.

A publisher that advertises a topic with a `strength` campaigns for the topic's election (named by
`election_name`) with that strength, in the ring's consensus group of that name (dht/election.py,
dht/kv_machine.py's claims): a stronger publisher claims the name from a weaker holder and gets it
when the holder's lease ends, at most a lease later. A publisher sends only while it leads, and
stamps every message with its epoch (pubsub/envelope.py); what it publishes meanwhile is counted
(`Publication.standby`) and not sent. A subscriber delivers a message only if its epoch is at least
the highest it delivered on that topic, and counts the others (`fenced`): a publisher cut off from its
group by a partition stops within its lease, and whatever of its older epoch arrives after the new
leader's first message is dropped, never delivered after it.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

from dht.kv_machine import MAX_KEY_CHARS

PREFIX = "chordpub.exclusive/"


class Fence(Protocol):
    """What a publication reads of its election (dht/election.py's Election)."""

    @property
    def is_leader(self) -> bool: ...

    epoch: int


def election_name(topic: str) -> str:
    """The election an exclusive topic's publishers campaign in: the topic itself after a prefix, or
    its digest when that would be longer than an election name may be."""
    name = PREFIX + topic
    if len(name) <= MAX_KEY_CHARS:
        return name
    return PREFIX + "#" + hashlib.sha256(topic.encode()).hexdigest()
