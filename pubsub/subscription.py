"""What a client keeps for one topic it follows: its publishers, and what it delivered of each.

Pure: no sockets, no clocks. The client's io loop (pubsub/io_loop.py) feeds a `TopicState` what
arrives (live messages, history and repair replies, the record's publishers) and carries out what
it asks for afterwards: the messages in `deliveries`, the fetches in `fetches`, the `dead` letters,
and a read of the record when `reread` is set. Per publisher (a `Stream`):
- best effort: duplicates dropped and counted, gaps counted (a bounded window, pubsub/stats.py);
- history on join (`history` > 0): the last k messages, marked recovered, before anything live. By
  default (`history_policy` "at_least", the reference framework's rule: offered >= requested) a
  publisher that offers fewer than k is not matched, and the subscription says so; with "up_to" it
  is matched and gives what it holds of the k;
- reliable: in-order delivery by sequence number from 1, duplicates dropped, gaps (the start
  included) fetched from the publisher's history; what fell out of it becomes a dead letter and
  counts in `lost`; a stream that stalls has its tail checked by the loop every heartbeat. A
  running publisher that keeps no history (nothing to repair from) owes us from its next seq, as
  best effort does, and a stalled tail of its is given up only after TAIL_BEATS_UNREPAIRABLE beats
  (a message late under load could only be dropped when it comes, never fetched);
- durable (reliable, with `start` positions from the data directory): a publisher's stream resumes
  after its committed position instead of 1, and what was handed to the application before
  (up to the handed position) comes marked `redelivered`;
- ownership strength: on an exclusive topic only one publisher is delivered. Its publishers stamp
  their messages with the epoch of the election they lead (pubsub/exclusive.py): a message of an
  older epoch than one delivered is dropped and counted (`fenced`). Messages without an epoch (a
  publisher that could not campaign) fall back on the record: only the strongest live one.
A message from a publisher the record has not told us of yet (a "stranger": it registered since
our last read) is held, bounded, and the record read again at once, so a new publisher loses no
more of its start than the time one read takes. A publisher the record no longer names has
*departed*: its messages still in flight are delivered until the loop `forget`s it a lease later
(its unregistration travels owner -> events -> us and can overtake its last messages; and a
registration that expired at an owner too busy to read its renewals comes back).

Long because the three delivery modes share one stream per publisher: history, reliable repair
and strength each decide on the same sequence numbers, and apart they would disagree.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from pubsub.directory import PublisherEntry, leader
from pubsub.envelope import Envelope, EnvelopeError, Run
from pubsub.message import DeadLetter, Message
from pubsub.stats import LatencyHistogram, SeqWindow

log = logging.getLogger(__name__)

HELD_LIMIT = 100_000  # per stream: live messages held during catch-up, or out of order (reliable); a
# subscription holds at most its application's pending limit of them, if that is lower (Client.subscribe)
STRANGER_LIMIT = 10_000  # per topic: messages of publishers the record has not told us of yet
RESUME_LIMIT = 10_000  # per topic: forgotten publishers whose next sequence number we remember
UNRETAINED = "no longer retained by the publisher"  # a dead letter's reason: sent before we came, not kept
TAIL_BEATS = 2  # reliable: beats a stalled stream's publisher is ahead of us before its tail is fetched
TAIL_BEATS_UNREPAIRABLE = 10  # ... when it keeps no history: the fetch finds nothing, the gap is dead-lettered
RESUME_TOPICS = 10_000  # per pattern subscription: topics it stopped following whose positions it remembers


@dataclass
class Stats:
    """A subscription's figures, in fixed memory."""

    received: int = 0
    duplicates: int = 0
    recovered: int = 0
    redelivered: int = 0  # durable: handed to the application before a restart, delivered again
    dead_lettered: int = 0  # reliable: messages that fell out of the publisher's history
    dropped: int = 0  # best effort: not taken by a slow application (the subscription's queue was full)
    fenced: int = 0  # exclusive topics: messages of an older epoch than one delivered, dropped
    publishers: set[str] = field(default_factory=set)
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    lost_before: int = 0  # best-effort gaps of publishers that have since gone

    def summary(self, topic: str, lost: int) -> dict:
        """The `sub --json` object of one topic (the CLI contract). `expected`, `received` (of which
        `recovered`) and `lost` follow the accounting of docs/contracts.md; `gaps` is `lost`'s older name."""
        p50, p99 = self.latency.quantile(0.5), self.latency.quantile(0.99)
        return {"topic": topic, "received": self.received, "duplicates": self.duplicates, "gaps": lost,
                "lost": lost, "expected": self.received - self.redelivered + lost,
                "publishers": len(self.publishers), "recovered": self.recovered, "dropped": self.dropped,
                "redelivered": self.redelivered, "fenced": self.fenced,
                "latency_ms": {"p50": None if p50 is None else round(p50, 3),
                               "p99": None if p99 is None else round(p99, 3)}}


class Stream:
    """One matched publisher of the topic. What most streams never change is a class default, set on
    the instance only when it changes: a pattern meeting a thousand new topics makes a stream each."""

    handed_before = 0  # durable: up to here, handed to the application before a restart
    history_missing = False  # best effort with history: not obtained yet (the source may fail)
    fetching = False  # a history/repair fetch in flight (one at a time per stream)
    expected_at_beat = 0
    tail_beats = 0  # consecutive tail checks that found the publisher ahead of us, nothing come
    tail_first = 0  # the publisher's newest seq at the first of them
    live_high = 0  # the highest seq that came live: the ordered stream has passed what is below
    stalled_to = 0  # reliable: the fetch in flight was asked because up to here stayed missing for
    # TAIL_BEATS (the publisher's newest at the first of them: what it sent since may still be on its way)
    unretained_to = 0  # reliable: the publisher holds nothing up to here (what is missing waits)
    probe_token: int | None = None  # the token the publisher promised for our probe
    probe_last = 0  # the publisher's newest seq when it promised that token: its probe follows all up to here
    probe_seen = -1  # the highest probe token that reached us
    confirmed = False  # a probe proved our subscription is in place at this publisher
    probing = False  # a probe was asked for: the publisher's newest seq waits for it (`on_start`)
    pending_start: tuple[dict, int] | None = None  # that answer, until the probe comes
    start_on_probe = False  # its newest seq comes with the probe's reply, not asked on its own
    linked: str | None = None  # the PUB endpoint our direct SUB socket holds for it (the io loop's)
    provisional = False  # taken by its first frame, before the topic's record named it (the io loop's)

    def __init__(self, entry: PublisherEntry, catching_up: bool) -> None:
        self.entry = entry
        self.window = SeqWindow()  # best effort
        self.expected = 1  # reliable: the next sequence number to deliver
        self.first_owed = 1  # reliable: where delivery started (after a durable position, or 1)
        self.buffer: dict[int, tuple[Envelope, bool]] = {}  # reliable: waiting for the gap before them
        self.catching_up = catching_up  # history or reliable start being fetched: live is held
        self.held: list[tuple[Envelope, int]] = []  # best effort: (live message, recv_ns) while catching up

    @property
    def id(self) -> str:
        return self.entry.id

    def promised(self, token: int, last: object) -> None:
        """A probe reply: the token promised and the publisher's newest seq as it promised it. The lowest
        token counts (a probe carrying it or a later one follows every message up to that seq)."""
        newest = _uint(last)
        if self.probe_token is None or token < self.probe_token:
            self.probe_token, self.probe_last = token, newest
        elif token == self.probe_token:
            self.probe_last = max(self.probe_last, newest)

    def passed_to(self) -> int:
        """Up to which seq whatever was sent to us has come: what the live stream passed, and once a probe
        confirmed us, every message the publisher had sent before it (one not here by then was sent
        before our filter was in place, and comes only from the publisher's retention)."""
        return max(self.live_high, self.stalled_to, self.probe_last if self.confirmed else 0)

    def see_probe(self, token: int) -> bool:
        """A probe arrived; True when it confirms our subscription (token at least the one promised)."""
        self.probe_seen = max(self.probe_seen, token)
        if self.probe_token is not None and self.probe_seen >= self.probe_token:
            self.confirmed = True
        return self.confirmed


HISTORY_POLICIES = ("at_least", "up_to")


class TopicState:
    """One topic a client follows: its publishers' streams, what arrived, and an outbox the io loop
    empties after every call. What most topics never change is a class default, set on the instance
    only when it changes (a pattern meeting a thousand new topics makes a state each)."""

    _leader: str | None = None  # on an exclusive topic, the only publisher delivered
    epoch = 0  # on an exclusive topic, the highest epoch delivered
    _stranger_count = 0
    _joined = False  # the first reconcile is done: publishers met later owe us from seq 1
    exact = True  # received by its own filter; else by the frames of pattern `via_pattern`
    via_pattern: str | None = None
    provisional = False  # met by a pattern's frame, not announced yet (pubsub/pattern_intake.py)
    reread = False  # its record is to be read again (a publisher met by its frames was never named)

    def __init__(self, topic: str, subscriber: str, history: int = 0, reliable: bool = False,
                 mode: str = "direct", start: Callable[[str], tuple[int, int]] | None = None,
                 history_policy: str = "at_least", held_limit: int = HELD_LIMIT) -> None:
        """`start(publisher)`: a durable subscription's (committed, handed) positions; `held_limit`: live
        messages held per stream at most (beyond, a reliable stream fetches them again from history)."""
        self.held_limit = held_limit
        if history < 0:
            raise ValueError("history cannot be negative")
        if history_policy not in HISTORY_POLICIES:
            raise ValueError(f"history_policy must be one of {', '.join(HISTORY_POLICIES)}, not {history_policy!r}")
        self.history_policy = history_policy
        if start is not None and not reliable:
            raise ValueError("a durable subscription is reliable")
        self.start = start
        self.topic, self.subscriber, self.history, self.reliable, self.mode = (
            topic, subscriber, history, reliable, mode)
        self.streams: dict[str, Stream] = {}
        self.departed: dict[str, Stream] = {}  # gone from the record; still delivered until forgotten
        self.resume: dict[str, int] = {}  # forgotten publishers: the first seq not yet delivered from them
        self.unmatched: dict[str, str] = {}  # publisher id -> why it is not delivered
        self.strangers: dict[str, list[tuple[Envelope, int]]] = {}  # publisher -> (message, recv_ns)
        self.stats = Stats()
        # the outbox, emptied by the io loop after every call
        self.deliveries: list[Message] = []
        self.fetches: list[tuple[Stream, int, int | None]] = []  # (stream, from, to or None: the newest)
        self.heads: list[Stream] = []  # streams whose newest seq must be asked first (history k)
        self.starts: list[Stream] = []  # best effort, joining a running publisher: where is it now?
        self.dead: list[DeadLetter] = []
        self.moved: list[tuple[Stream, str]] = []  # (stream, its old PUB endpoint): reconnect

    # -- publishers come and go --------------------------------------------------------------------
    def reconcile(self, publishers: list[PublisherEntry]) -> tuple[list[Stream], list[Stream]]:
        """Match the record's publishers; returns (new streams, departed streams). New streams that need
        history are queued for their catch-up; held strangers of theirs are taken in. A departed one
        that is named again comes back as it was."""
        current = {p.id: p for p in publishers}
        gone = [self.streams.pop(pid) for pid in list(self.streams) if pid not in current]
        for st in gone:
            log.info("%s: publisher %s is no longer in the topic's record", self.topic, st.id)
            self.departed[st.id] = st
        for pid in [p for p in self.unmatched if p not in current]:
            del self.unmatched[pid]
        new: list[Stream] = []
        for pid, entry in current.items():
            back = self.streams.get(pid)
            if back is None:
                back = self.departed.pop(pid, None)
                if back is not None or pid in self.resume:  # (within its grace, or forgotten meanwhile)
                    log.info("%s: publisher %s is back in the topic's record", self.topic, pid)
            if back is not None:  # a departed one named again comes back as it was
                if back.entry.endpoint != entry.endpoint:  # restarted (a stable id, a data directory)
                    self.moved.append((back, back.entry.endpoint))  # or gone, and now served by its archive
                if back.entry.repair != entry.repair and back.history_missing and not back.fetching:
                    self.heads.append(back)  # its history failed where it was asked: ask the new source
                    back.fetching = True
                back.entry = entry  # strength or endpoints may have changed
                back.provisional = False
                self.streams[pid] = back
                continue
            if pid in self.unmatched:
                continue
            why = self._mismatch(entry)
            if why:
                self.unmatched[pid] = why
                log.warning("%s: %s", self.topic, why)
                continue
            st = Stream(entry, catching_up=self.reliable or self.history > 0)
            self.streams[pid] = st
            self.stats.publishers.add(pid)
            new.append(st)
            resume = self.resume.pop(pid, 1)  # a publisher forgotten and back: nothing delivered comes again
            st.window = SeqWindow(prefix=resume - 1)
            st.expected = st.first_owed = resume
            if self.reliable:
                if self.start is not None:
                    committed, st.handed_before = self.start(pid)
                    st.expected = st.first_owed = max(committed + 1, resume)
                st.fetching = True
                if st.expected == 1 and not self._joined and not _repairable(entry):
                    self._start(st)  # it keeps nothing to repair from: owed from its next seq on
                else:
                    self.fetches.append((st, st.expected, None))
            elif self.history:
                self.heads.append(st)
                st.fetching = True
                st.history_missing = True
            elif not self._joined:  # it was publishing before we came: we are owed from its next seq on
                st.catching_up = st.fetching = True
                self._start(st)
        self._joined = True
        chosen = leader([s.entry for s in self.streams.values()])
        self._leader = None if chosen is None else chosen.id
        for st in new:
            for env, recv_ns in self.strangers.pop(st.id, []):
                self.on_message(env, recv_ns)
        for pid in [p for p in self.strangers if p not in current or p in self.unmatched]:
            del self.strangers[pid]  # the record does not know it: a stranger indeed, or one already gone
        self._stranger_count = sum(map(len, self.strangers.values()))
        return new, gone

    def _start(self, st: Stream) -> None:
        """Where a running publisher stands is asked: with the probe a live new stream gets when it is
        matched (pubsub/confirm.py: the probe's reply says), or on its own (`starts`)."""
        if st.entry.endpoint and st.entry.repair:
            st.start_on_probe = True
        else:
            self.starts.append(st)

    def confirm(self, publishers: list[PublisherEntry]) -> bool:
        """The record names exactly the publishers streamed now, each where we are linked to it (the
        event that confirms a publisher met by its first frame, or any change of the record's other
        fields): their entries are taken as they are, and nothing else changes. False: `reconcile`
        has work to do."""
        streams = self.streams
        if len(publishers) != len(streams) or self.strangers or self.unmatched:
            return False
        for entry in publishers:
            st = streams.get(entry.id)
            if st is None or st.entry.endpoint != entry.endpoint or st.entry.repair != entry.repair:
                return False
        for entry in publishers:
            st = streams[entry.id]
            st.entry, st.provisional = entry, False
        chosen = leader(publishers)
        self._leader = None if chosen is None else chosen.id
        self._joined = True
        return True

    def meet(self, entry: PublisherEntry) -> Stream | None:
        """A publisher the record does not name yet, taken by its first frame (the io loop's
        `_meet_publisher`) as `reconcile` would take it once named: a best-effort subscription without
        history, after its first reconcile, is owed a publisher met later from seq 1 (or from where it
        stood when forgotten). `entry` holds a first publish's terms (no strength: the record brings any
        election). None: this subscription waits for the record (its terms matter)."""
        pid = entry.id
        if (self.reliable or self.history or not self._joined or self.unmatched or pid in self.streams
                or pid in self.departed or entry.strength is not None or self._mismatch(entry)):
            return None
        st = Stream(entry, catching_up=False)
        resume = self.resume.pop(pid, 1)
        if resume != 1:
            st.window = SeqWindow(prefix=resume - 1)
        st.expected = st.first_owed = resume
        st.provisional = True
        self.streams[pid] = st
        self.stats.publishers.add(pid)
        held = self.strangers.pop(pid, None)
        if held:
            self._stranger_count -= len(held)
            for env, recv_ns in held:
                self.on_message(env, recv_ns)
        return st

    def meet_first_frames(self) -> None:
        """A topic met by its first frames: every publisher of it owes us from seq 1 (none ran before us)."""
        self._joined = True

    def owe_from_first(self) -> None:
        """A topic a reliable pattern meets after its first read (announced later, or followed again
        after its announcements lapsed): its publishers owe us from seq 1, or from where we left it.
        Whether what a publisher that keeps nothing sent before we met the topic came before the
        subscription or after cannot be told, so it is a dead letter, never skipped unseen (taken
        from the publisher's next seq, a message sent while the topic's announcement had lapsed at a
        busy owner was lost without a trace: 936 of a 10,000-topic pattern's topics in one CI run)."""
        self._joined = True

    def forget(self, pid: str) -> Stream | None:
        """A departed publisher's grace is over: nothing more of it is delivered."""
        st = self.departed.pop(pid, None)
        if st is not None:
            self.stats.lost_before += st.window.missing()
            self.resume[pid] = self._next(st)
            while len(self.resume) > RESUME_LIMIT:
                del self.resume[next(iter(self.resume))]
        return st

    def _next(self, st: Stream) -> int:
        return st.expected if self.reliable else st.window.highest + 1

    def positions(self) -> dict[str, int]:
        """Each publisher's first seq not yet delivered: what a pattern keeps of a topic it stops
        following, so that following it again (its announcement lapsed and came back) delivers
        nothing twice."""
        out = dict(self.resume)
        for st in (*self.departed.values(), *self.streams.values()):
            out[st.id] = self._next(st)
        return out

    def _mismatch(self, entry: PublisherEntry) -> str | None:
        if entry.mode != self.mode:
            return (f"publisher {entry.id} publishes in {entry.mode} mode, this subscription is {self.mode}: "
                    "not matched")
        if self.history > entry.history and self.history_policy == "at_least":
            return f"publisher {entry.id} offers history {entry.history} < requested {self.history}: not matched"
        return None

    # -- what arrives -------------------------------------------------------------------------------
    def on_message(self, env: Envelope, recv_ns: int) -> None:
        """A live message of this topic from the SUB socket (already checked: well formed, our topic)."""
        st = self.streams.get(env.publisher) or self.departed.get(env.publisher)
        if st is not None and env.seq > st.live_high:
            st.live_high = env.seq
        if st is None:
            if env.publisher not in self.unmatched and self._stranger_count < STRANGER_LIMIT:
                self.strangers.setdefault(env.publisher, []).append((env, recv_ns))
                self._stranger_count += 1
                self.reread = True
            return
        if st.catching_up and not self.reliable:
            if len(st.held) < self.held_limit:
                st.held.append((env, recv_ns))
            return
        self._accept(st, env, False, recv_ns)

    def on_run(self, run: Run, recv_ns: int) -> None:
        """A coalesced run of one publisher's consecutive messages (pubsub/envelope.py). The common
        case, the next ones of a stream delivering in order, is taken whole; anything else message
        by message, exactly as `on_message` would."""
        st, n, seq = self.streams.get(run.publisher), len(run.payloads), run.seq
        if st is not None and seq + n - 1 > st.live_high:
            st.live_high = seq + n - 1
        if st is None or st.catching_up or seq <= st.handed_before or run.epoch or (
                self._leader is not None and self._leader != st.entry.id) or not self._take_run(st, seq, n):
            for env in run.envelopes():
                self.on_message(env, recv_ns)
            return
        topic, publisher = self.topic, run.publisher
        first_owed = st.first_owed if self.reliable else st.window.first_owed
        self.deliveries.extend([Message(topic, payload, publisher, seq + i, sent_ns, recv_ns, False, False, first_owed)
                                for i, (sent_ns, payload) in enumerate(zip(run.sent_ns, run.payloads, strict=True))])
        self.stats.received += n
        self.stats.latency.add_many([(recv_ns - sent_ns) / 1e6 for sent_ns in run.sent_ns])

    def _take_run(self, st: Stream, seq: int, n: int) -> bool:
        """Count seq..seq + n - 1 delivered when they are exactly the next ones (False: nothing done)."""
        if not self.reliable:
            return st.window.take_run(seq, n)
        if seq != st.expected or st.buffer:
            return False
        st.expected += n
        return True

    def on_start(self, st: Stream, body: dict, recv_ns: int) -> None:
        """Best effort (or reliable, of a publisher that keeps no history to repair from), joining a
        running publisher: its newest seq now is the last we are not owed,
        unless its live stream reached us first (what was held is delivered, not taken for a
        duplicate). Asked before anything live is delivered: a message lost while our connection to
        it was being made is counted lost, the slow-joiner loss. While our probe is awaited the answer
        waits for it: asked before the probe, on the same connection, it counts only messages sent
        before the probe, so when the probe has come every one of them that was sent to us has come
        too (the answer could otherwise overtake a message sent to us the moment our filter arrived,
        and take it for one sent before we joined)."""
        if st.probing and not st.confirmed:
            st.pending_start = (body, recv_ns)
            return
        owed = _uint(body.get("last")) + 1
        if self.reliable:  # a publisher that keeps no history: what came live is in the buffer
            st.expected = st.first_owed = min(owed, min(st.buffer, default=owed))
            self._drain(st, recv_ns)
            self.fetch_done(st, recv_ns)
            return
        first_live = min((env.seq for env, _ in st.held), default=None)
        st.window.owe_from(owed if first_live is None else min(owed, first_live))
        self.fetch_done(st, recv_ns)

    def release_start(self, st: Stream, now_ns: int) -> None:
        """The probe came (or will not): apply the publisher's newest seq that waited for it."""
        st.probing = False
        if st.pending_start is not None:
            body, recv_ns = st.pending_start
            st.pending_start = None
            self.on_start(st, body, recv_ns)

    def probe_passed(self, st: Stream, recv_ns: int) -> None:
        """Our probe came: what a fetch found the publisher no longer holds, and that it had sent before
        the probe, is lost (a reliable pattern meeting a topic late waited TAIL_BEATS_UNREPAIRABLE beats
        of tail checks for it, and a loaded CI run for more than a minute)."""
        if self.reliable and st.unretained_to >= st.expected and not st.fetching:
            self._give_up(st, min(st.unretained_to, st.passed_to()), UNRETAINED, recv_ns)
            self._drain(st, recv_ns)

    def on_head(self, st: Stream, body: dict, recv_ns: int) -> None:
        """The publisher's answer to "last 0": where its history starts and ends; fetch our k of it."""
        last, first = _uint(body.get("last")), _uint(body.get("first"))
        lo = max(last - self.history + 1, first, 1)
        st.window.owe_from(lo)
        if last >= lo:
            self.fetches.append((st, lo, last))
        else:
            st.history_missing = False
            self.fetch_done(st, recv_ns)

    def on_range(self, st: Stream, lo: int, hi: int | None, body: dict, recv_ns: int) -> int | None:
        """A history/repair reply for lo..hi. Returns where to continue (the reply stopped at its byte
        budget), or None when the range is done."""
        first, last = _uint(body.get("first"), 1), _uint(body.get("last"))
        got = []
        for raw in body.get("messages") or []:
            try:
                env = Envelope.decode(raw) if isinstance(raw, bytes) else None
            except EnvelopeError:
                continue
            if env is not None and env.topic == self.topic and env.publisher == st.id and env.seq >= lo:
                got.append(env)
        end = last if hi is None else min(hi, last)
        if self.reliable:
            for env in got:
                if env.seq >= st.expected and env.seq not in st.buffer:
                    st.buffer[env.seq] = (env, True)
            if first > st.expected:
                gap_to = first - 1 if hi is None else min(first - 1, hi)
                why = (UNRETAINED if st.entry.repair else
                       "the publisher is gone and its archive does not hold them (beyond its retention bounds)")
                # what the live stream has not passed yet may still be on its way (sent before this
                # reply, on another connection): given up once the stream passes it, our probe comes
                # (`probe_passed`), or it stalls
                st.unretained_to = max(st.unretained_to, gap_to)
                self._give_up(st, min(gap_to, st.passed_to()), why, recv_ns)
            st.stalled_to = 0
            self._drain(st, recv_ns)
        else:
            for env in got:
                self._accept(st, env, True, recv_ns)
        if got and got[-1].seq < end:
            return got[-1].seq + 1
        st.history_missing = False
        return None

    def fetch_done(self, st: Stream, recv_ns: int) -> None:
        """A catch-up or repair finished (or failed): release what was held, look for the next gap."""
        st.fetching = False
        if st.catching_up:
            st.catching_up = False
            held, st.held = st.held, []
            for env, held_ns in held:
                self._accept(st, env, False, held_ns)
        if self.reliable and st.buffer:
            lowest = min(st.buffer)
            if lowest > st.expected and st.unretained_to < lowest - 1:  # (what is not held: the next beat)
                self._fetch(st, st.expected, lowest - 1)

    def tail_check(self, st: Stream) -> bool:
        """Every heartbeat (reliable): True when the stream stalled since the last beat, so the loop
        should ask the publisher for its newest seq (a lost last message shows no gap behind it)."""
        stalled = st.expected == st.expected_at_beat and not st.fetching and not st.catching_up
        st.expected_at_beat = st.expected
        if not stalled:
            st.tail_beats = 0
        return stalled

    def on_tail(self, st: Stream, body: dict) -> None:
        """The publisher's newest seq, for a stream that stalled. Ahead of us TAIL_BEATS times in a row,
        with nothing come between, what is missing is fetched; the first time it may be on its way still
        (the answer comes on another connection than the messages, and can overtake them: 2 of 10 streams
        of a subscriber taking 10,000 new topics at once were dead-lettered for messages about to arrive).
        A publisher that keeps no history is given longer: a fetch finds nothing there, and what is late
        is dead-lettered, then dropped when it comes (338 topics of a 10,000-topic pattern under load).
        Given up is only what was missing all that while (up to the first answer's newest)."""
        last = _uint(body.get("last"))
        if last < st.expected or st.fetching:
            st.tail_beats = 0
            return
        st.tail_beats += 1
        if st.tail_beats == 1:
            st.tail_first = last
        patience = TAIL_BEATS if _repairable(st.entry) else TAIL_BEATS_UNREPAIRABLE
        if st.confirmed and st.probe_last >= st.expected:
            patience = 1  # what our probe followed is not on its way: fetched (or given up) at once
        if st.tail_beats < patience:
            return
        st.tail_beats = 0
        st.stalled_to = st.tail_first  # missing all that while: what the publisher no longer holds is lost
        self._fetch(st, st.expected, None)

    # -- delivery ---------------------------------------------------------------------------------------
    def _accept(self, st: Stream, env: Envelope, recovered: bool, recv_ns: int) -> None:
        if not self.reliable:
            if st.window.add(env.seq):
                self._deliver(st, env, recovered, recv_ns)
            else:
                self.stats.duplicates += 1  # counted, never delivered twice (history overlaps live)
            return
        if env.seq < st.expected or env.seq in st.buffer:
            return  # already delivered or waiting: a duplicate never reaches the application
        if len(st.buffer) >= self.held_limit:
            return  # the history still has it: the gap will be fetched again
        st.buffer[env.seq] = (env, recovered)
        if env.seq > st.expected and not recovered and not st.fetching and not st.catching_up:
            self._fetch(st, st.expected, env.seq - 1)
        self._drain(st, recv_ns)

    def _fetch(self, st: Stream, lo: int, hi: int | None) -> None:
        if hi is not None and hi < lo:
            return
        st.fetching = True
        self.fetches.append((st, lo, hi))

    def _drain(self, st: Stream, recv_ns: int) -> None:
        while st.expected in st.buffer:
            env, recovered = st.buffer.pop(st.expected)
            st.expected += 1
            self._deliver(st, env, recovered, recv_ns)

    def _deliver(self, st: Stream, env: Envelope, recovered: bool, recv_ns: int) -> None:
        if env.epoch:  # exclusive topic: never a message of an older epoch after a newer one
            if env.epoch < self.epoch:
                self.stats.fenced += 1
                return
            self.epoch = env.epoch
        elif self._leader is not None and self._leader != st.entry.id:
            return  # exclusive topic without elections: only the strongest publisher is delivered
        msg = Message(env.topic, env.payload, env.publisher, env.seq, env.sent_ns, recv_ns, recovered,
                      first_owed=st.window.first_owed if not self.reliable else st.first_owed, epoch=env.epoch)
        if env.seq <= st.handed_before:
            msg.redelivered = True
            self.stats.redelivered += 1
        self.stats.received += 1
        self.stats.recovered += recovered
        self.stats.latency.add(msg.latency_ms)
        self.deliveries.append(msg)

    def _give_up(self, st: Stream, hi: int, reason: str, now_ns: int) -> None:
        """Dead-letter what is missing from `st.expected` to `hi`, delivering what is held between in
        its turn (it came live while the repair was asked)."""
        for seq in sorted(s for s in st.buffer if s <= hi):
            if seq > st.expected:
                self._dead_letter(st, st.expected, seq - 1, reason, now_ns)
            self._drain(st, now_ns)
        if st.expected <= hi:
            self._dead_letter(st, st.expected, hi, reason, now_ns)

    def _dead_letter(self, st: Stream, lo: int, hi: int, reason: str, now_ns: int) -> None:
        if hi < lo:
            return
        self.stats.dead_lettered += hi - lo + 1
        st.expected = max(st.expected, hi + 1)
        letter = DeadLetter(self.topic, st.id, self.subscriber, lo, hi, reason, now_ns / 1e9)
        log.warning("dead letter: %s", letter)
        self.dead.append(letter)

    # -- figures -----------------------------------------------------------------------------------------
    @property
    def lost(self) -> int:
        """Messages known to be missing: best effort, gaps in what arrived; reliable, dead letters."""
        if self.reliable:
            return self.stats.dead_lettered
        streams = (*self.streams.values(), *self.departed.values())
        return self.stats.lost_before + sum(st.window.missing() for st in streams)

    def summary(self) -> dict:
        return self.stats.summary(self.topic, self.lost)


def _repairable(entry: PublisherEntry) -> bool:
    """The publisher keeps messages to repair a gap from: an offered history, or an archive at the owner."""
    return entry.history > 0 or entry.archive


def _uint(value: object, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default

