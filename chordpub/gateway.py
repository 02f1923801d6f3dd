"""`chordpub gateway`: the ring for any language, over gRPC (proto/chordpub/v1/pubsub.proto; docs/grpc.md).

A face, like the CLI: it holds `chordpub.Client`s and serves the API with grpcio. Publishing goes
through one Client (the gateway is the publisher of what its callers send); each Subscribe stream has
a Client of its own (one context for all of them), pulled with `get()` by the stream's handler as gRPC
asks for the next message — so a caller that reads slowly is held back where chordpub holds back any
slow application: a best-effort stream loses what exceeds its queue (`--queue`, counted in each
Delivery's `dropped`), a reliable one stops taking messages in and repairs later, a group member is
held by its credit. Each stream's client holds `--queue` messages in its sockets too (its receive
high-water mark), so the gateway's memory is bounded by `--max-streams` × a few `--queue` messages,
and the deliveries kept for manual acks (`UNACKED_LIMIT` and `UNACKED_BYTES` per stream).

Callers are named (for a policy, `--acl`, checked here before the gateway acts for them; the ring
judges the gateway's own key) by their TLS client certificate's common name, or by a bearer token
listed in `--tokens FILE` ("TOKEN PRINCIPAL" per line). Errors are gRPC status codes with a line a
person can read: INVALID_ARGUMENT, PERMISSION_DENIED, UNAVAILABLE, NOT_FOUND, RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import zmq

from chordpub.v1 import pubsub_pb2 as pb
from chordpub.v1 import pubsub_pb2_grpc as rpc
from dht.client import DhtError

log = logging.getLogger(__name__)

UNACKED_LIMIT = 10_000  # deliveries a stream keeps for the caller's Ack/Nak; the oldest go first
UNACKED_BYTES = 16 * 1024 * 1024  # and their payloads' bytes at most
POLL = 0.25  # seconds a stream waits for a message before looking whether its caller is still there


class Callers:
    """Who a gRPC caller is: its client certificate's common name, or its bearer token's principal."""

    def __init__(self, tokens: Path | None = None) -> None:
        self.tokens: dict[str, str] = {}
        if tokens is not None:
            for n, line in enumerate(Path(tokens).read_text().splitlines(), 1):
                parts = line.split()
                if not parts or parts[0].startswith("#"):
                    continue
                if len(parts) != 2:
                    raise ValueError(f"{tokens}:{n}: a line is TOKEN PRINCIPAL")
                self.tokens[parts[0]] = parts[1]

    def principal(self, context: grpc.ServicerContext) -> str | None:
        for key, value in context.invocation_metadata():
            if key == "authorization" and value.startswith("Bearer "):
                who = self.tokens.get(value[len("Bearer "):].strip())
                if who is None:
                    context.abort(grpc.StatusCode.UNAUTHENTICATED, "unknown bearer token")
                return who
        names = context.auth_context().get("x509_common_name")
        return names[0].decode() if names else None


class Stream:
    """One Subscribe call: its Client, its subscription, and the deliveries kept for Ack/Nak."""

    def __init__(self, sid: int, client, sub, manual: bool, caller: str | None) -> None:  # noqa: ANN001
        self.sid, self.client, self.sub, self.manual = sid, client, sub, manual  # (a Client, a Subscription)
        self.caller = caller  # its principal: only it settles the stream's deliveries
        self.unacked: OrderedDict[str, object] = OrderedDict()
        self.bytes = 0  # of the payloads in `unacked`
        self.lock = threading.Lock()

    def keep(self, delivery_id: str, msg) -> None:  # noqa: ANN001 - a Message
        """Hold a delivery for the caller's Ack/Nak. Beyond the bounds the oldest is let go: its ack can
        no longer come (a group's message is redelivered after its ack wait, as for a dead member; a
        durable position is committed by any later ack anyway)."""
        with self.lock:
            self.unacked[delivery_id] = msg
            self.bytes += len(msg.payload)
            while len(self.unacked) > UNACKED_LIMIT or self.bytes > UNACKED_BYTES:
                _, old = self.unacked.popitem(last=False)
                self.bytes -= len(old.payload)

    def take(self, delivery_id: str):  # noqa: ANN201 - a Message or None
        with self.lock:
            msg = self.unacked.pop(delivery_id, None)
            if msg is not None:
                self.bytes -= len(msg.payload)
            return msg


class Gateway(rpc.PubSubServicer):
    """The PubSub service: its publisher Client, its streams (each with a Client of its own), and who
    its callers are. `serve()` puts it on a gRPC server; `close()` ends every stream and client."""

    def __init__(self, via: str, *, host: str = "127.0.0.1", bind: str | None = None,
                 curve: Path | None = None, principal: str = "client", data_dir: Path | None = None,
                 acl: Path | None = None, tokens: Path | None = None, heartbeat: float = 1.0,
                 max_streams: int = 256, queue: int = 1000, timeout: float = 10.0) -> None:
        from chordpub import Client
        from dht.policy import PolicyFile

        self.via, self.curve, self.principal, self.heartbeat = via, curve, principal, heartbeat
        self.where = {"host": host, "bind": bind, "advertise": host}  # each of our clients' sockets
        self.data_dir, self.max_streams, self.queue, self.timeout = data_dir, max_streams, queue, timeout
        self.policy = PolicyFile(acl) if acl is not None else None
        self.callers = Callers(tokens)
        self.context = zmq.Context()
        self.publisher = Client(via, **self.where, curve=curve, role=principal, heartbeat=heartbeat,
                                context=self.context, timeout=timeout)
        self.streams: dict[int, Stream] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    # -- who may do what --------------------------------------------------------------------------------
    def _allowed(self, context: grpc.ServicerContext, op: str, topic: str) -> None:
        if self.policy is None:
            return
        self.policy.check()
        who = self.callers.principal(context)
        d = self.policy.policy.decide_pattern(who, op, topic)  # a pattern: some topic it matches
        if not d.allowed:
            from dht.policy import refusal

            context.abort(grpc.StatusCode.PERMISSION_DENIED, refusal(who, op, topic, d.rule))

    def _withheld(self, context: grpc.ServicerContext, topic: str) -> Callable[[str], bool] | None:
        """For a caller's pattern under a policy: whether a topic it matches is one the caller may not
        read (the ring judges the gateway's key, which may read more)."""
        from dht.subjects import is_pattern

        if self.policy is None or not is_pattern(topic):
            return None
        who, policy = self.callers.principal(context), self.policy.policy
        return lambda t: not policy.decide(who, "subscribe", t).allowed

    # -- publishing ---------------------------------------------------------------------------------------
    def Publish(self, request: pb.PublishRequest, context: grpc.ServicerContext) -> pb.PublishReply:  # noqa: N802
        return pb.PublishReply(seq=self._publish(request, context))

    def PublishStream(self, request_iterator: Iterator[pb.PublishRequest],  # noqa: N802
                      context: grpc.ServicerContext) -> pb.PublishStreamReply:
        n = 0
        for request in request_iterator:
            self._publish(request, context)
            n += 1
        return pb.PublishStreamReply(published=n)

    def _publish(self, request: pb.PublishRequest, context: grpc.ServicerContext) -> int:
        self._allowed(context, "publish", request.topic)
        priority = request.priority if request.HasField("priority") else 4
        with _status(context):
            if request.topic not in self.publisher.publications:
                self.publisher.advertise(request.topic)  # a caller is told at once what the ring said of the topic
            return self.publisher.publish(request.topic, request.payload, key=request.key or None, priority=priority)

    # -- subscribing ------------------------------------------------------------------------------------------
    def Subscribe(self, request: pb.SubscribeRequest, context: grpc.ServicerContext) -> Iterator[pb.Delivery]:  # noqa: N802
        self._allowed(context, "subscribe", request.topic)
        withheld = self._withheld(context, request.topic)
        with self._lock:
            if len(self.streams) >= self.max_streams:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                              f"this gateway serves {self.max_streams} streams already (--max-streams)")
            sid = next(self._ids)
        stream = self._open(sid, request, context)
        with self._lock:
            self.streams[sid] = stream
        context.add_callback(lambda: self._close(sid))
        context.send_initial_metadata((("chordpub-subscribed", request.topic),))  # in place: nothing missed after
        sub = stream.sub
        while context.is_active():
            msg = sub.get(timeout=POLL)
            if msg is None:
                if not sub.active:
                    context.abort(grpc.StatusCode.UNAVAILABLE, f"the subscription to {request.topic!r} ended")
                continue
            if withheld is not None and withheld(msg.topic):
                continue  # a topic of the pattern this caller may not read (the gateway's own key may)
            delivery_id = f"{sid}/{msg.publisher}/{msg.seq}/{msg.deliveries}"
            if stream.manual:
                stream.keep(delivery_id, msg)
            yield pb.Delivery(topic=msg.topic, payload=msg.payload, publisher=msg.publisher, seq=msg.seq,
                              sent_ns=msg.sent_ns, recovered=msg.recovered, redelivered=msg.redelivered,
                              deliveries=msg.deliveries, key=msg.key or "", priority=msg.priority,
                              delivery_id=delivery_id, dropped=sub.stats.dropped, lost=sub.lost)

    def _open(self, sid: int, request: pb.SubscribeRequest, context: grpc.ServicerContext) -> Stream:
        from chordpub import Client

        durable = request.durable or None
        data_dir = None
        if durable is not None:
            if self.data_dir is None:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                              "a durable subscription needs a gateway started with --data-dir")
            from pubsub.durable import check_name

            with _status(context):
                check_name(durable)
            data_dir = self.data_dir / f"durable-{durable}"
        wait = min(self.timeout, context.time_remaining() or self.timeout)
        with _status(context):
            client = Client(self.via, **self.where, curve=self.curve, role=self.principal, heartbeat=self.heartbeat,
                            context=self.context, timeout=wait, data_dir=data_dir, receive_hwm=self.queue,
                            name=f"gateway-{durable}" if durable else None)
        manual = request.manual_ack
        try:
            with _status(context):
                if request.group:
                    sub = client.subscribe(request.topic, group=request.group, prefetch=request.prefetch or 100,
                                           ack_wait=request.ack_wait or 30.0, max_deliver=request.max_deliver or 5,
                                           ordering="key" if request.key_ordered else "none", auto_ack=not manual,
                                           pending_limit=self.queue, timeout=wait)
                else:
                    sub = client.subscribe(request.topic, history=request.history, reliable=request.reliable,
                                           durable=durable, auto_commit=not manual, pending_limit=self.queue,
                                           timeout=wait)
        except BaseException:
            client.close()
            raise
        return Stream(sid, client, sub, manual, self.callers.principal(context))

    def _close(self, sid: int) -> None:
        with self._lock:
            stream = self.streams.pop(sid, None)
        if stream is not None:
            threading.Thread(target=stream.client.close, name=f"gateway-close-{sid}", daemon=True).start()

    # -- settling -------------------------------------------------------------------------------------------
    def Ack(self, request: pb.SettleRequest, context: grpc.ServicerContext) -> pb.SettleReply:  # noqa: N802
        return self._settle(request, context, "ack")

    def Nak(self, request: pb.SettleRequest, context: grpc.ServicerContext) -> pb.SettleReply:  # noqa: N802
        return self._settle(request, context, "nak")

    def _settle(self, request: pb.SettleRequest, context: grpc.ServicerContext, how: str) -> pb.SettleReply:
        settled, caller = 0, self.callers.principal(context)
        for delivery_id in request.delivery_ids:
            sid = delivery_id.split("/", 1)[0]
            stream = self.streams.get(int(sid)) if sid.isdigit() else None
            msg = stream.take(delivery_id) if stream is not None and stream.caller == caller else None
            if msg is None:
                continue
            if how == "nak":
                msg.nak()  # type: ignore[attr-defined]
            else:
                msg.ack()  # type: ignore[attr-defined]
                msg.commit()  # type: ignore[attr-defined]
            settled += 1
        if request.delivery_ids and not settled:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no delivery held for {request.delivery_ids[0]!r} (its stream "
                          "ended, it was settled already, or it is not a delivery id of this gateway)")
        return pb.SettleReply(settled=settled)

    # -- the ring's view ---------------------------------------------------------------------------------------
    def TopicInfo(self, request: pb.TopicInfoRequest, context: grpc.ServicerContext) -> pb.TopicInfoReply:  # noqa: N802
        self._allowed(context, "subscribe", request.topic)
        with _status(context):
            info = self.publisher.topic_info(request.topic, timeout=min(self.timeout, context.time_remaining()
                                                                       or self.timeout))
        reply = pb.TopicInfoReply(topic=info["topic"], key_id=str(info["key_id"]), owner=info["owner"]["endpoint"],
                                  subscribers=info["subscribers"])
        for p in info["publishers"]:
            entry = reply.publishers.add(id=p["id"], endpoint=p["endpoint"], history=p["history"],
                                         archive=p["archive"])
            if p["strength"] is not None:
                entry.strength = p["strength"]
        for name, g in info.get("groups", {}).items():
            reply.groups[name].CopyFrom(pb.GroupInfo(members=g["members"], backlog=g["backlog"],
                                                     in_flight=g["in_flight"], delivered=g["delivered"],
                                                     redelivered=g["redelivered"], dead_lettered=g["dead_lettered"]))
        return reply

    def close(self) -> None:
        with self._lock:
            streams, self.streams = list(self.streams.values()), {}
        for s in streams:
            s.client.close()
        self.publisher.close()
        self.context.term()


class _status:  # noqa: N801 - a context manager used like a keyword
    """Errors of the Client as gRPC status codes, with the Client's own line."""

    def __init__(self, context: grpc.ServicerContext) -> None:
        self.context = context

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, _tb) -> bool:  # noqa: ANN001
        if exc is None or isinstance(exc, grpc.RpcError) or not isinstance(exc, Exception):
            return False
        if isinstance(exc, PermissionError):
            self.context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
        if isinstance(exc, DhtError | TimeoutError):
            self.context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        if isinstance(exc, ValueError | TypeError):
            self.context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return False


def serve(gateway: Gateway, listen: str, tls: tuple[bytes, bytes, bytes | None] | None = None) -> grpc.Server:
    """A started gRPC server for `gateway` on `listen` ("host:port"; port 0: a free one, in `.port`),
    with health checking (SERVING) and server reflection."""
    from concurrent.futures import ThreadPoolExecutor

    from grpc_health.v1 import health, health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection

    server = grpc.server(ThreadPoolExecutor(max_workers=gateway.max_streams + 16, thread_name_prefix="gateway"),
                         maximum_concurrent_rpcs=gateway.max_streams + 64,
                         options=[("grpc.max_receive_message_length", 2 * 1024 * 1024)])
    rpc.add_PubSubServicer_to_server(gateway, server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    name = pb.DESCRIPTOR.services_by_name["PubSub"].full_name
    for service in ("", name):
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection((name, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    if tls is None:
        port = server.add_insecure_port(listen)
    else:
        key, cert, client_ca = tls
        credentials = grpc.ssl_server_credentials([(key, cert)], root_certificates=client_ca,
                                                  require_client_auth=client_ca is not None)
        port = server.add_secure_port(listen, credentials)
    if port == 0:
        raise OSError(f"cannot listen on {listen}")
    server.port = port  # type: ignore[attr-defined]
    server.start()
    return server
