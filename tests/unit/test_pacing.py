"""A quiet position's rounds come further apart, and any sign of movement brings them back (dht/pacing.py)."""

import queue

import zmq

from dht.pacing import Pacing, WakingQueue


def gaps(pacing: Pacing, rounds: int, changed_at: tuple[int, ...] = ()) -> list[int]:
    """The periods between successive rounds."""
    return [pacing.ran(changed=r in changed_at) for r in range(rounds)]


def test_quiet_rounds_double_their_gap_up_to_the_bound():
    g = gaps(Pacing(quiet_rounds=4, max_stretch=4), 20)
    assert g[:3] == [1, 1, 1] and g[3] == 2  # every period until four rounds changed nothing
    assert g[4:8] == [2, 2, 2, 4] and g[-1] == 4


def test_a_round_that_changes_links_or_a_wake_brings_rounds_back_to_every_period():
    pacing = Pacing(quiet_rounds=2, max_stretch=4)
    assert gaps(pacing, 10)[-1] == 4
    assert pacing.ran(changed=True) == 1
    gaps(pacing, 10)
    pacing.wake()
    assert pacing.ran(changed=False) == 1


def test_a_waking_queue_wakes_a_poller_until_cleared():
    jobs = WakingQueue()
    poller = zmq.Poller()
    poller.register(jobs.fd, zmq.POLLIN)
    try:
        assert poller.poll(0) == []
        jobs.put("a")
        jobs.put("b")
        assert poller.poll(0) != []
        jobs.clear()
        assert poller.poll(0) == []
        assert [jobs.get_nowait(), jobs.get_nowait()] == ["a", "b"]
        try:
            jobs.get_nowait()
            raise AssertionError("the queue should be empty")
        except queue.Empty:
            pass
    finally:
        jobs.close()
