"""When a publisher's messages go out one per frame, and when several share one (a run).

A message published within COALESCE_GAP_NS of its topic's previous one waits, with the ones after
it, to go out in one frame (`pubsub.envelope.encode_run`) of at most COALESCE_MAX messages or
COALESCE_BYTES of payload, or once its run is COALESCE_AGE_NS old: sent by the next publish, or by
the io loop when the publisher has paused (the io loop looks every millisecond while a run waits,
and is woken when one starts). A message published after a pause goes out at once, so a paced
publisher's latency is unchanged, and a flood costs one send and one decode per run rather than
per message: the per-message cost that bounded throughput on both sides.

A topic still registering sends its messages to the subscribers already listening (`early`), in runs
as above (one by one while a pattern follows the topic, whose frames go their own way), and once
registered, again only to those that came since.

A direct topic's frame goes out once more for each pattern subscribed at the socket that matches the
topic (`pubsub.envelope.wrap_for_pattern`): the patterns come from the subscribers' filters
(pubsub/filters.py), matched once per topic and again only when a pattern comes or goes. A pattern's
frames that follow one another within COALESCE_GAP_NS (of any topics) go together in a bundle, cut and
sent as a run is.

Everything here runs under the publishing side's lock, except `paused`, the io loop's unlocked look.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgpack

from pubsub.envelope import Envelope, encode_run, wrap_bundle, wrap_for_pattern
from pubsub.filters import Filters
from pubsub.publication import Publication

COALESCE_GAP_NS = 100_000
COALESCE_AGE_NS = 500_000
COALESCE_MAX = 64
COALESCE_BYTES = 4 * 1024
DRAIN_GAP_NS = 1_000_000  # a registering topic's message reads the filters that came at most this often
STEADY_DRAIN_GAP_NS = 10_000_000  # and a frame only patterns take (a paced stream's every frame, at 1 ms)
MAX_TIMED_HEADS = 4096  # patterns whose last frame's time is kept (past it the times start again)


class PatternBundle:
    """Frames waiting to go to one pattern's subscribers in one pattern frame (`wrap_bundle`)."""

    __slots__ = ("sock", "frames", "size", "since_ns")

    def __init__(self, sock: object, now: int) -> None:
        self.sock = sock
        self.frames: list[bytes] = []
        self.size = 0
        self.since_ns = now


class Coalescer:
    def __init__(self, socket_of: Callable[[Publication], object], packer: msgpack.Packer,
                 filters: Filters | None = None) -> None:
        self._socket_of = socket_of  # the socket a publication's frames go out on (None: closing)
        self._packer = packer
        self.filters = filters  # the direct socket's, for its pattern subscribers
        self.drain: Callable[[], None] = lambda: None  # reads the filters that arrived (under the lock)
        self._drained_ns = 0
        self.waiting: dict[str, Publication] = {}  # publications with a run that has not filled
        self.bundles: dict[bytes, PatternBundle] = {}  # pattern frames that have not filled, by pattern
        self._head_last: dict[bytes, int] = {}  # when each pattern's last frame came (publish time, ns)
        self.wake: Callable[[], None] = lambda: None  # the io loop's, to send a run when the publisher stops
        self.watched = False  # the io loop looks at `waiting` every millisecond: no need to wake it

    def send(self, pub: Publication, env: Envelope, now: int) -> None:
        """Send `env` now, or add it to its publication's run."""
        pending, since = pub.pending, now - pub.last_published_ns
        pub.last_published_ns = now
        if not pending and since >= COALESCE_GAP_NS:
            sock = self._socket_of(pub)
            if sock is not None:
                frame = env.encode(self._packer)
                if self.filters is not None and self.filters.patterns:
                    self._out(pub, frame, sock)
                else:
                    sock.send(frame)  # type: ignore[attr-defined]
            return
        if env.epoch and pending and pending[0].epoch != env.epoch:  # a run carries one epoch
            self.send_run(pub)
            pending = pub.pending
        pending.append(env)
        pub.pending_bytes += len(env.payload)
        if (len(pending) >= COALESCE_MAX or pub.pending_bytes >= COALESCE_BYTES
                or now - pending[0].sent_ns >= COALESCE_AGE_NS):
            self.send_run(pub)
        elif len(pending) == 1:
            self.waiting[pub.topic] = pub
            if not self.watched:
                self.wake()

    def send_run(self, pub: Publication) -> None:
        """Send what `pub` has waiting, now."""
        run, pub.pending, pub.pending_bytes = pub.pending, [], 0
        self.waiting.pop(pub.topic, None)
        sock = self._socket_of(pub)
        if run and sock is not None:
            frame = encode_run(run, self._packer)
            if self.filters is not None and self.filters.patterns:
                self._out(pub, frame, sock)
            else:
                sock.send(frame)  # type: ignore[attr-defined]

    def _out(self, pub: Publication, frame: bytes, sock: object) -> None:
        """`frame` to the topic's exact subscribers, when its socket holds one's filter (a topic only
        patterns follow costs one send, not two), and to each matching pattern. The filters that came
        are read first, unless they were within STEADY_DRAIN_GAP_NS, so a subscriber whose filter came is
        skipped for want of a look for that long at most."""
        filters = self.filters
        if pub.mode != "direct" or filters.held("direct", pub.filter):  # type: ignore[union-attr]
            sock.send(frame)  # type: ignore[attr-defined]
        elif self._drain_due(STEADY_DRAIN_GAP_NS) and filters.held("direct", pub.filter):  # type: ignore[union-attr]
            sock.send(frame)  # type: ignore[attr-defined]  # (a subscriber's subscribe() waits for a probe,
            # which reads the filters first: one skipped between two reads is not owed the message)
        self.to_patterns(pub, frame, sock)

    def _drain_due(self, gap_ns: int = DRAIN_GAP_NS) -> bool:
        """Read the filters that came, unless they were read within `gap_ns`; True if they were read now."""
        now = time.monotonic_ns()
        if now - self._drained_ns < gap_ns:
            return False
        self._drained_ns = now
        self.drain()
        return True

    def early(self, pub: Publication, env: Envelope, held: list[Envelope]) -> None:
        """A message held while its topic registers (pubsub/advertising.py; `held` ends with it) goes at
        once to the subscribers already listening: the exact ones whose filters the socket holds, and the
        patterns subscribed that match it. They need no registration of the topic to take it."""
        sock = self._socket_of(pub)
        filters = self.filters
        if sock is None or filters is None:
            return
        if pub.mode == "direct":
            self._drain_due()  # (a filter that came for a held topic sends what it holds: `early_exact`)
            self.early_exact(pub, held)
        if filters.patterns:
            self.to_patterns(pub, env.encode(self._packer), sock, now=env.sent_ns)
            if pub.pattern_heads:
                heads = pub.pattern_heads
                pub.early_seq = env.seq
                if not heads <= pub.early_heads:  # (the same set, shared, while nothing new matches)
                    pub.early_heads = pub.early_heads | heads if pub.early_heads else heads

    def early_exact(self, pub: Publication, held: list[Envelope]) -> None:
        """What `pub` holds and has not sent yet, to the exact subscribers whose filters the socket holds;
        everything it holds, when a filter came since the last went (its subscriber had none of them).
        A subscriber drops by seq what comes twice."""
        mark = self.filters.arrival("direct", pub.filter)  # type: ignore[union-attr]
        sock = self._socket_of(pub)
        if not mark or not held or sock is None or (held[-1].seq <= pub.early_exact_seq
                                                      and mark == pub.early_exact_mark):
            return  # (no filter held, or everything held went already to the filters held now)
        if pub.history.keeping():  # kept from now on, as the release would keep it: a subscriber that has
            for env in held[max(0, pub.history.last_seq - held[0].seq + 1):]:  # it may ask for it again (a
                pub.retain(env)  # durable one after a restart); none is kept yet when nothing would keep it
        if mark != pub.early_exact_mark:  # a filter came: everything held, in runs (what waits goes first)
            self.send_run(pub)
            self._send_runs(pub, held, sock)
        elif self.filters.patterns:  # type: ignore[union-attr]
            for env in held[max(0, pub.early_exact_seq - held[0].seq + 1):]:  # (a run would go to the
                sock.send(env.encode(self._packer))  # type: ignore[attr-defined]  # patterns too: `early`'s)
        else:  # coalesced as any message is: a flood while the topic registers goes in runs, not one by one
            for env in held[max(0, pub.early_exact_seq - held[0].seq + 1):]:
                self.send(pub, env, env.sent_ns)
        pub.early_exact_seq, pub.early_exact_mark = held[-1].seq, mark

    def _send_runs(self, pub: Publication, envs: list[Envelope], sock: object) -> None:
        """`envs` (consecutive) in frames cut as `send` cuts its runs: COALESCE_MAX messages, COALESCE_BYTES
        of payload, one epoch."""
        run: list[Envelope] = []
        size = 0
        for env in envs:
            if run and (len(run) >= COALESCE_MAX or size >= COALESCE_BYTES or env.epoch != run[0].epoch):
                sock.send(encode_run(run, self._packer))  # type: ignore[attr-defined]
                run, size = [], 0
            run.append(env)
            size += len(env.payload)
        if run:
            sock.send(encode_run(run, self._packer))  # type: ignore[attr-defined]

    def early_all(self, backlog: list[tuple[Publication, list[Envelope], frozenset]]) -> None:
        """Every message each publication of `backlog` holds, to the patterns named with it (subscribed
        since they were held), in bundles cut as a pattern's are (COALESCE_MAX frames, COALESCE_BYTES),
        each topic's in order: a pattern subscribed while a burst of new topics registers takes the
        burst's backlog in a send per bundle, not a send (and a receive) per message."""
        bundles: dict[bytes, PatternBundle] = {}
        for pub, held, heads in backlog:
            sock = self._socket_of(pub)
            if sock is None:
                continue
            for env in held:
                frame = env.encode(self._packer)
                for head in heads:
                    bundle = bundles.get(head)
                    if bundle is None or bundle.sock is not sock:
                        if bundle is not None:
                            self._send_frames(head, bundle)
                        bundle = bundles[head] = PatternBundle(sock, 0)
                    bundle.frames.append(frame)
                    bundle.size += len(frame)
                    if len(bundle.frames) >= COALESCE_MAX or bundle.size >= COALESCE_BYTES:
                        self._send_frames(head, bundles.pop(head))
            pub.early_seq, pub.early_heads = held[-1].seq, pub.early_heads | heads if pub.early_heads else heads
        for head, bundle in bundles.items():
            self._send_frames(head, bundle)

    def send_released(self, pub: Publication, env: Envelope, now: int) -> None:
        """A held message, released: to everyone, but the subscribers it went to early (its exact ones,
        when no filter for the topic came since; the patterns it went to)."""
        to_exact = env.seq > pub.early_exact_seq or (
            self.filters is not None and self.filters.arrival("direct", pub.filter) != pub.early_exact_mark)
        if to_exact and env.seq > pub.early_seq:
            self.send(pub, env, now)
            return
        sock = self._socket_of(pub)
        if sock is None:
            return
        self.send_run(pub)
        frame = env.encode(self._packer)
        if to_exact:
            sock.send(frame)  # type: ignore[attr-defined]
        if self.filters is not None and self.filters.patterns:
            self.to_patterns(pub, frame, sock, skip=pub.early_heads if env.seq <= pub.early_seq else frozenset(),
                             now=now)

    def match(self, pub: Publication) -> None:
        """`pub.pattern_heads`: the patterns subscribed now that match its topic."""
        filters = self.filters
        if filters is not None and pub.pattern_version != filters.version:
            pub.pattern_heads = filters.pattern_heads(pub.topic) if pub.mode == "direct" else frozenset()
            pub.pattern_version = filters.version

    def to_patterns(self, pub: Publication, frame: bytes, sock: object, skip: frozenset = frozenset(),
                    now: int | None = None, at_once: bool = False) -> None:
        """Send `frame` of `pub` to the subscribers of each pattern that matches its topic: at once after a
        pause in that pattern's frames, else with the frames of any topics that follow it closely, in
        one pattern frame (`wrap_bundle`), cut as a run is (COALESCE_MAX frames, COALESCE_BYTES, its age),
        or sent when the publisher pauses. A burst of 1000 new topics' first messages for one pattern
        cost the publisher a send each (6-20 us: libzmq matches, queues and wakes its I/O thread for
        each frame), and the subscriber a receive each. `now`: the message's publish time (default:
        `pub`'s last); `at_once`: this frame and what waits before it go now (a probe)."""
        if pub.pattern_version != self.filters.version:  # type: ignore[union-attr]
            self.match(pub)
        if not pub.pattern_heads:
            return
        now = pub.last_published_ns if now is None else now
        for head in pub.pattern_heads:
            if head not in skip:
                self._to_pattern(head, frame, sock, now, at_once)

    def _to_pattern(self, head: bytes, frame: bytes, sock: object, now: int, at_once: bool) -> None:
        timed = self._head_last
        last = timed.get(head)
        if last is None and len(timed) >= MAX_TIMED_HEADS:
            timed.clear()
        timed[head] = now
        bundle = self.bundles.get(head)
        if bundle is None:
            if at_once or last is None or now - last >= COALESCE_GAP_NS:
                sock.send(wrap_for_pattern(head, frame))  # type: ignore[attr-defined]
                return
            bundle = self.bundles[head] = PatternBundle(sock, now)
            if not self.watched:
                self.wake()
        bundle.frames.append(frame)
        bundle.size += len(frame)
        if (at_once or len(bundle.frames) >= COALESCE_MAX or bundle.size >= COALESCE_BYTES
                or now - bundle.since_ns >= COALESCE_AGE_NS):
            self._send_bundle(head)

    def _send_bundle(self, head: bytes) -> None:
        self._send_frames(head, self.bundles.pop(head))

    @staticmethod
    def _send_frames(head: bytes, bundle: PatternBundle) -> None:
        frames = bundle.frames
        bundle.sock.send(wrap_for_pattern(head, frames[0]) if len(frames) == 1  # type: ignore[attr-defined]
                         else wrap_bundle(head, frames))

    @property
    def busy(self) -> bool:
        """Whether a run or a bundle waits (the io loop then looks every millisecond)."""
        return bool(self.waiting or self.bundles)

    def send_all(self) -> None:
        for pub in list(self.waiting.values()):
            self.send_run(pub)
        for head in list(self.bundles):
            self._send_bundle(head)

    def _paused(self, now: int) -> tuple[list[Publication], list[bytes]]:
        """The waiting runs and bundles whose publisher has paused."""
        return ([pub for pub in list(self.waiting.values()) if now - pub.last_published_ns >= COALESCE_GAP_NS],
                [head for head in list(self.bundles) if now - self._head_last.get(head, 0) >= COALESCE_GAP_NS])

    def paused(self, now: int) -> bool:
        """Whether a waiting run's or bundle's publisher has paused (unlocked: the caller takes the lock and
        calls `send_paused` only then)."""
        runs, heads = self._paused(now)
        return bool(runs or heads)

    def send_paused(self, now: int) -> None:
        runs, heads = self._paused(now)
        for pub in runs:
            self.send_run(pub)
        for head in heads:
            self._send_bundle(head)
