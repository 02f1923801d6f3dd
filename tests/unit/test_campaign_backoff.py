"""A removed member's campaigns back off; a wanted member's never do (dht/campaign_backoff.py).

To see it fail: make `CampaignBackoff.campaigned` return None at once: an unwanted member whose
campaigns fail keeps campaigning at every election timeout (on a 16-node idle ring a third of the
processes held such a group, ticking ten times a second).
"""

from __future__ import annotations

from dht.campaign_backoff import CAMPAIGNS_BEFORE_BACKOFF, FIRST_WAIT, MAX_WAIT, CampaignBackoff

ME, OTHERS = "a:1#1", ["b:1#1", "c:1#1", "d:1#1"]


def no_jitter(lo: float, hi: float) -> float:
    return 1.0


def fail_campaigns(b: CampaignBackoff, wanted: list[str] | None, now: float = 0.0) -> list[str | None]:
    return [b.campaigned(7, wanted, ME, now) for _ in range(CAMPAIGNS_BEFORE_BACKOFF)]


def test_an_unwanted_member_whose_campaigns_fail_waits_longer_each_time_up_to_the_bound():
    b = CampaignBackoff(no_jitter)
    assert fail_campaigns(b, OTHERS) == [None] * (CAMPAIGNS_BEFORE_BACKOFF - 1) + ["wait"]
    assert b.waiting(7) and b.next_resume() == FIRST_WAIT
    assert b.due(FIRST_WAIT - 0.01) == [] and b.due(FIRST_WAIT) == [7]
    assert b.next_resume() is None and b.waiting(7)  # resumed: ticking, still backing off
    waits = []
    for _ in range(6):
        assert b.campaigned(7, OTHERS, ME, 100.0) == "wait"
        waits.append(b.next_resume() - 100.0)
        b.due(1000.0)
    assert waits == [2 * FIRST_WAIT, 4 * FIRST_WAIT, MAX_WAIT, MAX_WAIT, MAX_WAIT, MAX_WAIT]


def test_a_member_the_ring_wants_never_waits_and_an_unknown_want_is_asked_first():
    b = CampaignBackoff(no_jitter)
    assert fail_campaigns(b, [ME, *OTHERS[:2]]) == [None] * CAMPAIGNS_BEFORE_BACKOFF
    assert not b.waiting(7)
    assert fail_campaigns(CampaignBackoff(no_jitter), None)[-1] == "ask"


def test_a_leader_heard_starts_the_count_over():
    b = CampaignBackoff(no_jitter)
    fail_campaigns(b, OTHERS)
    b.heard_leader(7)
    assert not b.waiting(7) and b.next_resume() is None
    assert b.campaigned(7, OTHERS, ME, 0.0) is None  # the first failure again
