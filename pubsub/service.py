"""A client's service endpoint: what other clients ask of the topics it publishes.

One ROUTER socket, the client's id ("host:port"), polled by the io loop: `last` and `range` serve a
publication's bounded history (a late joiner's catch-up, a reliable subscriber's repair), and
`probe` sends a probe on the topic's own frame (pubsub/envelope.py) so that the asking subscriber
learns its filter is in place here; `acks` carries durable subscribers' committed positions, which
let the publication drop what they all have (pubsub/history.py). Probes asked for in one pass are
sent together afterwards, one per topic, carrying the token every asker was promised.
"""

from __future__ import annotations

import logging

import zmq

from dht import wire
from dht.transport import Refused, RpcServer
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
SERVICE_SCHEMAS: wire.Schemas = {
    "last": {"topic": (wire.string(MAX_TOPIC_CHARS), True), "count": (wire.uint, True)},
    "range": {"topic": (wire.string(MAX_TOPIC_CHARS), True), "from": (wire.uint, True),
              "to": (wire.optional(wire.uint), False)},
    "probe": {"topic": (wire.string(MAX_TOPIC_CHARS), True)},
    "acks": {"items": (_acks, True)},  # durable subscribers' committed positions (acknowledged retention)
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
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            reply = self.server.handle_frames(frames)
            if reply is not None:
                try:
                    sock.send_multipart(reply, zmq.NOBLOCK)
                except zmq.ZMQError as exc:
                    log.debug("reply not sent: %s", exc)
        if self._probe_topics:
            self.publishing.probe(sorted(self._probe_topics))
            self._probe_topics.clear()

    def _handle(self, req: dict) -> dict:
        if req["op"] == "acks":
            return {"held": self.publishing.ack(req["items"])}
        topic = req["topic"]
        if topic not in self.publishing.publications:
            raise Refused(f"{self.endpoint} does not publish {topic!r}")
        if req["op"] == "probe":
            self._probe_topics.add(topic)
            return {"token": self.publishing.next_probe_token()}
        result = self.publishing.serve(topic, req["op"], count=req.get("count", 0), lo=req.get("from", 1),
                                       hi=req.get("to"))
        if result is None:
            raise Refused(f"{self.endpoint} does not publish {topic!r}")
        return result

    def close(self) -> None:
        self.server.close()
