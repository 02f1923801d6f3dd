"""`chordpub pub`, `chordpub sub`, `chordpub topic info`: the pub/sub face of the CLI, one Client each."""

from __future__ import annotations

import base64
import json
import queue
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import typer

from chordpub.cli_common import (
    CURVE_HELP,
    HOST_HELP,
    advertise_option,
    bind_option,
    check_source,
    clean_errors,
    connect_timeout_option,
    dht_client,
    emit,
    endpoint_arg,
    fail,
    listen_addresses,
    log_file_option,
    log_level_option,
    metrics_port_option,
    output_file,
    plural,
    setup_logging,
)

topic_app = typer.Typer(help="Inspect topics: their owner, publishers and subscribers.", no_args_is_help=True)

MODES = ("direct", "relay")
FORMATS = ("text", "json")


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        fail(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _stdin_lines(stop: threading.Event) -> Iterator[bytes]:
    """Lines of standard input without their newline, read on a thread of their own so that Ctrl-C
    stops us even while `tail -f` keeps the pipe open and silent."""
    lines: queue.Queue[bytes | None] = queue.Queue(maxsize=10_000)

    def read() -> None:
        for line in sys.stdin.buffer:
            lines.put(line.rstrip(b"\r\n"))
        lines.put(None)

    threading.Thread(target=read, name="stdin", daemon=True).start()
    while not stop.is_set():
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            continue
        if line is None:
            return
        yield line


def _synthetic(count: int, size: int, stop: threading.Event) -> Iterator[bytes]:
    i = 0
    while (count == 0 or i < count) and not stop.is_set():
        yield i.to_bytes(8, "big") + b"\x00" * max(size - 8, 0) if size >= 8 else b"\x00" * size
        i += 1


@clean_errors
def pub(
    via: str = typer.Option(..., help="Any node of the ring, H:P."),
    topic: list[str] = typer.Option(..., help="A topic to publish on; give it several times to send every "
                                    "message to each."),
    message: list[str] = typer.Option(None, help="Send this text (several times: several messages, in order)."),
    stdin: bool = typer.Option(False, "--stdin", help="Send each line of standard input as a message "
                               "(`tail -f app.log | chordpub pub ... --stdin`)."),
    file: Path = typer.Option(None, "--file", help="Send this file's bytes as one message (binary payloads).",
                              exists=True, dir_okay=False, readable=True),
    synthetic: bool = typer.Option(False, "--synthetic", help="Send synthetic load with the defaults (100 messages "
                                   "of 100 bytes at 10 per second); --count, --rate or --size imply it."),
    count: int = typer.Option(None, min=0, help="Synthetic load: messages to send (0: until Ctrl-C; default 100)."),
    rate: float = typer.Option(None, min=0.0, help="Messages per second (0: as fast as possible; default 10 for "
                               "synthetic load, unpaced for --message and --stdin)."),
    size: int = typer.Option(None, min=0, max=512 * 1024, help="Synthetic load: payload bytes (default 100)."),
    history: int = typer.Option(None, min=0, help="Messages kept for late joiners and repair "
                                "(default 0; 1000 with --reliable)."),
    strength: int = typer.Option(None, help="Ownership strength: the topic becomes exclusive."),
    reliable: bool = typer.Option(False, help="Keep a history deep enough for gap repair."),
    mode: str = typer.Option("direct", help="direct | relay."),
    linger: float = typer.Option(0.0, min=0.0, help="After the last message, keep serving history and "
                                 "repair this many seconds."),
    heartbeat: float = typer.Option(1.0, min=0.05, help="Seconds between registration renewals."),
    host: str = typer.Option("127.0.0.1", help=HOST_HELP + " Its PUB and service sockets listen there."),
    bind: str = bind_option(),
    advertise: str = advertise_option(),
    trace: Path = typer.Option(None, help="Write what was sent (JSON Lines: topic, publisher, seq, sent_ns)."),
    curve: Path = typer.Option(None, help=CURVE_HELP),
    connect_timeout: float = connect_timeout_option(),
    data_dir: Path = typer.Option(None, help="Keep every message here before it is sent, with the sequence "
                                  "numbering: restarted with the same directory, the publisher continues "
                                  "the sequence and repairs what it sent before."),
    name: str = typer.Option(None, help="This publisher's id on its topics (default: the one its --data-dir "
                             "holds, else its service endpoint)."),
    retain_messages: int = typer.Option(None, min=1, help="Keep at most this many messages that durable "
                                        "subscribers have not acknowledged (default 100000)."),
    retain_seconds: float = typer.Option(None, min=0.001, help="... for at most this many seconds (default 3600)."),
    retain_bytes: int = typer.Option(None, min=1, help="... and at most this many payload bytes (default 64 MiB)."),
    archive: bool = typer.Option(False, "--archive", help="The topic's owner node keeps a copy of the retained "
                                 "messages, replicated like every key: history and repair outlive this publisher."),
    log_level: str = log_level_option(),
    log_file: Path = log_file_option(),
    metrics_port: int = metrics_port_option(),
    ports: int = typer.Option(0, min=0, max=65534, help="Listen on BASE (history, repair and probes) and BASE+1 "
                              "(the PUB socket) instead of free ports: for a firewall or a container's port map."),
) -> None:
    """Publish on each TOPIC: the --message texts, the lines of --stdin, the bytes of --file, or (asked for
    with --synthetic, --count, --rate or --size) COUNT synthetic messages of SIZE bytes at RATE per second."""
    from chordpub import Client

    endpoint_arg(via)
    _check_mode(mode)
    output_file(trace, "--trace")
    setup_logging(log_level, log_file)
    given = sum((bool(message), stdin, file is not None))
    synthetic = synthetic or count is not None or size is not None or (rate is not None and not given)
    if given + synthetic != 1:
        fail("give one of --message, --stdin, --file, or synthetic load (--synthetic, --count, --rate, --size)")
    stop = _stop_on_signals()
    if message:
        payloads: Iterator[bytes] = (m.encode("utf-8") for m in message)
    elif stdin:
        payloads = _stdin_lines(stop)
    elif file is not None:
        payloads = iter([file.read_bytes()])
    else:
        payloads = _synthetic(100 if count is None else count, 100 if size is None else size, stop)
    period = 1.0 / rate if rate else (0.1 if rate is None and synthetic else 0.0)
    out = open(trace, "a", buffering=1) if trace else None  # noqa: SIM115
    sent = 0
    listen = listen_addresses(host, bind, advertise)
    with Client(via, host=listen.host, bind=listen.bind, advertise=listen.host, heartbeat=heartbeat, curve=curve,
                role="publisher", name=name, data_dir=data_dir, connect_timeout=connect_timeout,
                metrics_port=metrics_port, ports=ports) as client:
        _say_metrics(client)
        try:
            for t in topic:
                client.advertise(t, history=history or 0, reliable=reliable, strength=strength, mode=mode,
                                 retain_messages=retain_messages, retain_seconds=retain_seconds,
                                 retain_bytes=retain_bytes, archive=archive)
            t0 = time.monotonic()
            for i, payload in enumerate(payloads):
                for t in topic:
                    seq = client.publish(t, payload)
                    if out:
                        out.write(json.dumps({"topic": t, "publisher": client.id, "seq": seq,
                                              "sent_ns": time.time_ns()}) + "\n")
                sent += 1
                if stop.is_set():
                    break
                if period:
                    stop.wait(max(t0 + (i + 1) * period - time.monotonic(), 0))
            if linger and not stop.is_set():
                stop.wait(linger)
        finally:
            if out:
                out.close()
        topics = ", ".join(repr(t) for t in topic)
        typer.echo(f"published {plural(sent, 'message')} on {topics} as {client.id}", err=True)


def _say_metrics(client) -> None:  # noqa: ANN001 - a chordpub.Client
    if client.metrics_endpoint:
        typer.echo(f"metrics on http://{client.metrics_endpoint}/metrics", err=True)


def _printer(fmt: str, several: bool):  # noqa: ANN202 - (Message) -> None
    def show(m) -> None:  # noqa: ANN001 - a chordpub.Message
        if fmt == "json":
            row = {"topic": m.topic, "publisher": m.publisher, "seq": m.seq, "latency_ms": round(m.latency_ms, 3),
                   "recovered": m.recovered, "redelivered": m.redelivered}
            try:
                row["payload"] = m.payload.decode("utf-8")
            except UnicodeDecodeError:
                row["payload"] = base64.b64encode(m.payload).decode("ascii")
                row["base64"] = True
            line = json.dumps(row, ensure_ascii=False)
        else:
            line = (f"[{m.topic}] " if several else "") + m.text
        print(line, flush=True)

    return show


@clean_errors
def sub(
    via: str = typer.Option(..., help="Any node of the ring, H:P."),
    topic: list[str] = typer.Option(..., help="A topic to follow; give it several times to follow several."),
    count: int = typer.Option(None, min=1, help="Stop after this many messages in all."),
    seconds: float = typer.Option(None, min=0.0, help="Stop after this many seconds."),
    history: int = typer.Option(0, min=0, help="On joining, ask each publisher for its last K messages. A "
                                "publisher keeping fewer is not matched (and named), unless --history-up-to."),
    history_up_to: bool = typer.Option(False, "--history-up-to", help="With --history: take what each publisher "
                                       "keeps of the K, however few, instead of not matching it."),
    reliable: bool = typer.Option(False, help="In order, no duplicates, gaps repaired from history."),
    mode: str = typer.Option("direct", help="direct | relay."),
    heartbeat: float = typer.Option(1.0, min=0.05, help="Seconds between lease renewals."),
    host: str = typer.Option("127.0.0.1", help=HOST_HELP + " Its service socket listens there."),
    bind: str = bind_option(),
    advertise: str = advertise_option(),
    trace: Path = typer.Option(None, help="Append deliveries here (JSON Lines, the trace schema)."),
    dead_letter: Path = typer.Option(None, help="Append what reliable mode could not repair (JSON Lines)."),
    run: str = typer.Option("live", help="Run name written in trace rows."),
    source: str = typer.Option("live", help="Source written in trace rows: live, or mininet for `mininet run`."),
    print_messages: bool = typer.Option(False, "--print", help="Print each message's payload on stdout."),
    fmt: str = typer.Option("text", "--format", help="With --print: text (the payload; prefixed by [topic] when "
                            "following several) | json (topic, publisher, seq, latency_ms, recovered, payload; "
                            "base64 with \"base64\": true when not UTF-8)."),
    as_json: bool = typer.Option(False, "--json", help="The summary at the end as one JSON object, on stdout (on "
                                 "stderr with --print: stdout then carries the messages alone)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary at the end (errors still go to stderr)."),
    curve: Path = typer.Option(None, help=CURVE_HELP),
    connect_timeout: float = connect_timeout_option(),
    durable: str = typer.Option(None, help="A durable subscription of this name (reliable): its position per "
                                "publisher is committed to --data-dir after each message is handled, and a "
                                "restart with the same name and directory resumes after it."),
    data_dir: Path = typer.Option(None, help="Where a durable subscription keeps its positions and dead "
                                  "letters (`chordpub dlq show DIR`); one subscriber name per directory."),
    log_level: str = log_level_option(),
    log_file: Path = log_file_option(),
    metrics_port: int = metrics_port_option(),
    ports: int = typer.Option(0, min=0, max=65534, help="Listen on BASE (history, repair and probes) and BASE+1 "
                              "(the PUB socket) instead of free ports: for a firewall or a container's port map."),
) -> None:
    """Receive every TOPIC from all of its publishers; a summary per topic at the end. Stdout carries
    only the data asked for: the messages with --print, the JSON summary with --json (alone);
    a summary in words, or one that would share stdout with messages, goes to stderr; --quiet: none."""
    from chordpub import Client

    endpoint_arg(via)
    _check_mode(mode)
    check_source(source)
    setup_logging(log_level, log_file)
    if (durable is None) != (data_dir is None):
        fail("--durable and --data-dir go together")
    if fmt not in FORMATS:
        fail(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if count is None and seconds is None and as_json:
        fail("--json needs --count or --seconds (or the summary would never be printed)")
    if len(set(topic)) != len(topic):
        fail("a --topic is given twice")
    output_file(trace, "--trace")
    output_file(dead_letter, "--dead-letter")
    stop = _stop_on_signals()
    dead = open(dead_letter, "a", buffering=1) if dead_letter else None  # noqa: SIM115
    received = [0]
    enough = threading.Event()
    show = _printer(fmt, len(topic) > 1) if print_messages else None

    def on_message(m) -> None:  # noqa: ANN001 - a chordpub.Message
        if enough.is_set():
            return
        if show is not None:
            try:
                show(m)
            except BrokenPipeError:  # `| head -1`: the reader has gone
                stop.set()
        received[0] += 1
        if count is not None and received[0] >= count:
            enough.set()

    def on_dead_letter(letter) -> None:  # noqa: ANN001 - a chordpub.DeadLetter
        if dead:
            dead.write(json.dumps(letter.to_dict()) + "\n")

    deadline = None if seconds is None else time.monotonic() + seconds
    try:
        listen = listen_addresses(host, bind, advertise)
        with Client(via, host=listen.host, bind=listen.bind, advertise=listen.host, heartbeat=heartbeat, curve=curve,
                    role="subscriber", trace=trace, trace_run=run,
                    trace_source=source, on_dead_letter=on_dead_letter, name=durable, data_dir=data_dir,
                    connect_timeout=connect_timeout, metrics_port=metrics_port, ports=ports) as client:
            _say_metrics(client)
            subs = [client.subscribe(t, history=history, reliable=reliable, mode=mode, callback=on_message,
                                     durable=durable, history_policy="up_to" if history_up_to else "at_least")
                    for t in topic]
            while not (stop.is_set() or enough.is_set()):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                stop.wait(0.2 if left is None else min(left, 0.2))
            summaries = [s.summary() for s in subs]
            unmatched = [why for s in subs for why in s.unmatched.values()]
            warnings = [w for s in subs for w in s.warnings]  # each said on stderr once already, as it came
            for s in subs:
                s.unsubscribe()
    finally:
        if dead:
            dead.close()
    total = _totals(summaries, subs) | {"warnings": warnings}
    if not quiet:
        summary = json.dumps(total) if as_json else _human_summary(total)
        typer.echo(summary, err=print_messages or not as_json)
    if stop.is_set():
        return
    if received[0] == 0:
        fail(f"received nothing on {', '.join(repr(t) for t in topic)} "
             + (f"in {seconds:g}s" if count is None or (deadline and time.monotonic() >= deadline) else "")
             + f" ({plural(total['publishers'], 'publisher')} delivered from"
             + (f"; {plural(len(unmatched), 'publisher')} not matched, as said above"
                + (": --history-up-to takes what a publisher keeps" if history and not history_up_to else "")
                if unmatched else "") + ")", code=1)
    if count is not None and received[0] < count:
        fail(f"received {received[0]} of the {plural(count, 'message')} asked for", code=1)


def _totals(summaries: list[dict], subs: list) -> dict:
    """The --json object: the figures of every topic together, and each topic's under "topics"."""
    from pubsub.stats import LatencyHistogram

    latency = LatencyHistogram()
    for s in subs:
        latency.merge(s.stats.latency)
    p50, p99 = latency.quantile(0.5), latency.quantile(0.99)
    total = {k: sum(s[k] for s in summaries)
             for k in ("expected", "received", "lost", "duplicates", "gaps", "recovered", "dropped", "redelivered")}
    total["publishers"] = len(set().union(*(s.stats.publishers for s in subs)))
    total["latency_ms"] = {"p50": None if p50 is None else round(p50, 3), "p99": None if p99 is None else round(p99, 3)}
    total["topics"] = summaries
    return total


def _human_summary(o: dict) -> str:
    def line(s: dict) -> str:
        lat = s["latency_ms"]
        latency = "no latency (nothing received)" if lat["p50"] is None else (
            f"latency p50 {lat['p50']} ms p99 {lat['p99']} ms")
        return (f"{s['topic']}: received {s['received']} of {s['expected']} expected from "
                f"{plural(s['publishers'], 'publisher')} ({s['recovered']} recovered), {s['lost']} lost, "
                f"{plural(s['duplicates'], 'duplicate')}"
                + (f", {s['dropped']} dropped (not taken in time)" if s.get("dropped") else "")
                + (f", {s['redelivered']} redelivered after a restart" if s.get("redelivered") else "")
                + f"; {latency}")

    return "\n".join(line(s) for s in o["topics"])


@topic_app.command("info")
@clean_errors
def topic_info(topic: str = typer.Argument(..., help="The topic."),
               via: str = typer.Option(..., help="Any node of the ring, H:P."),
               curve: Path = typer.Option(None, help=CURVE_HELP),
               connect_timeout: float = connect_timeout_option(),
               as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Show the topic's id, owner node, publishers (with strength and history) and subscriber count."""
    from pubsub.directory import topic_info as read_info

    with dht_client(via, curve, connect_timeout) as client:
        info = read_info(client, topic)

    def human(o: dict) -> str:
        lines = [f"topic {o['topic']} (id {o['key_id']}) owned by {o['owner']['endpoint']}",
                 f"{plural(len(o['publishers']), 'publisher')}, {plural(o['subscribers'], 'subscriber')}"]
        for p in o["publishers"]:
            retain = p.get("retain") or {}
            lines.append(f"  {p['id']}  strength {'none' if p['strength'] is None else p['strength']}  "
                         f"history {p['history']}  retain {retain.get('messages')} messages / "
                         f"{retain.get('seconds')} s / {retain.get('bytes')} bytes"
                         + ("  archived by the owner" if p.get("archive") else ""))
        return "\n".join(lines)

    emit(info, as_json, human)

