"""The registrar's side of topic archives (pubsub/archive.py): feeding each archived publication's
messages to its topic's owner, waiting at close until the owner's successors hold them, and reading
an archive for a subscriber whose publisher is gone. Runs on the registrar's thread only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from dht.client import DhtClient, DhtError
from dht.transport import Reply
from pubsub.archive import ARCHIVE_ACK, ArchiveFeed, unpack
from pubsub.directory import PUB
from pubsub.publication import Publication
from pubsub.registration import Registration

log = logging.getLogger(__name__)

SETTLE_POLL = 0.02  # seconds between asks of an owner whether its successors hold what we sent


class Archives:
    def __init__(self, dht: DhtClient, regs: dict[tuple[str, str], Registration],
                 watching: dict[str, Registration]) -> None:
        self.dht, self.regs, self.watching = dht, regs, watching
        self.feeds: dict[tuple[str, str], ArchiveFeed] = {}  # archived publications, by registration key

    def feed(self, rounds: int = 4) -> None:
        """Send each archived publication's new messages to its topic's owner (a few requests each),
        and learn how much of what was sent the owner has replicated."""
        for key, feed in list(self.feeds.items()):
            reg = self.regs.get(key)
            for _ in range(rounds):
                if reg is None or not reg.placed or reg.owner is None:
                    break
                feed.sending_to(reg.owner)
                items = feed.items()
                if not items and feed.unsafe:
                    items = [{"k": reg.topic}]  # nothing to send: only ask what is replicated
                if not items:
                    break
                try:
                    reply = self.dht.records_at(reg.owner, items, replicated=True)
                except DhtError as exc:
                    log.info("archiving %s at %s: %s", reg.topic, reg.owner, exc)
                    break
                if not all(r.get("ok") for r in reply.results):
                    break  # not the owner any more: the registration moves first
                feed.confirmed(reply.written, reply.replicated)
                if not feed.behind:
                    break

    def hand_over(self, publications: Iterable[Publication], lock: threading.Lock) -> list[str]:
        """At close: each publication (not archived already) whose known durable subscribers lack some
        of its messages gets an archive of what it retained after the lowest of their positions, and
        a marker saying what they were owed (pubsub/archive.py). The topics handed over."""
        topics = []
        for pub in publications:
            key = (pub.topic, PUB + pub.publisher)
            if key in self.feeds or key not in self.regs:
                continue
            with lock:
                lacking = [p for s, p in pub.history.acked.items() if s != ARCHIVE_ACK and p < pub.last_seq]
            if lacking:
                self.feeds[key] = ArchiveFeed(pub, lock, after=min(lacking))
                topics.append(pub.topic)
        if topics:
            log.info("handing to the ring what durable subscribers still lack of: %s", ", ".join(topics))
        return topics

    def settle(self, timeout: float) -> bool:
        """At close: send what the owners lack and wait (at most `timeout`) until their successors
        hold it too, so that the archive outlives an owner that dies right after we are gone. True
        when every archived message is replicated."""
        deadline = time.monotonic() + timeout
        while True:
            self.feed(rounds=100)
            if not any(f.unsafe for f in self.feeds.values()):
                return True
            if time.monotonic() >= deadline:
                left = {f.pub.topic: f"{f.archived + 1}..{f.pub.last_seq}" for f in self.feeds.values() if f.unsafe}
                log.warning("closing with archives the ring does not hold yet (topic: seqs): %s; a durable "
                            "subscriber that lacks them will not get them from here", left)
                return False
            time.sleep(SETTLE_POLL)

    def read(self, topic: str, publisher: str, op: str, lo: int, hi: int | None,
             then: Callable[[Reply], None]) -> None:
        """A subscriber's history or repair from the archive: the same answer a publisher gives."""
        reg = self.watching.get(topic)
        archived = None if reg is None else reg.archived.get(publisher)
        if reg is None or archived is None or reg.owner is None:
            then(Reply(False, err=f"no archive of {publisher} on {topic!r} known"))
            return
        body: dict = {"first": archived.first, "last": archived.last, "messages": []}
        if op == "range":
            body["first"] = archived.held_from(lo)  # an owed number below it is in no segment
            names = archived.covering(lo, hi)[:3]
            try:
                reply = self.dht.records_at(reg.owner, [{"k": topic, "read": n} for n in names]) if names else None
            except DhtError as exc:
                then(Reply(False, err=str(exc)))
                return
            for name, result in zip(names, reply.results if reply else [], strict=False):
                raw = (result.get("fields") or {}).get(name)
                if isinstance(raw, bytes):
                    body["messages"] += [e.encode() for e in unpack(raw, topic, publisher)
                                         if e.seq >= lo and (hi is None or e.seq <= hi)]
        then(Reply(True, body))
