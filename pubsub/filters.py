"""The subscribers' filters a client's PUB sockets hold, counted from what XPUB_VERBOSER brings up.

An XPUB socket tells its owner of every filter a subscriber sends (b"\\x01" + prefix) and of each
cancellation, its connection's end included (b"\\x00" + prefix). Counting them per (socket, prefix)
says how many subscribers of a topic a socket would reach now (`held`): what `advertise` and a first
publish wait for, so that a subscriber listening first misses no message. A consumer group member's
own dispatch filter is its group's business (pubsub/groups.py), handed to `groups_filter`, which says
whether it took it. Pure: the caller reads the sockets, under its lock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable


class Filters:
    def __init__(self, groups_filter: Callable[[bytes, bool], bool]) -> None:
        self._counts: Counter[tuple[str, bytes]] = Counter()  # (socket name, prefix) -> subscribers' filters
        self._groups_filter = groups_filter

    def message(self, socket: str, msg: bytes) -> None:
        """One message the XPUB socket named `socket` brought up (anything but a filter is ignored)."""
        if msg[:1] in (b"\x01", b"\x00"):
            self.seen(socket, msg[1:], msg[:1] == b"\x01")

    def seen(self, socket: str, prefix: bytes, on: bool) -> None:
        """A subscriber's filter `prefix` arrived (`on`) or went."""
        if socket == "direct" and self._groups_filter(prefix, on):
            return
        key = (socket, prefix)
        if on:
            self._counts[key] += 1
        elif self._counts[key] <= 1:
            self._counts.pop(key, None)
        else:
            self._counts[key] -= 1

    def held(self, socket: str, prefix: bytes) -> int:
        return self._counts.get((socket, prefix), 0)

    def forget(self, socket: str) -> None:
        """The socket was closed and bound again: every peer subscribes again from scratch."""
        self._counts = Counter({k: v for k, v in self._counts.items() if k[0] != socket})
