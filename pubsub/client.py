"""`chordpub.Client`: one per application process, for every topic it publishes and follows.

The shape is nats.py's and paho-mqtt's (one connection object multiplexing every subscription) with
the FEUP reliable pub/sub API's pull `get()`::

    with Client(via="127.0.0.1:5555") as c:
        c.publish("news", "hello")                      # advertises "news" on first use
        sub = c.subscribe("news", history=10)           # returns once the publishers have our filter
        msg = sub.get(timeout=1.0)                      # or: for msg in sub: ...
        c.subscribe("alerts", callback=lambda m: print(m.topic, m.text))
        sub.unsubscribe()

Inside, whatever the number of topics: one ZeroMQ context, two PUB sockets (direct, and one that
connects to relays), two SUB sockets (direct, relay), one service ROUTER (history, repair and probes
for our publications), one RPC socket per thread, and one SUB on the ring's events sockets. Two
threads: the io loop (pubsub/io_loop.py: receives, serves, and runs callbacks; never waits on a
peer) and the registrar (pubsub/registrar.py: the ring, one request per owner node per heartbeat);
a third runs callbacks instead when `callback_thread=True` (pubsub/delivery.py). `publish()` runs
on the caller's thread.

Long because it is the documented Python API: a third of it is the docstrings users read
(`help(Client)`); what each call does is in the modules it hands to (publisher, exact_client,
pattern_client, group_client, registrar, io_loop).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

import zmq

from dht import wire
from dht.address import resolve
from dht.client import DhtError, contact
from dht.rpc_server import RpcServer
from dht.subjects import check_subscribable, is_pattern
from dht.transport import Reply
from pubsub.consensus_face import ConsensusFace
from pubsub.dedup import DEDUP_SECONDS, DedupBounds
from pubsub.delivery import PENDING_LIMIT, Dispatcher, Subscription
from pubsub.directory import (
    member_value,
    topic_info,
)
from pubsub.dispatch import (
    DEFAULT_ACK_WAIT,
    DEFAULT_MAX_DELIVER,
    DEFAULT_PREFETCH,
)
from pubsub.durable import DataDir, check_name
from pubsub.envelope import DEFAULT_PRIORITY
from pubsub.exact_client import await_subscribed, subscribe_exact, subscribe_many, unsubscribe_exact
from pubsub.group_client import group_terms, join_group, settle_groups
from pubsub.io_loop import RCVHWM, IoLoop
from pubsub.message import DeadLetter, Message
from pubsub.pattern_client import join_pattern_group, subscribe_pattern, unsubscribe_pattern
from pubsub.patterns import PatternWatches
from pubsub.positions import PatternPositions
from pubsub.publication import Publication, check_mode
from pubsub.publisher import Publisher
from pubsub.publishing import PublishingSide, check_topic
from pubsub.registrar import Registrar
from pubsub.service import SERVICE_SCHEMAS
from pubsub.subscription import HISTORY_POLICIES

log = logging.getLogger(__name__)


class Client(ConsensusFace):
    """A connection to the chordpub ring for one process: publish, subscribe, unsubscribe, close.

    `via` is any node of the ring ("host:port"); `host` the address this client listens on (its PUB
    socket and service endpoint, which publishers and subscribers on other hosts must reach); `bind`
    binds elsewhere (e.g. "0.0.0.0") and `advertise` tells others another host (dht/address.py:
    binding 0.0.0.0 advertises this machine's outward address unless `advertise` is given);
    `heartbeat` the seconds between lease renewals (a registration lives three heartbeats after its
    client dies); `curve` a keys directory from `chordpub keys generate` (CurveZMQ on every socket, as
    `role`); `timeout` bounds every call that waits on the ring (the constructor's first contact
    included); `trace` appends every delivery of a plain subscription to a JSON Lines file in the trace schema;
    `on_dead_letter` is told of messages a reliable subscription will never get; callbacks run on the
    client's io thread (keep them short: while one runs, nothing else of this client is delivered or
    served), or on a thread of their own with `callback_thread=True`; `context` lets
    several clients in one process share a ZeroMQ context (and its I/O thread) instead of having one
    each; the client then closes its own sockets but leaves the context to its owner; `name` is the
    client's id on every topic (default: its service endpoint; unique among live clients);
    `data_dir` keeps what must outlive the process (pubsub/durable.py): its name, the sequence
    numbers and retained messages of what it publishes (written before they are sent), its durable
    subscriptions' positions, and its dead-letter queue. A data directory belongs to one client: a
    different `name` is refused. `connect_timeout` (default: `timeout`) bounds the constructor's
    first contact with `via`: a DhtError saying so when it does not answer. `metrics_port` serves
    Prometheus metrics (pubsub/metrics.py) on http://host:port/metrics (0: a free port; the endpoint
    is then `metrics_endpoint`). `acl`: a policy file (dht/policy.py; docs/security.md) that this client
    enforces as a publisher: who may read its topics (live, history, groups), by the CURVE key each peer
    presents (`curve` is needed); read again when the file changes. `receive_hwm`: frames (a message, or
    a publisher's coalesced run of at most 64 / 4 KiB) held in the SUB sockets per publisher before the
    publisher's own queue holds the rest: what a subscriber that reads slowly costs in memory
    (default 1000). `dedup_window`: the seconds a published msg_id is remembered (default 120; each
    publication keeps at most 100,000 ids, pubsub/dedup.py), with a data directory across restarts.
    """

    def __init__(self, via: str, *, host: str = "127.0.0.1", bind: str | None = None,
                 advertise: str | None = None, heartbeat: float = 1.0,
                 curve: str | Path | None = None, role: str = "client", timeout: float = 10.0,
                 trace: str | Path | None = None, trace_run: str = "live", trace_source: str = "live",
                 on_dead_letter: Callable[[DeadLetter], None] | None = None,
                 callback_thread: bool = False, context: zmq.Context | None = None,
                 name: str | None = None, data_dir: str | Path | None = None,
                 connect_timeout: float | None = None, metrics_port: int | None = None, ports: int = 0,
                 acl: str | Path | None = None, receive_hwm: int = RCVHWM,
                 dedup_window: float = DEDUP_SECONDS) -> None:
        wire.parse_endpoint(via)
        dedup = DedupBounds(seconds=dedup_window)
        if ports and not 0 < ports < 65535:
            raise ValueError("ports must be in 1..65534 (the service socket's port, and the PUB socket's after it)")
        if not 0.01 <= heartbeat <= 3600:
            raise ValueError("heartbeat must be between 0.01 and 3600 seconds")
        if name is not None:
            check_name(name)
        policy = None
        if acl is not None:
            from dht.policy import PolicyFile

            if curve is None:
                raise ValueError("a policy (acl) needs curve keys: without them no peer has a name to check")
            policy = PolicyFile(acl)
        self.data = DataDir(data_dir, name) if data_dir is not None else None
        listen = resolve(host, bind, advertise)
        self.via, self.host, self.heartbeat, self.timeout = via, listen.host, heartbeat, timeout
        self.bind = listen.bind
        self._on_dead_letter = on_dead_letter
        self._own_context = context is None
        self.context = zmq.Context() if context is None else context
        self._curve = None
        self._closed = False
        self._init_consensus()
        self._lock = threading.Lock()
        self._subscriptions: dict[str, Subscription] = {}
        self._dispatcher: Dispatcher | None = None
        self._callback_thread = callback_thread
        self._trace = None
        self._metrics = None
        self.metrics_endpoint: str | None = None
        try:
            setup = self._curve_setup(curve, role)
            service = RpcServer(listen.bind, ports, lambda _r: {}, setup=setup, context=self.context,
                                schemas=SERVICE_SCHEMAS, advertise=listen.host)
            self.id = self.data.name if self.data is not None else (name or service.endpoint)
            self.service_endpoint = service.endpoint  # history, repair, probes and acks are asked here
            self.publishing = PublishingSide(self.context, listen.bind, self.id, setup, self.data,
                                             advertise=listen.host, port=ports + 1 if ports else 0, policy=policy)
            self.publishing.dedup_bounds = dedup
            if trace is not None:
                from traces.writer import JsonlWriter

                self._trace = JsonlWriter(trace, "deliveries")
                self._trace_run, self._trace_source = trace_run, trace_source
            self.io = IoLoop(service, self.publishing, self.context, setup, heartbeat,
                             on_reread=self._reread, on_dead_letter=self._dead_letter,
                             on_archive=self._read_archive,
                             on_delivered=self._traced if self._trace is not None else None, client_id=self.id,
                             receive_hwm=receive_hwm)
            self.registrar = Registrar(via, self.context, setup, heartbeat)
            self.patterns = PatternWatches(self.id, self.registrar.register, self.registrar.unregister,
                                           self.io.together)
            self.publisher = Publisher(self.publishing, self.registrar, self.id, self.service_endpoint, via,
                                       heartbeat, timeout, self._check_open)
            self.publisher.on_dead_letter = self._dead_letter
            self.publish = self.publisher.publish  # type: ignore[method-assign]  # `publish` below, without a
            # call of its own on the per-message path (0.1 us of a 1.5 us publish; one message at a time)
            self.registrar.learn_ring(contact(self.registrar.dht.rpc, via,
                                              timeout if connect_timeout is None else connect_timeout))
            if metrics_port is not None:
                from dht.metrics import serve
                from pubsub.metrics import ClientCollector

                self._metrics = serve(ClientCollector(self), metrics_port, listen.bind)[0]
                self.metrics_endpoint = f"{listen.host}:{self._metrics.server_port}"
        except BaseException:
            self._teardown()
            raise
        self.io.start()
        self.registrar.start()

    def _consensus_setup(self):  # noqa: ANN202 - SocketSetup | None
        return None if self._curve is None else self._curve.setup

    def _curve_setup(self, curve: str | Path | None, role: str):  # noqa: ANN202 - SocketSetup | None
        if curve is None:
            return None
        from dht.curve import Curve, start_authenticator

        self._curve = Curve.load(Path(curve), role, listen=True)
        start_authenticator(self._curve, self.context)
        return self._curve.setup


    # -- publishing (pubsub/publisher.py) ---------------------------------------------------------------
    def advertise(self, topic: str, *, history: int = 0, reliable: bool = False, strength: int | None = None,
                  mode: str = "direct", retain_messages: int | None = None, retain_seconds: float | None = None,
                  retain_bytes: int | None = None, archive: bool = False, timeout: float | None = None) -> None:
        """Register as a publisher of `topic` with its owner (optional: the first `publish` on a topic
        advertises it with the defaults). `history`: messages kept for late joiners and repair (1000
        when `reliable` and not given); `strength`: the topic becomes exclusive: its publishers campaign in
        an election (the stronger takes it from the weaker within a lease) and only the one leading
        sends, every message stamped with its epoch (`publish` returns 0 for a message not sent);
        `mode`: direct (subscribers connect to us) or relay (through the
        topic owner's relay). Messages that durable subscribers have not acknowledged are retained
        beyond the history, within `retain_messages` (default 100000), `retain_seconds` (3600) and
        `retain_bytes` (64 MiB). Returns once the owner holds the registration."""
        self._check_open()
        fence = None
        if strength is not None and topic not in self.publisher.publishing.publications:
            Publication(topic, self.id, strength=strength)  # its terms checked before a campaign starts
            fence = self._exclusive(topic, strength, self.id)
        try:
            self.publisher.advertise(topic, history=history, reliable=reliable, strength=strength, mode=mode,
                                     retain_messages=retain_messages, retain_seconds=retain_seconds,
                                     retain_bytes=retain_bytes, archive=archive, timeout=timeout, fence=fence)
        finally:
            held = self.publisher.publishing.publications.get(topic)
            if fence is not None and (held is None or held.fence is not fence):
                self._drop_election(fence)

    def advertise_many(self, topics: Iterable[str], *, history: int = 0, reliable: bool = False,
                       retain_messages: int | None = None, retain_seconds: float | None = None,
                       retain_bytes: int | None = None, timeout: float | None = None) -> None:
        """`advertise` each of `topics` with the same terms (direct mode, not exclusive), their
        registrations sent together and batched per owner: returns once each is in place as `advertise`
        returns, in about the time of one (with a `data_dir`, one after another, as first publishes
        register). Raises for the first topic that failed (the others stay advertised)."""
        self.publisher.advertise_many(topics, history=history, reliable=reliable, retain_messages=retain_messages,
                                      retain_seconds=retain_seconds, retain_bytes=retain_bytes, timeout=timeout)

    def publish(self, topic: str, payload: bytes | str, *, key: str | None = None,
                priority: int = DEFAULT_PRIORITY, msg_id: str | None = None) -> int:
        """Send one message on `topic` to its subscribers (and to one member of each consumer group);
        returns its sequence number (from 1). `key`: a key-ordered group hands every message of one key
        to one member at a time, in publish order; `priority` (0..9, default 4): where a group's
        messages wait, higher goes first (lower ones keep a share). Both matter to groups only.
        `msg_id` (1..256 characters) makes the publish idempotent: a message whose id was sent within
        the client's `dedup_window` is not sent again, and the number returned is the first one's,
        with `.duplicate` True (with a `data_dir`, across a crash and restart of this publisher)."""
        return self.publisher.publish(topic, payload, key, priority, msg_id)  # (positional: the per-message path)

    def publish_many(self, topic: str, payloads: Iterable[bytes | str], *, key: str | None = None,
                     priority: int = DEFAULT_PRIORITY) -> int:
        """`publish` each payload in order, for an application that has several at hand: the same
        messages, numbered one after another, at a fraction of the cost per message. Every payload is
        checked before any is sent (a bad one raises and nothing is published); returns the last
        sequence number (0 for no payloads)."""
        return self.publisher.publish_many(topic, payloads, key=key, priority=priority)

    def flush(self) -> None:
        """Send now the messages still waiting to share a frame with the next (a publisher sending fast
        coalesces them for at most half a millisecond, or longer on a busy machine): once this returns,
        everything published before it has left for the subscribers connected now."""
        self._check_open()
        self.publisher.publishing.flush()

    # -- subscribing -------------------------------------------------------------------------------------
    def subscribe(self, topic: str, *, history: int = 0, reliable: bool = False, mode: str = "direct",
                  callback: Callable[[Message], None] | Callable[[list[Message]], None] | None = None,
                  timeout: float | None = None,
                  pending_limit: int = PENDING_LIMIT, durable: str | bool | None = None,
                  auto_commit: bool = True, history_policy: str = "at_least", group: str | None = None,
                  prefetch: int = DEFAULT_PREFETCH, ack_wait: float = DEFAULT_ACK_WAIT,
                  max_deliver: int = DEFAULT_MAX_DELIVER, ordering: str = "none",
                  auto_ack: bool = True, batch: bool = False, commit_with: Any = None) -> Subscription:  # noqa: ANN401
        """Follow `topic` from every publisher. Returns once each publisher known now has our
        subscription in place, so nothing published after this returns is missed; a publisher that
        appears later is connected as soon as the topic's owner tells us of it.

        `history`: ask each publisher for its last k messages first (recovered=True); a publisher
        offering fewer is not matched (`history_policy="at_least"`, the default: it is named in
        `Subscription.unmatched` and logged) or gives what it has (`history_policy="up_to"`);
        `reliable`: in order per publisher from its first message,
        no duplicates, gaps repaired from its history, what it no longer holds dead-lettered;
        `callback(message)`: run for each message on the client's io thread, in order (or on its
        callback thread, with `callback_thread=True`); without one, use `get()` or iterate;
        `batch=True`: the callback takes a list instead, the messages that arrived together (one
        call for a publisher's coalesced run or a repaired gap), in order; if it raises, each of
        the list is dead-lettered;
        `pending_limit`: messages waiting for the application at most; `durable`: a name under which
        the client's data directory keeps, per publisher, the position the application committed
        (implies `reliable`): a client restarted with the same data directory and name resumes
        after it, and publishers retain what it has not acknowledged (pubsub/positions.py says
        exactly when positions are committed; `auto_commit=False` leaves it to `Message.commit()`).
        `commit_with`: with `durable`, the application's sqlite3 connection (made with
        `check_same_thread=False`): each callback runs in a transaction of it (a savepoint of one for the
        messages that arrived together) that also commits the
        position (pubsub/tx_positions.py), so a crash never applies a message twice: exactly once;
        without a callback, `with sub.transaction() as conn:` commits what get() returned inside it.
        Called from a callback, it returns at once (the io thread cannot wait on itself) and the
        subscription is in place soon.

        `group`: join the consumer group of that name instead (a work queue: each message of the topic
        goes to one live member of each group, and to every plain subscriber; docs/contracts.md,
        "Consumer groups"): `prefetch` messages at most unacknowledged per publisher (its credit),
        `ack_wait` seconds before an unacknowledged message goes to another member, `max_deliver`
        deliveries before it is dead-lettered, `ordering="key"` for one member at a time per key in
        publish order, `durable=True` for a backlog that outlives every member and the publisher's
        restart (the publisher needs a data directory). A callback returning acks its message
        (raising naks it), and with get() a message is acked when the next one is asked for; with
        `auto_ack=False`, `msg.ack()` and `msg.nak()` do it. A group's callbacks run on the client's
        callback thread, so that slow work never holds the io loop (its acks and lease renewals)."""
        self._check_open()
        check_topic(topic)
        check_subscribable(topic)
        check_mode(mode)
        if batch and callback is None:
            raise ValueError("batch=True is for a callback that takes a list of messages; none was given")
        if commit_with is not None and (is_pattern(topic) or group is not None):
            raise ValueError("commit_with is for a durable subscription of an exact topic")
        if is_pattern(topic) and group is not None:
            if batch:
                raise ValueError("batch=True is for plain subscriptions; a consumer group acks message by message")
            terms = group_terms(group, mode, durable, history, reliable, prefetch, ack_wait, max_deliver, ordering)
            return join_pattern_group(self, topic, group, terms, member_value(prefetch, ordering, float(ack_wait),
                                      max_deliver, bool(durable)), callback, timeout, pending_limit, prefetch,
                                      auto_ack)
        if is_pattern(topic):
            if history_policy not in HISTORY_POLICIES:
                raise ValueError(f"history_policy must be one of {', '.join(HISTORY_POLICIES)}, not "
                                 f"{history_policy!r}")
            pattern_positions = None
            if durable is not None:
                if isinstance(durable, bool):
                    raise ValueError("durable=True/False is for consumer groups; a durable subscription is given "
                                     "a name")
                if self.data is None:
                    raise ValueError("a durable subscription needs a client with a data_dir")
                with self._lock:
                    if topic in self._subscriptions:
                        raise ValueError(f"already subscribed to {topic!r} (unsubscribe first to change the terms)")
                pattern_positions = PatternPositions(self.data, durable, topic, auto_commit)
                reliable = True
            return subscribe_pattern(self, topic, history, reliable, mode, callback, timeout, pending_limit,
                                     history_policy, batch, pattern_positions)
        if group is not None:
            if batch:
                raise ValueError("batch=True is for plain subscriptions; a consumer group acks message by message")
            return join_group(self, topic, group, mode, callback, timeout, pending_limit, durable, history,
                              reliable, prefetch, ack_wait, max_deliver, ordering, auto_ack)
        handle, ready, wait = subscribe_exact(self, topic, history, reliable, mode, callback, timeout, pending_limit,
                                              durable, auto_commit, history_policy, batch, commit_with)
        if threading.current_thread() is self.io.thread:
            return handle  # a callback subscribing: the loop cannot wait on itself; it attaches soon
        return await_subscribed(self, topic, ready, wait)

    def subscribe_many(self, topics: Iterable[str], *, timeout: float | None = None,
                       **terms: Any) -> list[Subscription]:  # noqa: ANN401 - subscribe()'s terms
        """`subscribe` each of `topics` on the same terms, in order, with their registrations placed
        together (batched per owner node, the owners' arcs learned from their replies) and awaited
        together: thousands of exact topics in a few rounds of the ring rather than one round trip
        each. Patterns and groups among them are subscribed one by one. If one fails, those already
        made are unsubscribed and the error raised."""
        return subscribe_many(self, topics, timeout, terms)

    def topic_info(self, topic: str, timeout: float | None = None) -> dict:
        """What the ring holds for `topic`, as `chordpub topic info --json` prints it: its key id, its
        owner node, its publishers (id, endpoint, strength, history, retention, archive) and how many
        subscribers are registered. Asked on the client's registration thread (its ring connection)."""
        self._check_open()
        check_topic(topic)
        answer: Future = Future()

        def ask() -> None:
            try:
                answer.set_result(topic_info(self.registrar.dht, topic))
            except Exception as exc:  # noqa: BLE001 - handed to the caller
                answer.set_exception(exc)

        self.registrar.call(ask)
        wait = self.timeout if timeout is None else timeout
        try:
            return answer.result(wait)
        except FutureTimeout:
            raise DhtError(f"no answer about topic {topic!r} via {self.via} within {wait:g}s") from None

    def unsubscribe(self, topic: str) -> None:
        """Stop following `topic`: nothing more of it is delivered once this returns, and the owner
        drops our registration at once."""
        with self._lock:
            handle = self._subscriptions.pop(topic, None)
        if handle is None:
            return
        if handle.pattern is not None:
            unsubscribe_pattern(self, handle)
        else:
            unsubscribe_exact(self, topic, handle)

    @property
    def subscriptions(self) -> dict[str, Subscription]:
        with self._lock:
            return dict(self._subscriptions)

    @property
    def publications(self) -> dict[str, Publication]:
        return dict(self.publishing.publications)

    # -- the end --------------------------------------------------------------------------------------
    def close(self) -> None:
        """Unregister every topic, stop the threads, close every socket. Idempotent. Called from a
        callback, it returns at once and the client closes on a thread of its own."""
        if self._closed:
            return
        if threading.current_thread() in (self.io.thread, getattr(self._dispatcher, "thread", None)):
            threading.Thread(target=self.close, name="chordpub-close", daemon=True).start()
            return
        self._closed = True
        self._close_consensus()
        self.publisher.advertiser.flush(self.timeout)  # first messages of new topics: sent before we go
        self.publisher.advertiser.stop()
        for handle in list(self._subscriptions.values()):
            handle.close()
        self._subscriptions.clear()
        settle_groups(self, self.timeout / 2)
        done = threading.Event()

        def unregister_all() -> None:
            # what known durable subscribers still lack goes to the ring; archived topics' new messages too
            self.registrar.archives.hand_over(list(self.publishing.publications.values()), self.publishing.lock)
            self.registrar.archives.settle(self.timeout / 2)
            self.registrar.unregister_all()
            done.set()

        if self.registrar.thread.is_alive():
            self.registrar.call(unregister_all)
            done.wait(self.timeout)
        self.registrar.stop()
        self.io.stop()
        if self._dispatcher is not None:
            self._dispatcher.stop()
        self._teardown()

    def _teardown(self) -> None:
        if self._metrics is not None:
            self._metrics.shutdown()
            self._metrics.server_close()
        publishing = getattr(self, "publishing", None)
        if publishing is not None:
            publishing.close()
        for part in ("io", "registrar"):
            obj = getattr(self, part, None)
            if obj is not None and not obj.thread.is_alive() and obj.thread.ident is None:
                obj.close_unstarted()
        if self._trace is not None:
            self._trace.close()
        if self._curve is not None and self._own_context:
            from dht.curve import stop_authenticator

            stop_authenticator(self.context)
        if self._own_context:
            self.context.destroy(linger=0)
        if self.data is not None:
            self.data.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this client is closed")

    # -- from the threads --------------------------------------------------------------------------------
    def _read_archive(self, topic: str, publisher: str, op: str, lo: int, hi: int | None,
                      then: Callable[[Reply], None]) -> None:
        """An io-loop fetch from a topic's archive, carried out by the registrar (which talks to
        owners); the answer goes back to the io loop."""
        self.registrar.call(lambda: self.registrar.archives.read(
            topic, publisher, op, lo, hi, lambda reply: self.io.call(lambda: then(reply))))

    def _reread(self, topic: str) -> None:
        self.registrar.call(lambda: self.registrar.reread(topic))

    def _dead_letter(self, letter: DeadLetter) -> None:
        if self.data is not None:
            self.data.dead_letter(letter)
        if self._on_dead_letter is not None:
            self._on_dead_letter(letter)

    def _traced(self, mode: str, messages: list[Message]) -> None:
        for m in messages:
            self._trace.write({"run": self._trace_run, "source": self._trace_source, "mode": mode,  # type: ignore[union-attr]
                               "topic": m.topic, "publisher": m.publisher, "subscriber": self.id, "seq": m.seq,
                               "sent_ns": m.sent_ns, "recv_ns": m.recv_ns, "latency_ms": m.latency_ms,
                               "recovered": m.recovered, "first_owed": m.first_owed})
