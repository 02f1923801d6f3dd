"""A test relay between a publisher and its subscribers that drops messages: the loss the issue's
acceptance tests induce (TCP over loopback loses nothing by itself).

It subscribes to the publisher's PUB socket and republishes on its own; the publisher's record
names the link's endpoint instead of its own (`publisher.publishing.endpoint = link.endpoint`
before `advertise`), so subscribers connect through it. It drops each message with probability
`rate` and every seq in `drop_run`; probes always pass (they are how a subscriber knows its filter
is in place).
"""

from __future__ import annotations

import random
import threading

import zmq

from pubsub.envelope import Envelope, topic_filter


class LossyLink:
    def __init__(self, upstream: str, topic: str, drop_run: range = range(0), rate: float = 0.05,
                 seed: int = 3) -> None:
        ctx = zmq.Context.instance()
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.RCVHWM, 0)
        self.sub.setsockopt(zmq.SUBSCRIBE, topic_filter(topic))
        self.sub.connect(f"tcp://{upstream}")
        self.pub = ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.endpoint = f"127.0.0.1:{self.pub.bind_to_random_port('tcp://127.0.0.1')}"
        self.rng = random.Random(seed)
        self.rate = rate
        self.drop_run = drop_run
        self.dropped: set[int] = set()
        self.passed = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            if not self.sub.poll(50):
                continue
            while True:
                try:
                    frame = self.sub.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                seq = Envelope.decode(frame, probes=True).seq
                if seq and (seq in self.drop_run or self.rng.random() < self.rate):
                    self.dropped.add(seq)
                    continue
                self.passed += 1
                self.pub.send(frame)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.sub.close()
        self.pub.close()
