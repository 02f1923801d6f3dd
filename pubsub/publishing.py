"""A client's publishing side: two PUB sockets (XPUB) for all of its topics, and their publications.

- `direct`: bound on the client's host; subscribers of direct-mode topics connect their SUB to it.
- `relay`: connects to the relay (an XSUB) of each relay-mode topic's owner node, which forwards
  to that topic's subscribers (pubsub/relay.py). A socket is either a CURVE server or a client, and
  this one always connects, so relay-mode topics have a socket of their own.
Both sockets, and every publication's state, are used under one lock: the application's threads
publish, the io loop sends probes and serves history, the registrar moves relay connections.
ZeroMQ sockets may pass between threads with a full memory barrier, which the lock provides.

Both are XPUB sockets with XPUB_VERBOSER, so every subscriber's filter comes up to us (counted by
pubsub/filters.py): `in_place(topic)` is how many subscribers' filters for a topic the socket holds
now. `advertise` waits (up to a lease) until it covers the subscribers the topic's owner knows of,
so that a publisher starting after its subscribers does not lose its first messages to them.

Long because every way a frame leaves the two sockets (publish, release of a registering topic's
messages, the journal, probes, history) and every filter that arrives share their one lock; what is
pure is already elsewhere (pubsub/coalescing.py, filters.py, publication.py, groups.py).
"""

from __future__ import annotations

import logging
import threading
import time

import msgpack
import zmq

from dht import wire
from dht.gate import Denials, Gate
from dht.policy import PolicyFile, refusal
from dht.sockets import bind_port, rebind_port
from dht.transport import SocketSetup
from pubsub.coalescing import Coalescer
from pubsub.dedup import DedupBounds, DedupWindow
from pubsub.durable import DataDir
from pubsub.envelope import DEFAULT_PRIORITY, MAX_TOPIC_CHARS, Envelope, topic_filter
from pubsub.filters import Filters
from pubsub.groups import PublisherGroups
from pubsub.journal import Journal
from pubsub.links import Connections, Pointers
from pubsub.publication import Publication

log = logging.getLogger(__name__)

SNDHWM = 10_000  # frames per subscriber: with the subscriber's own 1000, a slow one is at most ~11,000
# frames behind before it loses (and counts) messages, rather than being buried in latency


def check_topic(topic: str) -> str:
    if not isinstance(topic, str) or not 0 < len(topic) <= MAX_TOPIC_CHARS or "\x00" in topic:
        raise ValueError(f"a topic is 1..{MAX_TOPIC_CHARS} characters of text without NUL, got {topic!r}")
    return topic


PUBLISH_MANY_CHUNK = 1000  # messages publish_many sends under the lock at a time


class PublishingSide:
    def __init__(self, context: zmq.Context, host: str, client_id: str, setup: SocketSetup | None,
                 data: DataDir | None = None, advertise: str | None = None, port: int = 0,
                 policy: PolicyFile | None = None) -> None:
        self.context, self.host, self.client_id, self.setup = context, host, client_id, setup
        self.policy = policy  # who may read what (dht/policy.py): the direct socket then lets through only that
        self.denials = Denials(f"publisher {client_id}")
        self._gate: Gate | None = None
        self._said_error: str | None = None
        self._policy_version = policy.version if policy is not None else 0
        self.advertise = advertise or host
        self.port = port  # the PUB socket's (0: a free one)
        self.data = data
        self.dedup_bounds = DedupBounds()  # each publication's window of msg ids (the Client's `dedup`)
        self.journal: Journal | None = None  # with a data directory, once something is published
        self.lock = threading.Lock()
        self.publications: dict[str, Publication] = {}
        self.direct: zmq.Socket | None = None
        self.endpoint: str | None = None  # where `direct` listens
        self.relay: zmq.Socket | None = None
        self._relays = Pointers(Connections(lambda: self.relay))  # relay-mode topic -> its owner's relay
        self._probe_token = 0
        self._packer = msgpack.Packer(use_bin_type=True)  # reused under the lock: a third of packb's cost
        self.groups = PublisherGroups(client_id, data, self.publications, self._send_direct)
        self._filters = Filters(self.groups.filter)  # the subscribers' filters our sockets hold
        self.held: dict[str, list[Envelope]] = {}  # topics still registering: their messages, in order
        self._patterns_seen = 0  # the filters' version when held messages last went to their patterns
        self.runs = Coalescer(lambda pub: self.direct if pub.mode == "direct" else self.relay, self._packer,
                              self._filters if policy is None else None)  # (a gate never lets a pattern through)
        self.runs.drain = self.drain_filters

    def _send_direct(self, frame: bytes) -> None:
        if self.direct is not None:
            self.direct.send(frame)

    def _decide(self, principal: str | None, topic: str) -> tuple[bool, str]:
        d = self.policy.policy.decide(principal, "subscribe", topic)  # type: ignore[union-attr]
        return d.allowed, d.rule

    def refusal(self, principal: str | None, topic: str, what: str) -> str | None:
        """Why `principal` may not have `what` of `topic` here (None: it may; always without a policy).
        A refusal is logged once a minute per (principal, topic) and counted."""
        if self.policy is None:
            return None
        allowed, rule = self._decide(principal, topic)
        if allowed:
            return None
        self.denials(principal, topic, what, rule)
        return refusal(principal, "subscribe", topic, rule)

    def _bind_direct(self) -> None:
        """The direct PUB socket, bound (again, on the same port, after a policy change: every peer then
        reconnects and subscribes again under the new policy)."""
        self.direct = self._pub_socket(server=True)
        self.port = (rebind_port if self.port else bind_port)(self.direct, self.host, self.port)
        self.endpoint = f"{self.advertise}:{self.port}"
        if self.policy is not None:
            self._gate = Gate(self.direct, self._decide, self.denials)

    def policy_changed(self) -> None:
        """The policy file changed: what each peer may read is decided again, from scratch (the caller
        holds the lock). Members of consumer groups are disconnected until they are back."""
        if self.direct is None:
            return
        self.direct.close(linger=0)
        for topic, _group, g in self.groups.items():
            for member in list(g.members):
                self.groups.filter_lost(topic, _group, member)
        self.groups.filters.clear()
        self._filters.forget("direct")
        self._bind_direct()

    def _pub_socket(self, server: bool) -> zmq.Socket:
        sock = self.context.socket(zmq.XPUB)
        sock.setsockopt(zmq.XPUB_VERBOSER, 1)
        sock.setsockopt(zmq.SNDHWM, SNDHWM)
        # only subscribers' filters come in, and one subscriber may send thousands at once (its SUB
        # sends every topic it follows to every publisher it is connected to): past a high-water
        # mark, libzmq would drop them silently
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, wire.MAX_MESSAGE_BYTES)  # subscriptions come in on it too
        sock.setsockopt(zmq.LINGER, 2000)  # flush what is queued when we close
        if self.setup is not None:
            self.setup(sock, server)
        return sock

    def add(self, pub: Publication) -> None:
        """Make `pub` known (its sockets ready); the caller registers it with the topic's owner."""
        with self.lock:
            if self.direct is None:
                self._bind_direct()
            if pub.mode == "relay" and self.relay is None:
                self.relay = self._pub_socket(server=False)
            self.publications[pub.topic] = pub  # (groups.restore looks it up)
            if self.data is not None:
                pub.restore(*self.data.publication(pub.topic), dedup=self.dedup_bounds)
                self.groups.restore(pub)  # (before trimming: a durable group holds what it still owes)
                pub.history.trim(time.time_ns())
                if self.journal is None:
                    self.journal = Journal(self.data, self._send_journaled, self.dedup_bounds.seconds)

    def publish(self, topic: str, payload: bytes, key: str | None = None,
                priority: int = DEFAULT_PRIORITY) -> Envelope | None:
        """Stamp and send one message (the publication must exist) to the plain subscribers and to one
        member of each consumer group; with a data directory, queue it for the journal, which sends it
        once it is written. None: an exclusive topic this publisher does not lead (nothing sent)."""
        if self.journal is not None:
            self.journal.wait_for_room()
        with self.lock:
            pub = self.publications[topic]
            if pub.fence is not None and not pub.leads():
                return None
            now = time.time_ns()
            if self.held or pub.journaled:  # (a topic registering, or a journal: `_publish` sees to both)
                return self._publish(pub, payload, key, priority, now)
            env = pub.stamp(payload, now, key, priority)  # the plain path, one call less a message
            self.runs.send(pub, env, now)
            if self.groups.groups:
                self.groups.offer(env)
            return env

    def publish_once(self, topic: str, payload: bytes, msg_id: str, key: str | None = None,
                     priority: int = DEFAULT_PRIORITY) -> tuple[int, bool]:
        """`publish` a message with an id (pubsub/dedup.py): (its seq, False); or, when a message with
        that id was sent within the dedup window, (that one's seq, True), and nothing is sent."""
        if self.journal is not None:
            self.journal.wait_for_room()
        with self.lock:
            pub = self.publications[topic]
            if pub.fence is not None and not pub.leads():
                return 0, False
            if pub.dedup is None:
                pub.dedup = DedupWindow(self.dedup_bounds)
            now = time.time_ns()
            seq = pub.dedup.seen(msg_id, now)
            if seq is not None:
                return seq, True
            env = self._publish(pub, payload, key, priority, now, msg_id)
            pub.dedup.add(msg_id, env.seq, now)
            return env.seq, False

    def _publish(self, pub: Publication, payload: bytes, key: str | None, priority: int, now: int,
                 msg_id: str | None = None) -> Envelope:
        if self.held and (waiting := self.held.get(pub.topic)) is not None:
            # sent (and kept in the history: a subscriber asking for its head must not count it as
            # sent before it joined) once the topic is registered (pubsub/advertising.py)
            env = pub.stamp(payload, now, key, priority, keep=False)
            env.msg_id = msg_id
            waiting.append(env)
            if self.runs.filters is not None:
                self.runs.early(pub, env, waiting)
            return env
        env = pub.stamp(payload, now, key, priority)
        if pub.journaled:
            env.msg_id = msg_id
            self.journal.put(pub, env, self._send_written)  # type: ignore[union-attr]
            return env
        self.runs.send(pub, env, now)
        if self.groups.groups:
            self.groups.offer(env)
        return env

    def hold(self, topic: str) -> None:
        """Keep `topic`'s messages back until `release` (its registration is under way)."""
        with self.lock:
            self.held.setdefault(topic, [])

    def holding(self, topic: str, limit: int) -> bool:
        """Whether `topic`'s messages are kept back, with room for one more."""
        waiting = self.held.get(topic)
        return waiting is not None and len(waiting) < limit

    def release(self, topic: str) -> None:
        """Send what `topic` kept back, in order, and its messages from now on."""
        with self.lock:
            waiting = self.held.pop(topic, [])
            pub = self.publications.get(topic)
            if pub is None:
                return
            for env in waiting:
                if env.seq > pub.history.last_seq:  # (one sent early was kept then: pubsub/coalescing.py)
                    pub.retain(env)
                self.runs.send_released(pub, env, time.time_ns())
                if self.groups.groups:
                    self.groups.offer(env)
            self.runs.send_run(pub)

    def hold_late(self, topic: str, seconds: float) -> None:
        """Keep `topic`'s messages `seconds` from now for subscribers its owner named that have not
        connected yet (pubsub/history.py's late hold): they fetch them from seq 1 when they come."""
        with self.lock:
            pub = self.publications.get(topic)
            if pub is not None:
                pub.history.hold_late(time.time_ns() + int(seconds * 1e9))

    def drop_held(self, topic: str) -> list[Envelope]:
        """What `topic` kept back, taken away (its registration failed)."""
        with self.lock:
            return self.held.pop(topic, [])

    def send_paused(self, now: int) -> None:
        """Send the runs whose publisher has paused (the io loop, every millisecond while runs wait);
        a publisher that goes on sends its own when they fill or age (pubsub/coalescing.py)."""
        if self.runs.paused(now):
            with self.lock:
                self.runs.send_paused(now)

    def flush(self) -> None:
        """Send every run still waiting, now (`Client.flush`)."""
        with self.lock:
            self.runs.send_all()

    def publish_many(self, topic: str, payloads: list[bytes], key: str | None = None,
                     priority: int = DEFAULT_PRIORITY) -> int:
        """`publish` for each payload in order, taking the lock once per PUBLISH_MANY_CHUNK of them
        (the journal's thread and the io loop get their turn between); returns the last seq."""
        last = 0
        for start in range(0, len(payloads), PUBLISH_MANY_CHUNK):
            if self.journal is not None:
                self.journal.wait_for_room()
            with self.lock:
                pub = self.publications[topic]
                if pub.fence is not None and not pub.leads():
                    pub.standby += len(payloads[start:start + PUBLISH_MANY_CHUNK]) - 1
                    continue
                now, stamp = time.time_ns, pub.stamp
                if pub.journaled:
                    put = self.journal.put  # type: ignore[union-attr]
                    for payload in payloads[start:start + PUBLISH_MANY_CHUNK]:
                        put(pub, stamp(payload, now(), key, priority))
                    last = pub.seq
                    continue
                send, offer = self.runs.send, self.groups.offer if self.groups.groups else None
                for payload in payloads[start:start + PUBLISH_MANY_CHUNK]:
                    t = now()
                    env = stamp(payload, t, key, priority)
                    send(pub, env, t)
                    if offer is not None:
                        offer(env)
                self.runs.send_run(pub)  # the caller handed us all it had: nothing waits for more
                last = pub.seq
        return last

    def _send_journaled(self, batch: list[tuple[Publication, Envelope]]) -> dict[str, int]:
        """The journal wrote `batch`: send it (in runs: it came at once) and retain it; returns where
        retention now starts, for the topics where that moved."""
        with self.lock:
            return self._send_written(batch)

    def _send_written(self, batch: list[tuple[Publication, Envelope]]) -> dict[str, int]:
        """`_send_journaled` with the lock held (a lone message, written by its publishing thread)."""
        moved: dict[str, int] = {}
        sent: dict[str, Publication] = {}
        now = time.time_ns()
        for pub, env in batch:
            sock = self.direct if pub.mode == "direct" else self.relay
            if sock is None:
                continue  # closing
            self.runs.send(pub, env, now)
            sent[pub.topic] = pub
            first = pub.history.first_seq
            pub.retain(env)
            if self.groups.groups:
                self.groups.offer(env)
            if pub.history.first_seq != first:
                moved[pub.topic] = pub.history.first_seq
        for pub in sent.values():
            self.runs.send_run(pub)  # nothing more of this batch is coming
        return moved

    def ack(self, items: list[tuple[str, str, int]]) -> int:
        """Durable subscribers' committed positions; returns how many name a topic we publish."""
        now = time.time_ns()
        held, news = 0, {}
        with self.lock:
            for topic, subscriber, position in items:
                pub = self.publications.get(topic)
                if pub is None:
                    continue
                held += 1
                if pub.history.ack(subscriber, position):
                    news.setdefault(topic, {})[subscriber] = position
                    first = pub.history.first_seq
                    if pub.history.trim(now) != first and pub.journaled:
                        self.journal.trimmed(topic, pub.history.first_seq)  # type: ignore[union-attr]
        if self.data is not None:
            for topic, acks in news.items():
                self.data.save_acks(topic, acks)
        return held

    def trim(self) -> None:
        """Retention by time, when nothing is published to trigger it (the io loop, every heartbeat)."""
        now = time.time_ns()
        with self.lock:
            for pub in self.publications.values():
                first = pub.history.first_seq
                if pub.history.trim(now) != first and pub.journaled:
                    self.journal.trimmed(pub.topic, pub.history.first_seq)  # type: ignore[union-attr]

    def probe(self, topics: list[str]) -> int:
        """Send one probe on each topic (a subscriber waits for it to know its filter is in place)."""
        with self.lock:
            # what the asker subscribed (under a policy: applied here first; its pattern: matched from
            # now on) is known before the probe goes, so whatever follows the probe reaches it too
            self.drain_filters()
            self.runs.send_all()  # what was published before the probe goes out before it
            self._probe_token += 1
            for topic in topics:
                pub = self.publications.get(topic)
                if pub is None:
                    continue
                sock = self.direct if pub.mode == "direct" else self.relay
                frame = Envelope.probe(topic, self.client_id, self._probe_token, time.time_ns()).encode(self._packer)
                sock.send(frame)  # type: ignore[union-attr]
                if self.runs.filters is not None and self.runs.filters.patterns:
                    self.runs.to_patterns(pub, frame, sock, at_once=True)
            return self._probe_token

    def look_at_filters(self) -> None:
        """`drain_filters`, taking the lock (the advertiser, between its looks)."""
        with self.lock:
            self.drain_filters()

    def drain_filters(self) -> None:
        """Read the filters subscribers sent up (the caller holds the lock). Called by `in_place`, and by
        the io loop every heartbeat so that they never pile up."""
        if self._gate is not None and self.direct is not None:
            self._gate.take(lambda msg, on: self._filters.seen("direct", msg[1:], on))
        for name, sock in (("direct", self.direct), ("relay", self.relay)):
            if sock is None or (name == "direct" and self._gate is not None):
                continue
            while True:
                try:
                    self._filters.message(name, sock.recv(zmq.NOBLOCK))
                except zmq.Again:
                    break
        if self.held and self._filters.version != self._patterns_seen and self.runs.filters is not None:
            self._held_to_new_patterns()
        if self._filters.fresh:
            fresh, self._filters.fresh = self._filters.fresh, []
            if self.held and self.runs.filters is not None and self.direct is not None:
                self._held_to_exact(set(fresh))

    def _held_to_exact(self, fresh: set[bytes]) -> None:
        """Exact subscribers' filters came for topics still registering (the caller holds the lock): what
        those hold goes to them now, as their next ones will (`Coalescer.early`)."""
        for topic, waiting in self.held.items():
            pub = self.publications.get(topic)
            if waiting and pub is not None and pub.mode == "direct" and pub.filter in fresh:
                self.runs.early_exact(pub, waiting)

    def _held_to_new_patterns(self) -> None:
        """A pattern subscribed since the topics still registering held their messages (the caller holds
        the lock): what they hold goes to it now, as their next ones will (`Coalescer.early`)."""
        self._patterns_seen = self._filters.version
        backlog = []
        for topic, waiting in self.held.items():
            pub = self.publications.get(topic)
            if not waiting or pub is None or pub.mode != "direct" or self.direct is None:
                continue
            self.runs.match(pub)
            new = pub.pattern_heads - pub.early_heads if pub.early_heads else pub.pattern_heads
            if new:
                backlog.append((pub, waiting, new))
        if backlog:
            self.runs.early_all(backlog)

    def check_policy(self) -> None:
        """Read the policy file again if it changed (or a SIGHUP reloaded it): a changed policy is
        applied to every peer at once."""
        if self.policy is None:
            return
        self.policy.check()
        if self.policy.error and self.policy.error != self._said_error:
            log.error("%s (the policy in force is kept)", self.policy.error)
        self._said_error = self.policy.error
        if self.policy.version == self._policy_version:
            return
        self._policy_version = self.policy.version
        log.warning("%s changed: what each peer may read is decided again", self.policy.path)
        with self.lock:
            self.policy_changed()

    def tick_groups(self) -> list:
        """The io loop's frequent look at the consumer groups (members' connections, ack waits,
        leases, retention); returns the dead letters to hand on (outside the lock)."""
        with self.lock:
            self.drain_filters()
            self.groups.tick()
            dead, self.groups.dead = self.groups.dead, []
        return dead

    def in_place(self, topic: str) -> int:
        """Subscribers whose filter for exactly `topic` our socket for it holds (a relay counts once)."""
        return self.in_place_many([topic])[topic]

    def in_place_many(self, topics: list[str]) -> dict[str, int]:
        """`in_place` of each of `topics`, under one hold of the lock and one read of the filters."""
        return self.in_place_since(topics, [], -1)[0]

    def in_place_since(self, fresh: list[str], known: list[str], since: int) -> tuple[dict[str, int], int]:
        """`in_place` of each of `fresh`, and of `known` too unless no filter came or went since the
        filters' `changes` were `since` (their counts then stand: a thousand topics waiting for a
        pattern's filter were counted again at every look, the advertiser's whole cost in a flood of
        new topics). Returns the counts and the filters' `changes` now."""
        with self.lock:
            self.drain_filters()
            changes = self._filters.changes
            out = {}
            for topic in (fresh if changes == since else [*fresh, *known]):
                pub = self.publications.get(topic)
                relay = pub is not None and pub.mode == "relay"
                out[topic] = self._filters.held("relay" if relay else "direct",
                                                pub.filter if pub is not None else topic_filter(topic),
                                                topic if self._gate is None else None)
            return out, changes

    def next_probe_token(self) -> int:
        """The token the next probe will carry: what a subscriber asking now must wait for."""
        with self.lock:
            return self._probe_token + 1

    def serve(self, topic: str, op: str, count: int = 0, lo: int = 1, hi: int | None = None) -> dict | None:
        """History for a subscriber (None if we do not publish `topic`)."""
        with self.lock:
            pub = self.publications.get(topic)
            if pub is not None and pub.pending:
                self.runs.send_run(pub)  # what the reply names as sent has been
            return None if pub is None else pub.serve(op, count, lo, hi)

    def follow_relay(self, topic: str, endpoint: str | None) -> None:
        """Connect the relay socket to `endpoint`, the relay of `topic`'s owner (None: leave it)."""
        with self.lock:
            self._relays.point(topic, endpoint)

    def remove(self, topic: str) -> Publication | None:
        with self.lock:
            pub = self.publications.get(topic)
            if pub is not None:
                self.runs.send_run(pub)
        self.follow_relay(topic, None)
        with self.lock:
            return self.publications.pop(topic, None)

    def close(self) -> None:
        if self.journal is not None:
            self.journal.stop()
        with self.lock:
            self.runs.send_all()
            for sock in (self.direct, self.relay):
                if sock is not None:
                    sock.close()
            self.direct = self.relay = None
