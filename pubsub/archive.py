"""Messages that outlive their publisher: a topic's archive, kept by the topic's owner node.

An archived publication (`advertise(topic, archive=True)`) copies what it retains into the topic's
record at the owner, as *segments*: fields "log/<publisher>/<first seq>-<last seq>" (numbers
zero-padded, so names sort by seq and a name alone says what a segment holds), each holding the
envelopes of a run of messages. They are record fields like the registrations, so the ring does
the rest: replicated on the owner's successors, handed over when nodes join, leave or restart, and
expired after the publication's retain-seconds. The publisher deletes its oldest segments to keep
within its retain-messages and retain-bytes bounds.

A publication that was not archived still leaves one at close when durable subscribers it knows (from
their acks) lack some of its messages: a *hand-over*. It holds what the publication retained beyond
the lowest acknowledged position (so within its retention bounds), and a marker field
"log/<publisher>/left-<first owed>-<last sent>" says what those subscribers were owed; a durable
subscriber that returns takes the archive as the publisher's stream if it has a position with that
publisher, and dead-letters exactly the owed numbers the archive does not hold.

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
LEFT = "left-"  # a hand-over marker's name, after the publisher: "left-<first owed>-<last sent>"
ARCHIVE_ACK = "\x00archive"  # the feed's position in the publication's acks: kept until archived
SEGMENT_BYTES = 256 * 1024  # a field's value stays well under the wire's 512 KiB
SEGMENT_MESSAGES = 5000
REQUEST_BYTES = 700 * 1024  # what one records request carries, under the 1 MiB frame limit
WIDTH = 16


def segment_name(publisher: str, first: int, last: int) -> str:
    return f"{LOG}{publisher}/{first:0{WIDTH}d}-{last:0{WIDTH}d}"


def left_name(publisher: str, owed_from: int, last: int) -> str:
    """The hand-over marker: durable subscribers were owed from `owed_from`; the publisher sent up to `last`."""
    return f"{LOG}{publisher}/{LEFT}{owed_from:0{WIDTH}d}-{last:0{WIDTH}d}"


def _span(publisher: str, span: str) -> tuple[str, int, int] | None:
    first, _, last = span.partition("-")
    if not publisher or not (first.isdigit() and last.isdigit()) or int(first) > int(last) + 1:
        return None
    return publisher, int(first), int(last)


def parse_name(name: str) -> tuple[str, int, int] | None:
    """(publisher, first, last) of a segment's field name; None for anything else."""
    if not name.startswith(LOG):
        return None
    publisher, _, span = name[len(LOG):].rpartition("/")
    parsed = _span(publisher, span)
    return parsed if parsed is not None and parsed[1] <= parsed[2] else None


def parse_left(name: str) -> tuple[str, int, int] | None:
    """(publisher, first owed, last sent) of a hand-over marker's name; None for anything else."""
    if not name.startswith(LOG):
        return None
    publisher, _, span = name[len(LOG):].rpartition("/")
    return _span(publisher, span[len(LEFT):]) if span.startswith(LEFT) else None


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
    left: tuple[int, int] | None = None  # a hand-over's (first owed, last sent)

    @property
    def first(self) -> int:
        """The oldest seq held (last + 1 when a hand-over holds none)."""
        return self.segments[0][0] if self.segments else self.last + 1

    @property
    def last(self) -> int:
        """The newest seq the publisher sent, as far as the archive knows."""
        return max(self.segments[-1][1] if self.segments else 0, self.left[1] if self.left else 0)

    def held_from(self, lo: int) -> int:
        """The first seq >= lo that a segment holds (last + 1 when none does): an owed number below it
        and at or above lo is in no segment."""
        return next((max(first, lo) for first, last, _ in self.segments if last >= lo), self.last + 1)

    def covering(self, lo: int, hi: int | None) -> list[str]:
        """Names of the segments that hold any of lo..hi (hi None: to the newest), oldest first."""
        hi = self.last if hi is None else hi
        return [name for first, last, name in self.segments if last >= lo and first <= hi]


def archived_publishers(names: list[str]) -> dict[str, ArchivedPublisher]:
    out: dict[str, ArchivedPublisher] = {}
    for name in sorted(names):
        parsed, left = parse_name(name), parse_left(name)
        if parsed is not None:
            pid, first, last = parsed
            out.setdefault(pid, ArchivedPublisher(pid)).segments.append((first, last, name))
        elif left is not None:
            pid, owed_from, sent = left
            held = out.setdefault(pid, ArchivedPublisher(pid))
            if held.left is None or sent > held.left[1]:
                held.left = (owed_from, sent)
    return out


class ArchiveFeed:
    """One archived publication's copy at its topic's owner: what to send, and what to delete.

    A message counts as archived (and the publication's history may let it go) only once the owner
    says its successors hold it too: an owner that dies before replicating what it took would lose
    it, so until then the feed remembers the owner it sent to, and sends the same run again to the
    next owner if that one changes."""

    def __init__(self, pub: Publication, lock: threading.Lock, after: int = 0) -> None:
        """`after`: a hand-over at close, of what follows the lowest position its durable subscribers
        acknowledged (and a marker saying what they were owed)."""
        self.pub, self.lock = pub, lock
        start = max(after, pub.history.first_seq - 1) if after else 0  # what retention let go is not ours
        self.archived = start  # the owner and its replicas hold every message up to this seq
        self.sent = start  # the owner took every message up to this seq (not necessarily replicated)
        self.owner: str | None = None  # where the unreplicated ones went
        self._marks: deque[tuple[int, int]] = deque()  # (the owner's write count, last seq) per request
        self.segments: deque[tuple[str, int, int, int]] = deque()  # (name, first, last, bytes) at the owner
        self._sent: list[tuple[str, int, int, int]] = []  # in the request in flight
        self._deleting: list[str] = []
        self.marker = left_name(pub.publisher, after + 1, pub.last_seq) if after else None
        self.marker_state = "pending"  # "in flight" in the request, "taken" once the owner has it
        with lock:
            pub.history.ack(ARCHIVE_ACK, start)

    def sending_to(self, owner: str) -> None:
        """The next request goes to `owner`: another one than the unreplicated messages went to gets
        them again (a segment sent twice has the same name, and merges keep one)."""
        if owner != self.owner:
            self.marker_state = "pending"  # (the same name again: idempotent)
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
        if self.marker is not None and self.marker_state != "taken":
            items.append({"k": topic, "f": self.marker, "op": "set", "val": b"", "ttl": ttl})
            self.marker_state = "in flight"
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
        if self.marker_state == "in flight":
            self.marker_state = "taken"
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
        """Messages sent, or to send, that the owner's successors do not hold yet (or a hand-over's
        marker the owner has not taken)."""
        return self.pub.last_seq > self.archived or (self.marker is not None and self.marker_state != "taken")
