"""`chordpub pub`, `chordpub sub`, `chordpub topic info`: the pub/sub face of the CLI."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import typer

from chordpub.cli import CURVE_HELP, app, check_source, clean_errors, curve_setup, dht_client, emit, endpoint_arg, fail

topic_app = typer.Typer(help="Inspect topics: their owner, publishers and subscribers.", no_args_is_help=True)
app.add_typer(topic_app, name="topic")

MODES = ("direct", "relay")


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        fail(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


@app.command("pub")
@clean_errors
def pub(
    via: str = typer.Option(..., help="Any node of the ring, H:P."),
    topic: str = typer.Option(..., help="The topic to publish on."),
    count: int = typer.Option(100, min=0, help="Messages to send (0: until Ctrl-C)."),
    rate: float = typer.Option(10.0, min=0.0, help="Messages per second (0: as fast as possible)."),
    size: int = typer.Option(100, min=0, max=512 * 1024, help="Payload bytes."),
    history: int = typer.Option(None, min=0, help="Messages kept for late joiners and repair "
                                "(default 0; 1000 with --reliable)."),
    strength: int = typer.Option(None, help="Ownership strength: the topic becomes exclusive."),
    reliable: bool = typer.Option(False, help="Keep a history deep enough for gap repair."),
    mode: str = typer.Option("direct", help="direct | relay."),
    linger: float = typer.Option(0.0, min=0.0, help="After the last message, keep serving history and "
                                 "repair this many seconds."),
    heartbeat: float = typer.Option(1.0, min=0.05, help="Seconds between registration renewals."),
    host: str = typer.Option("127.0.0.1", help="Address to bind the PUB and repair sockets on."),
    trace: Path = typer.Option(None, help="Write what was sent (JSON Lines: seq, sent_ns)."),
    curve: Path = typer.Option(None, help=CURVE_HELP),
) -> None:
    """Publish COUNT messages of SIZE bytes at RATE per second on TOPIC."""
    from pubsub.publisher import Publisher

    endpoint_arg(via)
    _check_mode(mode)
    keep = history if history is not None else (1000 if reliable else 0)
    stop = _stop_on_signals()
    publisher = Publisher(via, topic, host=host, history=keep, strength=strength, heartbeat=heartbeat,
                          mode=mode, setup=curve_setup(curve, "publisher")).start()
    out = open(trace, "a", buffering=1) if trace else None  # noqa: SIM115
    try:
        period = 1.0 / rate if rate > 0 else 0.0
        t0 = time.monotonic()
        i = 0
        while (count == 0 or i < count) and not stop.is_set():
            payload = i.to_bytes(8, "big") + b"\x00" * max(size - 8, 0) if size >= 8 else b"\x00" * size
            env = publisher.publish(payload)
            if out:
                out.write(json.dumps({"topic": topic, "publisher": publisher.id, "seq": env.seq,
                                      "sent_ns": env.sent_ns}) + "\n")
            i += 1
            if period:
                stop.wait(max(t0 + i * period - time.monotonic(), 0))
        if linger and not stop.is_set():
            stop.wait(linger)
    finally:
        publisher.close()
        if out:
            out.close()
    typer.echo(f"published {publisher.sent} messages on {topic!r} as {publisher.id}", err=True)


@app.command("sub")
@clean_errors
def sub(
    via: str = typer.Option(..., help="Any node of the ring, H:P."),
    topic: str = typer.Option(..., help="The topic to subscribe to."),
    count: int = typer.Option(None, min=1, help="Stop after this many messages."),
    seconds: float = typer.Option(None, min=0.0, help="Stop after this many seconds."),
    history: int = typer.Option(0, min=0, help="On joining, ask each publisher for its last K messages."),
    reliable: bool = typer.Option(False, help="In order, no duplicates, gaps repaired from history."),
    mode: str = typer.Option("direct", help="direct | relay."),
    heartbeat: float = typer.Option(1.0, min=0.05, help="Seconds between lease renewals and re-reads."),
    host: str = typer.Option("127.0.0.1", help="Address to bind the notify socket on."),
    trace: Path = typer.Option(None, help="Append deliveries here (JSON Lines, the trace schema)."),
    dead_letter: Path = typer.Option(None, help="Append unrepairable gaps here (JSON Lines)."),
    run: str = typer.Option("live", help="Run name written in trace rows."),
    source: str = typer.Option("live", help="Source written in trace rows: live, or mininet for `mininet run`."),
    print_messages: bool = typer.Option(False, "--print", help="Print each delivery on stdout."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON summary object at the end."),
    curve: Path = typer.Option(None, help=CURVE_HELP),
) -> None:
    """Receive TOPIC from every publisher, directly; print a summary at the end."""
    from pubsub.subscriber import Subscriber
    from traces.writer import JsonlWriter

    endpoint_arg(via)
    _check_mode(mode)
    check_source(source)
    if count is None and seconds is None and as_json:
        fail("--json needs --count or --seconds (or the summary would never be printed)")
    stop = _stop_on_signals()
    writer = JsonlWriter(trace, "deliveries") if trace else None
    dead = open(dead_letter, "a", buffering=1) if dead_letter else None  # noqa: SIM115
    subscriber: Subscriber | None = None

    def on_delivery(d) -> None:  # noqa: ANN001 - a pubsub.subscriber.Delivery
        if writer:
            writer.write({"run": run, "source": source, "mode": mode, "topic": topic,
                          "publisher": d.env.publisher, "subscriber": subscriber.id, "seq": d.env.seq,
                          "sent_ns": d.env.sent_ns, "recv_ns": d.recv_ns, "latency_ms": d.latency_ms,
                          "recovered": d.recovered})
        if print_messages:
            print(f"{d.env.publisher} #{d.env.seq} {d.latency_ms:.3f} ms"
                  f"{' (recovered)' if d.recovered else ''}", flush=True)

    def on_dead_letter(row: dict) -> None:
        if dead:
            dead.write(json.dumps(row) + "\n")

    try:
        subscriber = Subscriber(via, topic, host=host, history=history, reliable=reliable, heartbeat=heartbeat,
                                on_delivery=on_delivery, on_dead_letter=on_dead_letter, mode=mode,
                                setup=curve_setup(curve, "subscriber"))
        stats = subscriber.run(count=count, duration=seconds, stop=stop.is_set)
    finally:
        if subscriber is not None:
            subscriber.close()
        if writer:
            writer.close()
        if dead:
            dead.close()
    lat = np.asarray(stats.latencies_ms)
    summary = {"topic": topic, "received": stats.received, "duplicates": stats.duplicates, "gaps": stats.gaps,
               "publishers": len(stats.publishers), "recovered": stats.recovered,
               "latency_ms": {"p50": round(float(np.percentile(lat, 50)), 3) if lat.size else None,
                              "p99": round(float(np.percentile(lat, 99)), 3) if lat.size else None}}
    for why in stats.unmatched.values():
        typer.echo(f"chordpub: {why}", err=True)
    emit(summary, as_json, lambda o: (
        f"{o['topic']}: received {o['received']} from {o['publishers']} publishers "
        f"({o['recovered']} recovered), {o['duplicates']} duplicates, {o['gaps']} lost; "
        f"latency p50 {o['latency_ms']['p50']} ms p99 {o['latency_ms']['p99']} ms"))
    if count is not None and stats.received < count and not stop.is_set():
        sys.exit(1)


@topic_app.command("info")
@clean_errors
def topic_info(topic: str = typer.Argument(..., help="The topic."),
               via: str = typer.Option(..., help="Any node of the ring, H:P."),
               curve: Path = typer.Option(None, help=CURVE_HELP),
               as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Show the topic's id, owner node, publishers (with strength and history) and subscriber count."""
    from pubsub.directory import Directory

    with dht_client(via, curve) as client:
        info = Directory(client).info(topic)

    def human(o: dict) -> str:
        lines = [f"topic {o['topic']} (id {o['key_id']}) owned by {o['owner']['endpoint']}",
                 f"{len(o['publishers'])} publishers, {o['subscribers']} subscribers"]
        lines += [f"  {p['id']}  strength {p['strength']}  history {p['history']}" for p in o["publishers"]]
        return "\n".join(lines)

    emit(info, as_json, human)
