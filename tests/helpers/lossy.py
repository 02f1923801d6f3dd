"""A test relay between a publisher and its subscribers that drops messages: the loss the issue's
acceptance tests induce (TCP over loopback loses nothing by itself).

It republishes the publisher's messages on a socket of its own; the publisher's record names the
link's endpoint instead of its own (`publisher.publishing.endpoint = link.endpoint` before
`advertise`), so subscribers connect through it. Each subscriber's filter for the topic goes up
through the link as it comes (an XSUB/XPUB pair), so the publisher sees it only once that subscriber
has connected, as across a real network: a link that subscribed upstream on its own, before anyone
connected, let a publisher waiting for its subscribers' filters send at once (a durable subscriber's
first messages went out before its position reached the publisher, and were not retained for it).

It drops each message with probability `rate`, every seq in `drop_run`, and everything while `cut`
is set; probes always pass (they are how a subscriber knows its filter is in place). A coalesced run
is judged message by message, and what passes goes on as single messages.

`TcpForward` moves a TCP port's bytes to another and back (a ZeroMQ request socket behind it does not
notice), and can `hold` them: with a LossyLink, a network between a publisher and its subscribers
that goes down and comes back.
"""

from __future__ import annotations

import random
import selectors
import socket
import threading

import zmq

from pubsub.envelope import Envelope, Run, decode_frame, topic_filter


class LossyLink:
    def __init__(self, upstream: str, topic: str, drop_run: range = range(0), rate: float = 0.05,
                 seed: int = 3, bind: str | None = None) -> None:
        """`bind`: "host:port" to listen on (a free port of 127.0.0.1 by default)."""
        ctx = zmq.Context.instance()
        self.filter = topic_filter(topic)
        self.sub = ctx.socket(zmq.XSUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.RCVHWM, 0)
        self.sub.connect(f"tcp://{upstream}")
        self.pub = ctx.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.setsockopt(zmq.XPUB_VERBOSER, 1)  # every subscriber's filter, as the publisher counts them
        if bind is None:
            self.endpoint = f"127.0.0.1:{self.pub.bind_to_random_port('tcp://127.0.0.1')}"
        else:
            self.pub.bind(f"tcp://{bind}")
            self.endpoint = bind
        self.rng = random.Random(seed)
        self.rate = rate
        self.drop_run = drop_run
        self.dropped: set[int] = set()
        self.cut = False  # while set, every message is dropped (probes too: the network is down)
        self.passed = 0
        self.last_passed = 0  # the highest sequence number let through
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.sub, zmq.POLLIN)
        poller.register(self.pub, zmq.POLLIN)
        while not self.stop.is_set():
            ready = dict(poller.poll(50))
            if self.pub in ready:
                self._subscriptions()
            if self.sub in ready:
                self._messages()

    def _subscriptions(self) -> None:
        """Subscribers' filters for the topic go up (other filters: the link carries only the topic)."""
        while True:
            try:
                msg = self.pub.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            if msg[1:] == self.filter:
                self.sub.send(msg)

    def _messages(self) -> None:
        while True:
            try:
                frame = self.sub.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            decoded = decode_frame(frame, probes=True)
            for env in decoded.envelopes() if isinstance(decoded, Run) else [decoded]:
                self._pass(env)

    def _pass(self, env: Envelope) -> None:
        """Let one message through, or drop it (a coalesced run is judged message by message)."""
        seq = env.seq
        if self.cut:
            if seq:
                self.dropped.add(seq)
            return
        if seq and (seq in self.drop_run or self.rng.random() < self.rate):
            self.dropped.add(seq)
            return
        self.passed += 1
        self.last_passed = max(self.last_passed, seq)
        self.pub.send(env.encode())

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.sub.close()
        self.pub.close()


class TcpForward:
    """Accepts on `listen` and carries each connection's bytes to `upstream` and back; `hold()` stops
    moving them (and accepting) until `release()`. A side that closes closes its partner."""

    def __init__(self, listen: tuple[str, int], upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.server = socket.create_server(listen)
        self.server.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.server, selectors.EVENT_READ)
        self.partner: dict[socket.socket, socket.socket] = {}
        self.held = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def hold(self) -> None:
        self.held.set()

    def release(self) -> None:
        self.held.clear()

    def _run(self) -> None:
        while not self.stop.is_set():
            if self.held.is_set():
                self.stop.wait(0.02)  # a held network moves nothing: bytes wait in the kernel's buffers
                continue
            for key, _ in self.selector.select(0.05):
                sock = key.fileobj
                if sock is self.server:
                    self._accept()
                elif sock in self.partner:
                    self._move(sock)

    def _accept(self) -> None:
        try:
            down, _ = self.server.accept()
        except BlockingIOError:
            return
        try:
            up = socket.create_connection(self.upstream, timeout=1.0)
        except OSError:
            down.close()  # nothing listens upstream: the connecting side sees a refusal and retries
            return
        for a, b in ((down, up), (up, down)):
            a.settimeout(2.0)
            self.partner[a] = b
            self.selector.register(a, selectors.EVENT_READ)

    def _move(self, sock: socket.socket) -> None:
        other = self.partner[sock]
        try:
            data = sock.recv(1 << 16)
            if data:
                other.sendall(data)
                return
        except OSError:
            pass
        for s in (sock, other):
            self.selector.unregister(s)
            self.partner.pop(s, None)
            s.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        for s in list(self.partner):
            s.close()
        self.selector.close()
        self.server.close()
