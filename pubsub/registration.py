"""What a client registers in the ring, and where: one Registration per (topic, field), and the
arcs of owner nodes learned from their replies. Plain data, used by the registrar's thread only.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

import msgpack

from dht.ids import in_half_open
from dht.routing import Peer
from pubsub.archive import ArchivedPublisher
from pubsub.directory import PublisherEntry


@dataclass
class Registration:
    topic: str
    name: str  # "pub/<client id>" or "sub/<mode>/<client id>"
    value: bytes
    watch: bool  # a subscription: read the publishers, and listen for their changes
    namespace: str = "pub/"  # what a watch reads and listens to: the publishers, or a prefix record's topics
    relay_service: str | None = None  # "relay_in" (a relay publication) or "relay_out" (subscription)
    on_placed: Callable[[Registration], None] | None = None  # once, when first placed
    on_publishers: Callable[[Registration], None] | None = None  # whenever the publishers change
    on_relay: Callable[[Registration], None] | None = None  # whenever the owner's relay changes
    on_refused: Callable[[Registration, str], None] | None = None  # a policy refused it (then it is dropped)
    count: str | None = None  # when placed, also count the record's fields with this prefix
    counted: int = 0
    owner: str | None = None
    placed: bool = False
    need_read: bool = False
    epoch: int | None = None
    catch_up: int | None = None  # a read due only if the change frames have not brought us to this epoch by then
    publishers: dict[str, PublisherEntry] = field(default_factory=dict)
    relay: str | None = None
    events: str | None = None  # the events endpoint we listen to for this record
    retry_at: float = 0.0
    read_at: float = 0.0
    missed: int = 0  # consecutive renewals the owner did not answer
    archive_read: bool = False  # a subscription that wants history: list the topic's archive too
    archived: dict[str, ArchivedPublisher] = field(default_factory=dict)  # from the archive's segment names
    mode: str = "direct"
    read: str | None = None  # a publication: read these fields of the record when placed (its groups)
    fields: dict | None = None  # what that read found (and, watching another namespace than the publishers',
    # that namespace's fields as they change)
    delta: tuple[dict, list] | None = None  # while on_publishers runs for a change: (set, deleted); None: a read
    paged: dict | None = None  # a read the owner answers in pages (dht/records.py READ_PAGE): the pages so far
    paged_epoch: object = None  # ... and the epoch its first page named
    read_after: str | None = None  # where the next page starts

    def all_publishers(self, owed: Callable[[str], bool] | None = None) -> list[PublisherEntry]:
        """The registered publishers, and the archived ones no longer registered (served from the
        archive: no endpoint, their history what the archive holds). A hand-over (what a closing
        publisher left for its durable subscribers) only for a durable subscription that `owed` says
        has a position with that publisher: nobody else was owed anything by it."""
        out = list(self.publishers.values())
        for a in self.archived.values():
            if a.id in self.publishers or not (a.segments or a.left):
                continue
            if a.left is not None and (owed is None or not owed(a.id)):
                continue
            held = sum(last - first + 1 for first, last, _ in a.segments)
            out.append(PublisherEntry(a.id, "", "", None, held, self.mode, archive=True))
        return out

    @property
    def key(self) -> tuple[str, str]:
        return self.topic, self.name


class OwnerArcs:
    """Which node owns which arc (pred, node], as `records` replies said: lookups only for the rest."""

    def __init__(self) -> None:
        self._arcs: dict[str, tuple[int, int]] = {}
        self._sorted: list[tuple[int, int, str]] = []  # (node id, pred id, endpoint), by node id
        self._alone: str | None = None  # a node that said it is alone on the ring: it owns every key

    def learn(self, endpoint: str, arc: tuple[int | None, int]) -> None:
        lo, hi = arc
        if lo == hi:
            self._arcs.clear()
            self._sorted = []
            self._alone = endpoint  # until it answers "not the owner" (a node joined)
            return
        if self._alone == endpoint:
            self._alone = None
        if lo is None:
            self.forget(endpoint)  # no predecessor known: nothing safe to cache
            return
        if self._arcs.get(endpoint) != (lo, hi):
            self._arcs[endpoint] = (lo, hi)
            self._sorted = sorted((h, lo_, e) for e, (lo_, h) in self._arcs.items())

    def learn_links(self, me: Peer, predecessor: Peer | None, successors: list[Peer]) -> None:
        """The arcs a node's links imply: its own, (predecessor, me], and each successor's, (the one
        before it, it]. A successor's is a guess (a node may have joined between two of them since):
        its owner's "not the owner" corrects it as it does any arc gone stale."""
        if predecessor is None:
            return
        self.learn(me.endpoint, (predecessor.id, me.id))
        before = me
        for peer in successors:
            if peer.id == me.id or peer.endpoint in self._arcs:
                return
            self.learn(peer.endpoint, (before.id, peer.id))
            before = peer

    def forget(self, endpoint: str) -> None:
        if self._alone == endpoint:
            self._alone = None
        if self._arcs.pop(endpoint, None) is not None:
            self._sorted = sorted((h, lo_, e) for e, (lo_, h) in self._arcs.items())

    def owner(self, k: int) -> str | None:
        if self._alone is not None:
            return self._alone
        if not self._sorted:
            return None
        i = bisect.bisect_left(self._sorted, (k, -1, ""))
        hi, lo, endpoint = self._sorted[i % len(self._sorted)]
        return endpoint if in_half_open(k, lo, hi) else None


def subscriber_value(mode: str) -> bytes:
    return msgpack.packb({"mode": mode}, use_bin_type=True)
