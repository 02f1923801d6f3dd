"""The systems benchmarks/peers.py compares, each as a publisher and a subscriber run in a child process
with its own Python client: chordpub (best effort, reliable, durable), NATS core (nats-py), Mosquitto
(paho-mqtt, QoS 0 and 1) and NATS JetStream (memory and file storage); and, for exactly once into the
application's database (`--app-db`), chordpub's durable path at least once, chordpub with msg ids and
commit_with, and JetStream with Nats-Msg-Id and a double ack (`ack_sync`).

A child is started as `python benchmarks/peers_systems.py pub|sub SYSTEM URL ...` (see `main`). Every
message is SIZE bytes and starts with its phase (w: warm-up, p: paced, f: flood) and the sender's
wall clock in ns (a warm-up message then names its publisher, `--index`); a subscriber reads the clock
where the application gets the message (its callback), which is where latency is measured, for every
system alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIZE = 100
HEAD = struct.Struct("!cq")  # phase, sent_ns
IDLE_S = 3.0  # a subscriber that hears nothing this long (after the first flood message) reports what it has
CHORDPUB = ("chordpub", "chordpub-reliable", "chordpub-durable", "chordpub-exactly-once")
JETSTREAM = ("jetstream-memory", "jetstream-file", "jetstream-exactly-once")
DURABLE = ("chordpub-durable", "chordpub-exactly-once")  # a data directory on both sides


class AppDb:
    """The application's work in the exactly-once workload: each message a row of its SQLite database
    (WAL, synchronous=NORMAL), committed with the message (`commit_with`, for chordpub-exactly-once) or
    by the application before the ack (the others)."""

    def __init__(self, path: str) -> None:
        import sqlite3

        self.conn = sqlite3.connect(path, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute("CREATE TABLE IF NOT EXISTS applied (sent_ns INTEGER, payload BLOB)")
        self.conn.commit()

    def insert(self, data: bytes) -> None:
        self.conn.execute("INSERT INTO applied VALUES (?, ?)", (HEAD.unpack_from(data)[1], data))


def payload(phase: bytes, index: int = 0) -> bytes:
    head = HEAD.pack(phase, time.time_ns()) + index.to_bytes(2, "big")
    return head + b"\x00" * (SIZE - len(head))


class Tally:
    """What a subscriber saw: flood arrivals (count, first and last time), paced latencies, warm-up."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.flood = 0
        self.first_ns = self.last_ns = 0
        self.latencies: list[float] = []
        self.warm_from: set[int] = set()  # the publishers (`--index`) whose warm-up came
        self.done = threading.Event()
        self._seen, self._since = -1, time.monotonic()

    def take(self, data: bytes) -> None:
        now = time.time_ns()
        phase, sent_ns = HEAD.unpack_from(data)
        if phase == b"f":
            if not self.flood:
                self.first_ns = now
            self.flood += 1
            self.last_ns = now
        elif phase == b"p":
            self.latencies.append((now - sent_ns) / 1e6)
        else:
            self.warm_from.add(int.from_bytes(data[HEAD.size:HEAD.size + 2], "big"))
        if self.flood + len(self.latencies) >= self.expected:
            self.done.set()

    def finished(self) -> bool:
        """Every expected message came, or messages came and then none for IDLE_S (called in a loop)."""
        if self.done.is_set():
            return True
        count, now = self.flood + len(self.latencies), time.monotonic()
        if count != self._seen:
            self._seen, self._since = count, now
            return False
        return bool(count) and now - self._since >= IDLE_S

    def wait(self, limit: float) -> None:
        """Until `finished`, or `limit` seconds."""
        deadline = time.monotonic() + limit
        while not self.finished() and time.monotonic() < deadline:
            self.done.wait(0.05)  # polling a count with a deadline

    def report(self) -> dict:
        return {"flood": self.flood, "first_ns": self.first_ns, "last_ns": self.last_ns, "latencies": self.latencies}


# -- subscribers ------------------------------------------------------------------------------------------
def topic_names(args: argparse.Namespace) -> list[str]:
    """The topics a publisher sends on: TOPIC0..; with --pattern, levels under TOPIC (NATS: TOPIC.0, ...;
    the others TOPIC/0, ...)."""
    if args.pattern:
        sep = "/" if args.system in CHORDPUB or args.system.startswith("mqtt") else "."
        return [f"{args.topic}{sep}{i}" for i in range(args.topics)]
    return [f"{args.topic}{i}" if args.topics > 1 else args.topic for i in range(args.topics)]


def subscriptions(args: argparse.Namespace) -> list[str]:
    """What a subscriber subscribes to: every topic, or with --pattern one wildcard matching them all."""
    if not args.pattern:
        return topic_names(args)
    if args.system in CHORDPUB:
        return [f"{args.topic}/*"]
    return [f"{args.topic}/+"] if args.system.startswith("mqtt") else [f"{args.topic}.*"]


def subscribe(args: argparse.Namespace) -> None:
    tally = Tally(args.expected)
    topics = subscriptions(args)
    ready = Path(args.ready)
    app = AppDb(args.app_db) if args.app_db else None
    if args.system in CHORDPUB:
        from chordpub import Client

        exactly_once = args.system == "chordpub-exactly-once"
        data = Path(args.data) if args.system == "chordpub-durable" else None

        def take(m) -> None:  # noqa: ANN001
            if app is not None:
                app.insert(m.payload)
                if not exactly_once:
                    app.conn.commit()  # the application's own commit; the position follows (at least once)
            tally.take(m.payload)

        with Client(args.url, heartbeat=1.0, data_dir=data) as client:
            for t in topics:
                client.subscribe(t, callback=take, reliable=args.system != "chordpub",
                                 durable="bench" if args.system in DURABLE else None,
                                 commit_with=app.conn if exactly_once else None)
            ready.write_text("1")
            _watch_warm(tally, args)
            tally.wait(args.limit)
    elif args.system.startswith("mqtt"):
        import paho.mqtt.client as mqtt

        qos = int(args.system[-1])
        host, port = args.url.rsplit(":", 1)
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"sub-{args.ready}"[-23:],
                             clean_session=True)
        client.on_message = lambda _c, _u, msg: tally.take(msg.payload)
        subscribed = threading.Event()
        client.on_subscribe = lambda *_a: subscribed.set()
        client.connect(host, int(port))
        client.loop_start()
        for t in topics:
            subscribed.clear()
            client.subscribe(t, qos=qos)
            subscribed.wait(10)
        ready.write_text("1")
        _watch_warm(tally, args)
        tally.wait(args.limit)
        client.loop_stop()
        client.disconnect()
    else:
        asyncio.run(_nats_subscribe(args, topics, tally, app))
    Path(args.out).write_text(json.dumps(tally.report()))


async def _nats_subscribe(args: argparse.Namespace, topics: list[str], tally: Tally, app: AppDb | None) -> None:
    import nats

    nc = await nats.connect(args.url, pending_size=1024 * 1024 * 1024)

    async def on_message(msg) -> None:  # noqa: ANN001
        tally.take(msg.data)

    async def apply_and_ack(msg) -> None:  # noqa: ANN001 - exactly once: the row committed, then the double ack
        app.insert(msg.data)
        app.conn.commit()
        await msg.ack_sync()
        tally.take(msg.data)

    if args.system == "jetstream-exactly-once":
        js = nc.jetstream()
        for t in topics:
            await js.subscribe(t, durable=f"bench-{t}".replace(".", "-"), cb=apply_and_ack, manual_ack=True,
                               pending_msgs_limit=10_000_000, pending_bytes_limit=-1)
    elif args.system == "nats":
        for t in topics:
            await nc.subscribe(t, cb=on_message, pending_msgs_limit=10_000_000, pending_bytes_limit=-1)
    else:  # JetStream: a durable push consumer, acked as the callback returns (nats-py's default)
        js = nc.jetstream()
        for t in topics:
            await js.subscribe(t, durable=f"bench-{t}".replace(".", "-"), cb=on_message,
                               pending_msgs_limit=10_000_000, pending_bytes_limit=-1)
    await nc.flush()
    Path(args.ready).write_text("1")
    _watch_warm(tally, args)
    deadline = time.monotonic() + args.limit
    while not tally.finished() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)  # polling the tally with nats-py's loop running
    await nc.drain()


def _watch_warm(tally: Tally, args: argparse.Namespace) -> None:
    """Write WARM.i once publisher i's warm-up message came, for each publisher, until the paced
    messages or the flood begin (on a thread of its own, which then ends: it does not wake during the
    measured phases): each publisher goes on only once its own messages reach every subscriber."""
    if not args.warm:
        return  # no warm-up: the publisher begins at once (the many-topics workload)

    def watch() -> None:
        written: set[int] = set()
        while not tally.flood and not tally.latencies and not tally.done.is_set():
            for index in set(tally.warm_from) - written:
                Path(f"{args.warm}.{index}").write_text("1")
                written.add(index)
            time.sleep(0.01)  # polling the tally: warm-up messages arrive on the client's thread

    threading.Thread(target=watch, daemon=True).start()


# -- publishers -------------------------------------------------------------------------------------------
class Sender:
    """One system's publishing side: `one(topic, phase)` (sent, and acknowledged where the system
    acknowledges publishes), `flood(topics, count)` as fast as the client goes."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.system = args.system
        self.ids = self.system.endswith("exactly-once")  # every message a msg id of its own
        self.sent = 0
        if self.system in CHORDPUB:
            from chordpub import Client

            data = Path(args.data) if self.system in DURABLE else None
            self.client = Client(args.url, heartbeat=1.0, data_dir=data)
            if self.system != "chordpub":
                for t in args.topic_names:
                    self.client.advertise(t, reliable=True, history=args.count + args.paced + 1000,
                                          retain_messages=max(100_000, 2 * args.count))
        elif self.system.startswith("mqtt"):
            import paho.mqtt.client as mqtt

            host, port = args.url.rsplit(":", 1)
            self.qos = int(self.system[-1])
            self.mqtt = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"pub-{args.out}"[-23:])
            self.mqtt.max_queued_messages_set(0)
            self.mqtt.max_inflight_messages_set(1000)
            self.mqtt.connect(host, int(port))
            self.mqtt.loop_start()
        else:
            self.loop = asyncio.new_event_loop()
            self.nc = self.loop.run_until_complete(_nats_connect(args.url))
            self.js = self.nc.jetstream() if self.system in JETSTREAM else None

    def msg_id(self) -> str | None:
        self.sent += 1
        return f"m{self.sent}" if self.ids else None

    def one(self, topic: str, phase: bytes, index: int = 0) -> None:
        if self.system in CHORDPUB:
            self.client.publish(topic, payload(phase, index), msg_id=self.msg_id())
        elif self.system.startswith("mqtt"):
            info = self.mqtt.publish(topic, payload(phase, index), qos=self.qos)
            if self.qos:
                info.wait_for_publish(30)
        else:
            self.loop.run_until_complete(self._nats_one(topic, phase, index))

    async def _nats_one(self, topic: str, phase: bytes, index: int = 0) -> None:
        if self.js is not None:
            msg_id = self.msg_id()
            await self.js.publish(topic, payload(phase, index), headers={"Nats-Msg-Id": msg_id} if msg_id else None)
        else:
            await self.nc.publish(topic, payload(phase, index))
            await self.nc.flush()

    def flood(self, topics: list[str], count: int) -> None:
        if self.system in CHORDPUB:
            publish = self.client.publish
            if self.ids:
                for _ in range(count):
                    for t in topics:
                        publish(t, payload(b"f"), msg_id=self.msg_id())
                return
            for _ in range(count):
                for t in topics:
                    publish(t, payload(b"f"))
        elif self.system.startswith("mqtt"):
            pending = []
            for _ in range(count):
                for t in topics:
                    pending.append(self.mqtt.publish(t, payload(b"f"), qos=self.qos))
                if self.qos and len(pending) >= 500:  # QoS 1: at most 1000 in flight (the client's window)
                    for info in pending:
                        info.wait_for_publish(60)
                    pending.clear()
            for info in pending:
                info.wait_for_publish(60)
        else:
            self.loop.run_until_complete(self._nats_flood(topics, count))

    async def _nats_flood(self, topics: list[str], count: int) -> None:
        if self.js is None:
            publish = self.nc.publish
            for _ in range(count):
                for t in topics:
                    await publish(t, payload(b"f"))
            await self.nc.flush()
            return
        acks = []
        for _ in range(count):
            for t in topics:
                msg_id = self.msg_id()
                acks.append(self.js.publish(t, payload(b"f"), headers={"Nats-Msg-Id": msg_id} if msg_id else None))
                # async publish, acks awaited 256 at a time
            if len(acks) >= 256:
                await asyncio.gather(*acks)
                acks = []
        await asyncio.gather(*acks)

    def close(self) -> None:
        if self.system in CHORDPUB:
            self.client.close()
        elif self.system.startswith("mqtt"):
            self.mqtt.loop_stop()
            self.mqtt.disconnect()
        else:
            self.loop.run_until_complete(self.nc.drain())
            self.loop.close()


async def _nats_connect(url: str):  # noqa: ANN202
    import nats

    return await nats.connect(url)


def publish(args: argparse.Namespace) -> None:
    args.topic_names = topic_names(args)
    sender = Sender(args)
    warm = [Path(f"{w}.{args.index}") for w in args.warm_files.split(",") if w]
    while not all(w.exists() for w in warm):  # each subscriber says when our warm-up reached it
        for t in args.topic_names:
            sender.one(t, b"w", args.index)
        time.sleep(0.02)  # the warm-up's pace; the condition is the subscribers' files
    t0 = time.perf_counter()
    for i in range(args.paced):
        sender.one(args.topic_names[0], b"p")
        time.sleep(max(t0 + (i + 1) / args.rate - time.perf_counter(), 0))  # pacing, not synchronization
    if args.go:  # every publisher floods at once: the figure is the flood's, not the publishers' start-up
        Path(args.ready_file).write_text("1")
        while not Path(args.go).exists():
            time.sleep(0.001)  # polling the harness's file
    start_ns = time.time_ns()
    sender.flood(args.topic_names, args.count)
    if args.out:
        Path(args.out).write_text(json.dumps({"start_ns": start_ns, "sent_s": (time.time_ns() - start_ns) / 1e9}))
    while args.stop and not Path(args.stop).exists():  # serve repairs and history until the run is over
        time.sleep(0.05)
    sender.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("role", choices=("pub", "sub"))
    ap.add_argument("system")
    ap.add_argument("url")
    ap.add_argument("--topic", default="bench")
    ap.add_argument("--topics", type=int, default=1, help="topics TOPIC0..TOPICn-1 (1: TOPIC itself)")
    ap.add_argument("--count", type=int, default=0, help="publisher: flood messages per topic")
    ap.add_argument("--paced", type=int, default=0, help="publisher: paced messages first")
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--expected", type=int, default=0, help="subscriber: messages (paced + flood) to wait for")
    ap.add_argument("--limit", type=float, default=120.0)
    ap.add_argument("--ready", default="", help="subscriber: a file written once subscribed")
    ap.add_argument("--warm", default="", help="subscriber: a file written once a warm-up message arrived")
    ap.add_argument("--warm-files", default="", help="publisher: the subscribers' --warm files, comma-separated "
                    "(each subscriber writes WARM.INDEX once publisher INDEX's warm-up reached it)")
    ap.add_argument("--index", type=int, default=0, help="publisher: its number, named in its warm-up messages")
    ap.add_argument("--ready-file", default="", help="publisher: a file written once warm, before --go")
    ap.add_argument("--go", default="", help="publisher: flood once this file exists (with --ready-file)")
    ap.add_argument("--out", default="")
    ap.add_argument("--stop", default="")
    ap.add_argument("--data", default="", help="chordpub-durable, chordpub-exactly-once: the data directory")
    ap.add_argument("--app-db", default="", help="subscriber: each message a row of this SQLite database")
    ap.add_argument("--pattern", action="store_true", help="topics are levels under TOPIC; the subscriber "
                    "follows them with one wildcard")
    args = ap.parse_args()
    (publish if args.role == "pub" else subscribe)(args)


if __name__ == "__main__":
    main()
