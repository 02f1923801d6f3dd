"""A durable subscription's positions: per publisher, the last message handed to the application
and the last it is done with (committed), kept in the client's data directory (pubsub/durable.py).

When positions are written:
- *handed*: before a batch of messages goes to the callback or the `get()` queue, in one write;
- *committed*: with a callback, after it returns for the batch, and every 500 messages of a longer
  one (`auto_commit`, the default); with
  `get()` or iteration, a message is committed when the application asks for the next one, or
  unsubscribes, or closes the client; at any time by `Message.commit()` (with `auto_commit=False`,
  only then).
So a process that dies delivers again, when restarted, exactly the messages after the committed
position: those up to the handed position come marked `redelivered` (the application may have
seen them), later ones are new. Nothing committed is delivered twice.
"""

from __future__ import annotations

import threading

from pubsub.durable import DataDir
from pubsub.message import Message


def highest(messages: list[Message]) -> dict[str, int]:
    top: dict[str, int] = {}
    for m in messages:
        if m.seq > top.get(m.publisher, 0):
            top[m.publisher] = m.seq
    return top


class Positions:
    def __init__(self, data: DataDir, name: str, topic: str, auto_commit: bool = True, claim: bool = True) -> None:
        """`claim=False`: one topic of a durable pattern, whose name the pattern claimed."""
        self.data, self.name, self.topic, self.auto_commit = data, name, topic, auto_commit
        start = data.durable(name, topic) if claim else data.positions(name)
        self.committed = {p: c for p, (c, _h) in start.items()}
        self.handed = {p: h for p, (_c, h) in start.items()}
        self._lock = threading.Lock()

    def start(self, publisher: str) -> tuple[int, int]:
        """(committed, handed) for a publisher's stream: delivery resumes after the committed one."""
        return self.committed.get(publisher, 0), self.handed.get(publisher, 0)

    def knows(self, publisher: str) -> bool:
        """Whether this subscription has a position with `publisher` (it was owed its messages)."""
        with self._lock:
            return publisher in self.committed or publisher in self.handed

    def hand(self, messages: list[Message]) -> None:
        """Messages are about to reach the application (the io loop)."""
        moved = {p: s for p, s in highest(messages).items() if s > self.handed.get(p, 0)}
        if moved:
            self.data.set_positions(self.name, handed=moved)
            with self._lock:
                for p, s in moved.items():
                    self.handed[p] = max(s, self.handed.get(p, 0))
        commit = self.commit
        for m in messages:
            m._commit = commit

    def commit(self, *messages: Message) -> None:
        """The application is done with these messages, and every earlier one of their publishers."""
        moved = {p: s for p, s in highest(list(messages)).items() if s > self.committed.get(p, 0)}
        if not moved:
            return
        self.data.set_positions(self.name, committed=moved)
        with self._lock:
            for p, s in moved.items():
                self.committed[p] = max(s, self.committed.get(p, 0))

    def snapshot(self) -> dict[str, int]:
        """The committed positions now (for the acks the io loop sends publishers)."""
        with self._lock:
            return dict(self.committed)

    def of(self, topic: str) -> Positions:
        return self


class PatternPositions:
    """A durable pattern subscription's positions: one `Positions` per topic it follows, each under the
    name `<durable name>|<topic>` in the data directory, so that a restart resumes every topic it had,
    and a topic new to it starts from its first message."""

    def __init__(self, data: DataDir, name: str, pattern: str, auto_commit: bool = True) -> None:
        data.durable(name, pattern)  # the name is the pattern's: claimed (and checked) once
        self.data, self.name, self.pattern, self.auto_commit = data, name, pattern, auto_commit
        self._parts: dict[str, Positions] = {}
        self._lock = threading.Lock()

    def of(self, topic: str) -> Positions:
        with self._lock:
            part = self._parts.get(topic)
            if part is None:
                part = self._parts[topic] = Positions(self.data, f"{self.name}|{topic}", topic, self.auto_commit,
                                                      claim=False)
            return part

    def forget(self, topic: str) -> None:
        with self._lock:
            self._parts.pop(topic, None)

    def _by_topic(self, messages: list[Message]) -> dict[str, list[Message]]:
        out: dict[str, list[Message]] = {}
        for m in messages:
            out.setdefault(m.topic, []).append(m)
        return out

    def hand(self, messages: list[Message]) -> None:
        for topic, ms in self._by_topic(messages).items():
            self.of(topic).hand(ms)

    def commit(self, *messages: Message) -> None:
        for topic, ms in self._by_topic(list(messages)).items():
            self.of(topic).commit(*ms)
