"""A reliable subscriber asks its stalled streams' publishers for their newest seq only once it has read
what its own sockets hold (pubsub/io_loop.py, `IoLoop._tails_due`): a message missing at a tail check
may be waiting in its queue, and a publisher without history would see it given up.

To see it fail: check the tails whatever is unread (`unread = False`): the check runs with a message
waiting in the socket."""

from __future__ import annotations

from types import SimpleNamespace

import zmq

from chordpub.launcher import wait_for
from pubsub import io_loop
from pubsub.io_loop import IoLoop


def test_tail_checks_wait_for_the_unread_messages_at_most_a_bounded_time(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(io_loop.time, "monotonic", lambda: clock[0])
    ctx = zmq.Context.instance()
    pub, sub = ctx.socket(zmq.PUB), ctx.socket(zmq.SUB)
    try:
        pub.bind("inproc://tail-checks")
        sub.connect("inproc://tail-checks")
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        loop = SimpleNamespace(_held_back=False, _tails_deferred_since=None, subs={"direct": sub})
        assert IoLoop._tails_due(loop)  # nothing unread

        def unread() -> bool:
            pub.send(b"a message on its way")
            return bool(sub.getsockopt(zmq.EVENTS) & zmq.POLLIN)

        wait_for(unread, 5, what="a message waiting in the SUB socket")
        waits = []
        for _ in range(4):
            waits.append(IoLoop._tails_due(loop))
            clock[0] += io_loop.UNREAD_DEFER_S / 4 - 0.01
        assert waits == [False] * 4
        clock[0] += 0.1
        assert IoLoop._tails_due(loop), "a subscriber never idle still checks its tails, every so often"
        while sub.poll(0):
            sub.recv()
        assert IoLoop._tails_due(loop)
        loop._held_back = True
        assert not IoLoop._tails_due(loop)
    finally:
        pub.close(0)
        sub.close(0)
