"""A client's service endpoint: what other clients ask of the topics it publishes.

One ROUTER socket, the client's id ("host:port"), polled by the io loop: `last` and `range` serve a
publication's bounded history (a late joiner's catch-up, a reliable subscriber's repair), and
`probe` sends a probe on the topic's own frame (pubsub/envelope.py) so that the asking subscriber
learns its filter is in place here (its reply names the topic's newest seq, which every message up
to it precedes on the wire: a subscriber joining a running publisher learns where it joined from
it); `acks` carries durable subscribers' committed positions, which let the publication drop what
they all have (pubsub/history.py). Probes asked for in one pass are
sent together afterwards, one per topic, carrying the token every asker was promised.
"""

from __future__ import annotations

import logging

import zmq

from dht import wire
from dht.rpc_server import RpcServer
from dht.transport import Refused
from pubsub.dispatch import MAX_PREFETCH, MAX_SEQS, ORDERINGS, GroupTerms, check_group
from pubsub.envelope import MAX_TOPIC_CHARS
from pubsub.publishing import PublishingSide

log = logging.getLogger(__name__)

MAX_ACKS = 4096


def _acks(value: object, what: str) -> list[tuple[str, str, int]]:
    """[[topic, durable subscriber, committed position], ...]"""
    if not isinstance(value, list) or not 0 < len(value) <= MAX_ACKS:
        raise wire.WireError(f"{what} must be a list of 1..{MAX_ACKS} acks")
    out = []
    for item in value:
        if not isinstance(item, list) or len(item) != 3:
            raise wire.WireError(f"each of {what} must be [topic, subscriber, position]")
        out.append((wire.string(MAX_TOPIC_CHARS)(item[0], f"{what}.topic"),
                    wire.string(MAX_SUBSCRIBER_CHARS)(item[1], f"{what}.subscriber"),
                    wire.uint(item[2], f"{what}.position")))
    return out


MAX_SUBSCRIBER_CHARS = 512


def _group(value: object, what: str) -> str:
    try:
        return check_group(value)
    except ValueError as exc:
        raise wire.WireError(f"{what}: {exc}") from None


def _seqs(value: object, what: str) -> list[int]:
    if not isinstance(value, list) or len(value) > MAX_SEQS:
        raise wire.WireError(f"{what} must be a list of at most {MAX_SEQS} sequence numbers")
    return [wire.uint(v, what) for v in value]


def _group_acks(value: object, what: str) -> list[tuple[str, str, list[int], list[int], list[int]]]:
    """[[topic, group, acked seqs, naked seqs, seqs dead-lettered by the member], ...]"""
    if not isinstance(value, list) or not 0 < len(value) <= MAX_ACKS:
        raise wire.WireError(f"{what} must be a list of 1..{MAX_ACKS} items")
    out = []
    for item in value:
        if not isinstance(item, list) or len(item) != 5:
            raise wire.WireError(f"each of {what} must be [topic, group, acked, naked, dead]")
        out.append((wire.string(MAX_TOPIC_CHARS)(item[0], f"{what}.topic"), _group(item[1], f"{what}.group"),
                    _seqs(item[2], f"{what}.acked"), _seqs(item[3], f"{what}.naked"), _seqs(item[4], f"{what}.dead")))
    return out


MAX_HEADS = 1024  # topics one `heads` request asks about (a subscriber's tail checks, per publisher)


def _topics(value: object, what: str) -> list[str]:
    if not isinstance(value, list) or not 0 < len(value) <= MAX_HEADS:
        raise wire.WireError(f"{what} must be a list of 1..{MAX_HEADS} topics")
    return [wire.string(MAX_TOPIC_CHARS)(v, what) for v in value]


def _group_names(value: object, what: str) -> list[tuple[str, str]]:
    if not isinstance(value, list) or not 0 < len(value) <= MAX_ACKS:
        raise wire.WireError(f"{what} must be a list of 1..{MAX_ACKS} [topic, group]")
    out = []
    for item in value:
        if not isinstance(item, list) or len(item) != 2:
            raise wire.WireError(f"each of {what} must be [topic, group]")
        out.append((wire.string(MAX_TOPIC_CHARS)(item[0], f"{what}.topic"), _group(item[1], f"{what}.group")))
    return out


def _prefetch(value: object, what: str) -> int:
    n = wire.uint(value, what)
    if not 1 <= n <= MAX_PREFETCH:
        raise wire.WireError(f"{what} must be in 1..{MAX_PREFETCH}")
    return n


def _ordering(value: object, what: str) -> str:
    if value not in ORDERINGS:
        raise wire.WireError(f"{what} must be one of {', '.join(ORDERINGS)}")
    return value  # type: ignore[return-value]


_MEMBER = (wire.string(MAX_SUBSCRIBER_CHARS), True)
SERVICE_SCHEMAS: wire.Schemas = {
    "last": {"topic": (wire.string(MAX_TOPIC_CHARS), True), "count": (wire.uint, True)},
    "range": {"topic": (wire.string(MAX_TOPIC_CHARS), True), "from": (wire.uint, True),
              "to": (wire.optional(wire.uint), False)},
    "probe": {"topic": (wire.string(MAX_TOPIC_CHARS), True)},
    "probes": {"topics": (_topics, True)},  # a probe on each (a subscriber confirming many topics at once)
    "heads": {"topics": (_topics, True)},  # the newest seq of each (reliable subscribers' tail checks)
    "acks": {"items": (_acks, True)},  # durable subscribers' committed positions (acknowledged retention)
    # consumer groups (pubsub/groups.py): a member joins, acks (each renews its lease), leaves
    "gjoin": {"topic": (wire.string(MAX_TOPIC_CHARS), True), "group": (_group, True), "member": _MEMBER,
              "prefetch": (_prefetch, True), "ordering": (_ordering, True), "ack_wait": (wire.seconds, True),
              "max_deliver": (wire.uint, True), "durable": (wire.boolean, True), "lease": (wire.seconds, True)},
    "gack": {"member": _MEMBER, "lease": (wire.seconds, True), "items": (_group_acks, True)},
    "gleave": {"member": _MEMBER, "items": (_group_names, True)},
    "groups": {"topic": (wire.string(MAX_TOPIC_CHARS), True)},  # each group's members and figures
    "figures": {"topic": (wire.string(MAX_TOPIC_CHARS), True)},  # the publication's own (`topic info`)
}


class Service:
    def __init__(self, server: RpcServer, publishing: PublishingSide) -> None:
        self.server = server
        server.handler = self._handle
        self.publishing = publishing
        self.endpoint = server.endpoint
        self._probe_topics: set[str] = set()

    @property
    def socket(self) -> zmq.Socket:
        return self.server.socket

    def serve(self) -> None:
        """Answer every request waiting, then send the probes they asked for (the io loop)."""
        sock = self.server.socket
        while True:
            try:
                frames, principal = self.server.receive(zmq.NOBLOCK)
            except zmq.Again:
                break
            reply = self.server.handle_frames(frames, principal)
            if reply is not None:
                try:
                    sock.send_multipart(reply, zmq.NOBLOCK)
                except zmq.ZMQError as exc:
                    log.debug("reply not sent: %s", exc)
        if self._probe_topics:
            self.publishing.probe(sorted(self._probe_topics))
            self._probe_topics.clear()

    def _handle(self, req: dict) -> dict:
        op = req["op"]
        if op == "acks":
            return {"held": self.publishing.ack(req["items"])}
        if op in ("gjoin", "gack", "gleave", "groups"):
            return self._group(op, req)
        if op == "heads":  # topics we do not publish, or that the asker may not read, are left out
            principal = req["principal"]
            return {"lasts": {t: r["last"] for t in req["topics"]
                              if self.publishing.refusal(principal, t, "history") is None
                              and (r := self.publishing.serve(t, "last")) is not None}}
        if op == "probes":
            return self._probes(req["principal"], req["topics"])
        topic = req["topic"]
        if op == "probe":  # one topic's: with its newest seq, every message up to which goes out before the probe
            out = self._probes(req["principal"], [topic])
            if topic in out["refused"]:
                raise Refused(out["refused"][topic])
            return {"token": out["token"], "last": out["lasts"][topic]}
        if topic not in self.publishing.publications:
            raise Refused(f"{self.endpoint} does not publish {topic!r}")
        refusal = self.publishing.refusal(req["principal"], topic, "history")
        if refusal is not None:
            raise Refused(refusal)
        if req["op"] == "figures":  # the publication's own, for `topic info`: its msg-id window (pubsub/dedup.py)
            with self.publishing.lock:  # and, on an exclusive topic, whether it leads (pubsub/exclusive.py)
                pub = self.publishing.publications.get(topic)
                fence = None if pub is None else pub.fence
                return {"dedup": None if pub is None or pub.dedup is None else pub.dedup.stats(),
                        "exclusive": None if fence is None else {"leading": fence.is_leader, "epoch": fence.epoch,
                                                                 "standby": pub.standby}}
        result = self.publishing.serve(topic, req["op"], count=req.get("count", 0), lo=req.get("from", 1),
                                       hi=req.get("to"))
        if result is None:
            raise Refused(f"{self.endpoint} does not publish {topic!r}")
        return result

    def _probes(self, principal: str | None, topics: list[str]) -> dict:
        """`probe` for many topics: each one's newest seq, or why it gets no probe; one token for all (the
        probes go out together once every request waiting is answered)."""
        lasts: dict[str, int | None] = {}
        refused: dict[str, str] = {}
        for topic in topics:
            if topic not in self.publishing.publications:
                refused[topic] = f"{self.endpoint} does not publish {topic!r}"
            elif (refusal := self.publishing.refusal(principal, topic, "probe")) is not None:
                refused[topic] = refusal
            else:
                newest = self.publishing.serve(topic, "last")
                lasts[topic] = None if newest is None else newest["last"]
                self._probe_topics.add(topic)
        return {"token": self.publishing.next_probe_token(), "lasts": lasts, "refused": refused}

    def _group(self, op: str, req: dict) -> dict:
        groups, principal = self.publishing.groups, req["principal"]
        if op == "gjoin":
            refusal = self.publishing.refusal(principal, req["topic"], "group join")
            if refusal is not None:
                raise Refused(refusal)
        with self.publishing.lock:
            if op == "gack":
                return {"unknown": groups.acks(req["member"], req["items"], req["lease"], principal)}
            if op == "gleave":
                groups.leave(req["member"], req["items"], principal)
                return {}
            if op == "groups":
                return {"groups": groups.stats(req["topic"])}
            if req["max_deliver"] < 1:
                raise Refused("max_deliver must be at least 1")
            terms = GroupTerms(req["ordering"], req["ack_wait"], req["max_deliver"], req["durable"])
            refusal = groups.join(req["topic"], req["group"], req["member"], req["prefetch"], terms, req["lease"],
                                  principal)
        if refusal is not None:
            raise Refused(refusal)
        return {}

    def close(self) -> None:
        self.server.close()
