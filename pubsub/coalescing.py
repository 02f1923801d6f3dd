"""When a publisher's messages go out one per frame, and when several share one (a run).

A message published within COALESCE_GAP_NS of its topic's previous one waits, with the ones after
it, to go out in one frame (`pubsub.envelope.encode_run`) of at most COALESCE_MAX messages or
COALESCE_BYTES of payload, or once its run is COALESCE_AGE_NS old: sent by the next publish, or by
the io loop when the publisher has paused (the io loop looks every millisecond while a run waits,
and is woken when one starts). A message published after a pause goes out at once, so a paced
publisher's latency is unchanged, and a flood costs one send and one decode per run rather than
per message: the per-message cost that bounded throughput on both sides.

Everything here runs under the publishing side's lock, except `paused`, the io loop's unlocked look.
"""

from __future__ import annotations

from collections.abc import Callable

import msgpack

from pubsub.envelope import Envelope, encode_run
from pubsub.publication import Publication

COALESCE_GAP_NS = 100_000
COALESCE_AGE_NS = 500_000
COALESCE_MAX = 64
COALESCE_BYTES = 4 * 1024


class Coalescer:
    def __init__(self, socket_of: Callable[[Publication], object], packer: msgpack.Packer) -> None:
        self._socket_of = socket_of  # the socket a publication's frames go out on (None: closing)
        self._packer = packer
        self.waiting: dict[str, Publication] = {}  # publications with a run that has not filled
        self.wake: Callable[[], None] = lambda: None  # the io loop's, to send a run when the publisher stops
        self.watched = False  # the io loop looks at `waiting` every millisecond: no need to wake it

    def send(self, pub: Publication, env: Envelope, now: int) -> None:
        """Send `env` now, or add it to its publication's run."""
        pending, since = pub.pending, now - pub.last_published_ns
        pub.last_published_ns = now
        if not pending and since >= COALESCE_GAP_NS:
            sock = self._socket_of(pub)
            if sock is not None:
                sock.send(env.encode(self._packer))  # type: ignore[attr-defined]
            return
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
            sock.send(encode_run(run, self._packer))  # type: ignore[attr-defined]

    def send_all(self) -> None:
        for pub in list(self.waiting.values()):
            self.send_run(pub)

    def paused(self, now: int) -> list[Publication]:
        """The waiting publications whose publisher has paused (unlocked: the caller takes the lock and
        calls `send_paused` only when there are some)."""
        return [pub for pub in list(self.waiting.values()) if now - pub.last_published_ns >= COALESCE_GAP_NS]

    def send_paused(self, now: int) -> None:
        for pub in self.paused(now):
            self.send_run(pub)
