"""Messages that outlive their publisher: a topic's archive, kept by the topic's owner node.

An archived publication (`advertise(topic, archive=True)`) copies what it retains into the topic's
record at the owner, as *segments*: fields "log/<publisher>/<first seq>-<last seq>" (numbers
zero-padded, so names sort by seq and a name alone says what a segment holds), each holding the
envelopes of a run of messages. They are record fields like the registrations, so the ring does
the rest: replicated on the owner's successors, handed over when nodes join, leave or restart, and
expired after the publication's retain-seconds. The publisher deletes its oldest segments to keep
within its retain-messages and retain-bytes bounds.

Off the hot path: the client's registrar thread sends what is new once per heartbeat (the feed
below marks it archived only when the owner has it, and the publication's history keeps every
message until then). Subscribers list a topic's segments with their registration read and take an
archived publisher that is no longer registered as a stream of its own, whose history and repair
come from the segments instead of from the publisher (pubsub/io_loop.py).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

import msgpack

from dht.records import MAX_TTL
from pubsub.envelope import Envelope, EnvelopeError
from pubsub.publication import Publication

LOG = "log/"
ARCHIVE_ACK = "\x00archive"  # the feed's position in the publication's acks: kept until archived
SEGMENT_BYTES = 256 * 1024  # a field's value stays well under the wire's 512 KiB
SEGMENT_MESSAGES = 5000
REQUEST_BYTES = 700 * 1024  # what one records request carries, under the 1 MiB frame limit
WIDTH = 16


def segment_name(publisher: str, first: int, last: int) -> str:
    return f"{LOG}{publisher}/{first:0{WIDTH}d}-{last:0{WIDTH}d}"


def parse_name(name: str) -> tuple[str, int, int] | None:
    """(publisher, first, last) of a segment's field name; None for anything else."""
    if not name.startswith(LOG):
        return None
    publisher, _, span = name[len(LOG):].rpartition("/")
    first, _, last = span.partition("-")
    if not publisher or not (first.isdigit() and last.isdigit()) or int(first) > int(last):
        return None
    return publisher, int(first), int(last)


def pack(envelopes: list[Envelope]) -> bytes:
    return msgpack.packb([e.encode() for e in envelopes], use_bin_type=True)


def unpack(raw: bytes, topic: str, publisher: str) -> list[Envelope]:
    """The well-formed envelopes of `topic` by `publisher` in a segment (anything else skipped)."""
    try:
        items = msgpack.unpackb(raw, raw=False)
    except Exception:
        return []
    out = []
    for item in items if isinstance(items, list) else []:
        try:
            env = Envelope.decode(item) if isinstance(item, bytes) else None
        except EnvelopeError:
            continue
        if env is not None and env.topic == topic and env.publisher == publisher:
            out.append(env)
    return out


@dataclass
class ArchivedPublisher:
    """What the names of a topic's segments say of one publisher's archive."""

    id: str
    segments: list[tuple[int, int, str]] = field(default_factory=list)  # (first, last, name), by seq

    @property
    def first(self) -> int:
        return self.segments[0][0]

    @property
    def last(self) -> int:
        return self.segments[-1][1]

    def covering(self, lo: int, hi: int | None) -> list[str]:
        """Names of the segments that hold any of lo..hi (hi None: to the newest), oldest first."""
        hi = self.last if hi is None else hi
        return [name for first, last, name in self.segments if last >= lo and first <= hi]


def archived_publishers(names: list[str]) -> dict[str, ArchivedPublisher]:
    out: dict[str, ArchivedPublisher] = {}
    for name in sorted(names):
        parsed = parse_name(name)
        if parsed is not None:
            pid, first, last = parsed
            out.setdefault(pid, ArchivedPublisher(pid)).segments.append((first, last, name))
    return out


class ArchiveFeed:
    """One archived publication's copy at its topic's owner: what to send, and what to delete.

    A message counts as archived (and the publication's history may let it go) only once the owner
    says its successors hold it too: an owner that dies before replicating what it took would lose
    it, so until then the feed remembers the owner it sent to, and sends the same run again to the
    next owner if that one changes."""

    def __init__(self, pub: Publication, lock: threading.Lock) -> None:
        self.pub, self.lock = pub, lock
        self.archived = 0  # the owner and its replicas hold every message up to this seq
        self.sent = 0  # the owner took every message up to this seq (not necessarily replicated)
        self.owner: str | None = None  # where the unreplicated ones went
        self._marks: deque[tuple[int, int]] = deque()  # (the owner's write count, last seq) per request
        self.segments: deque[tuple[str, int, int, int]] = deque()  # (name, first, last, bytes) at the owner
        self._sent: list[tuple[str, int, int, int]] = []  # in the request in flight
        self._deleting: list[str] = []
        with lock:
            pub.history.ack(ARCHIVE_ACK, 0)

    def sending_to(self, owner: str) -> None:
        """The next request goes to `owner`: another one than the unreplicated messages went to gets
        them again (a segment sent twice has the same name, and merges keep one)."""
        if owner != self.owner:
            if self.sent > self.archived:
                self.sent = self.archived
                while self.segments and self.segments[-1][1] > self.archived:
                    self.segments.pop()
            self._marks.clear()
            self.owner = owner

    def items(self) -> list[dict]:
        """The next request's items: new segments (up to REQUEST_BYTES), then deletions of the oldest
        beyond the bounds (counting the new ones)."""
        topic, bounds = self.pub.topic, self.pub.bounds
        ttl = min(bounds.seconds, MAX_TTL)  # type: ignore[union-attr]
        with self.lock:
            pending = self.pub.history.range(self.sent + 1, None, limit=10 * SEGMENT_MESSAGES)
        items, size, run, run_bytes = [], 0, [], 0
        self._sent = []

        def cut() -> None:
            nonlocal run, run_bytes
            name = segment_name(self.pub.publisher, run[0].seq, run[-1].seq)
            items.append({"k": topic, "f": name, "op": "set", "val": pack(run), "ttl": ttl})
            self._sent.append((name, run[0].seq, run[-1].seq, run_bytes))
            run, run_bytes = [], 0

        for env in pending:
            if size + len(env.payload) > REQUEST_BYTES:
                break
            run.append(env)
            run_bytes += len(env.payload) + 64
            size += len(env.payload) + 64
            if run_bytes >= SEGMENT_BYTES or len(run) >= SEGMENT_MESSAGES:
                cut()
        if run:
            cut()
        held = list(self.segments) + self._sent
        count = sum(s[2] - s[1] + 1 for s in held)
        total = sum(s[3] for s in held)
        self._deleting = []  # (retain-seconds needs no deletion: it is the segments' lease at the owner)
        for name, first, last, nbytes in list(self.segments):
            if count <= bounds.messages and total <= bounds.bytes:  # type: ignore[union-attr]
                break
            self._deleting.append(name)
            count -= last - first + 1
            total -= nbytes
        items += [{"k": topic, "f": name, "op": "del"} for name in self._deleting]
        return items

    def confirmed(self, written: int | None, replicated: int | None) -> None:
        """The owner took the last request whole; it had made `written` writes then, and its
        successors hold `replicated` of its writes."""
        gone = set(self._deleting)
        while self.segments and self.segments[0][0] in gone:  # (name, ...)
            self.segments.popleft()
        self.segments.extend(self._sent)
        if self._sent:
            self.sent = self._sent[-1][2]
            self._marks.append((written if written is not None else 0, self.sent))
        self._sent, self._deleting = [], []
        self.replicated(replicated)

    def replicated(self, replicated: int | None) -> None:
        """The owner's successors hold `replicated` of its writes (None: the owner cannot say, as a
        node that does not count them: what it took is all we can know)."""
        last = None
        while self._marks and (replicated is None or self._marks[0][0] <= replicated):
            last = self._marks.popleft()[1]
        if last is not None and last > self.archived:
            self.archived = last
            with self.lock:
                self.pub.history.ack(ARCHIVE_ACK, self.archived)

    @property
    def behind(self) -> bool:
        """Messages not yet sent to the owner."""
        return self.pub.last_seq > self.sent

    @property
    def unsafe(self) -> bool:
        """Messages sent, or to send, that the owner's successors do not hold yet."""
        return self.pub.last_seq > self.archived
