"""Subscriptions let through by a policy: the one check where the bytes flow.

A publisher's PUB socket, a node's events socket and its relay's outgoing socket send each message
to every connected peer whose subscription (a prefix) matches it: whoever holds a valid key can
connect and subscribe to anything, the empty prefix included. With a policy (dht/policy.py) such a
socket is an XPUB in manual mode (ZMQ_XPUB_MANUAL): libzmq applies no subscription by itself; each one
comes up to us with its sender's principal (the ZAP User-Id of its connection, dht/curve.py), and we
apply it, for that connection alone, only when it names exactly one topic (or one consumer-group
address, or one record's events) that the principal may subscribe. A prefix that is not exactly such
a name — the empty one first — is never applied, so no message of a topic the principal may not
read is ever sent to its connection: no byte of it, sealed or not, leaves the process.

A subscription applied stays until the connection ends; a policy that changes takes effect on the
next connection, so whoever enforces it rebinds the socket when the policy changes (every peer
reconnects at once and subscribes again, and the new policy decides).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import msgpack
import zmq

from dht.rpc_server import principal_of

log = logging.getLogger(__name__)

ENVELOPE = b"\x96\x01"  # a published message (pubsub/envelope.py): the topic follows
DISPATCH = b"\x9a\x02"  # a consumer group's message: "topic NUL group NUL member" follows
PATTERN = b"\x93\x03"  # a pattern's frames (pubsub/envelope.py): never applied under a policy, which
# judges one topic at a time (the publisher's record entry says so, and its pattern subscribers
# subscribe each topic instead)
EVENTS = b"\x92"  # a record's change (dht/records.py): "key NUL namespace" follows
DENIALS_SAID_EVERY = 60.0


def filter_topic(raw: bytes) -> str | None:
    """The one topic a subscription names, or None when it names none exactly (a prefix of several)."""
    for head in (ENVELOPE, DISPATCH, EVENTS):
        if raw.startswith(head):
            try:
                name = msgpack.unpackb(raw[len(head):], raw=False)
            except Exception:  # noqa: BLE001 - not exactly one msgpack string: no topic
                return None
            if not isinstance(name, str) or not name:
                return None
            if head == ENVELOPE:
                return name if "\x00" not in name else None
            topic, _, rest = name.partition("\x00")
            return topic if topic and rest else None
    return None


class Denials:
    """Who was refused what: logged once per (principal, topic, operation) a minute, counted always."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.count: dict[str, int] = {}  # operation -> denials (the metrics)
        self._said: dict[tuple[str | None, str, str], float] = {}

    def __call__(self, principal: str | None, topic: str, op: str, rule: str) -> None:
        self.count[op] = self.count.get(op, 0) + 1
        key, now = (principal, topic, op), time.monotonic()
        if now - self._said.get(key, float("-inf")) >= DENIALS_SAID_EVERY:
            if len(self._said) >= 10_000:
                self._said.clear()  # bounded: a flood of names is said again, never held
            self._said[key] = now
            log.warning("%s: denied %s %s of %r (%s)", self.where, principal or "an unauthenticated peer", op,
                        topic, rule)


class Gate:
    """One XPUB socket in manual mode under a policy: `take()` reads the subscriptions waiting on it
    and applies what the policy allows. Used on the socket's own thread (or under its lock)."""

    def __init__(self, sock: zmq.Socket, may_subscribe: Callable[[str | None, str], tuple[bool, str]],
                 denials: Denials, forward: Callable[[bytes], None] | None = None) -> None:
        sock.setsockopt(zmq.XPUB_MANUAL, 1)
        self.sock, self.may, self.denials, self.forward = sock, may_subscribe, denials, forward

    def take(self, on_applied: Callable[[bytes, bool], None] | None = None) -> int:
        """Apply what waits; `on_applied(message, subscribed)` hears each applied change (its first
        byte 1 or 0, then the prefix), as a plain XPUB's reader would. Returns how many were read."""
        n = 0
        while True:
            try:
                frame = self.sock.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return n
            n += 1
            msg = frame.bytes
            if msg[:1] not in (b"\x00", b"\x01"):
                continue
            on, prefix = msg[:1] == b"\x01", msg[1:]
            if on and prefix.startswith(PATTERN):
                continue
            if on:
                topic = filter_topic(prefix)
                principal = principal_of(frame)
                allowed, rule = (False, "a prefix that names no one topic") if topic is None else \
                    self.may(principal, topic)
                if not allowed:
                    self.denials(principal, topic if topic is not None else repr(prefix[:40]), "subscribe", rule)
                    continue
                self.sock.setsockopt(zmq.SUBSCRIBE, prefix)  # for that connection alone
            else:
                self.sock.setsockopt(zmq.UNSUBSCRIBE, prefix)  # (a connection's end: libzmq did it already)
            if self.forward is not None:
                self.forward(msg)
            if on_applied is not None:
                on_applied(msg, on)
