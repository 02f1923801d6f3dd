"""`chordpub pub` and `chordpub topic info`: the publishing face of the CLI (`sub` is chordpub/cli_sub.py)."""

from __future__ import annotations

import json
import logging
import queue
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import typer

from chordpub.cli_common import (
    CURVE_HELP,
    HOST_HELP,
    acl_option,
    advertise_option,
    bind_option,
    check_acl,
    check_mode,
    clean_errors,
    client_ports_option,
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
    reload_on_sighup,
    say_metrics,
    setup_logging,
    stop_on_signals,
)

topic_app = typer.Typer(help="Inspect topics: their owner, publishers and subscribers.", no_args_is_help=True)

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
    strength: int = typer.Option(None, help="Ownership strength: the topic becomes exclusive. Its publishers "
                                 "campaign in an election (the stronger takes it within a lease); only the "
                                 "leader sends, its messages stamped with its epoch; subscribers drop an "
                                 "older epoch's messages after a newer one's."),
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
    principal: str = typer.Option("publisher", help="With --curve: the key this process presents (a role, or a "
                                  "principal made with `chordpub keys add NAME DIR`); a policy judges it by it."),
    acl: Path = acl_option(),
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
    ports: int = client_ports_option(),
    key: str = typer.Option(None, help="Every message's key: a key-ordered consumer group hands one key's messages "
                            "to one member at a time, in order."),
    keyed_lines: bool = typer.Option(False, "--keyed-lines", help="With --stdin: each line is KEY<TAB>PAYLOAD."),
    priority: int = typer.Option(4, help="Every message's priority, 0..9: where a consumer group's messages wait, "
                                 "higher goes first (lower ones keep a share)."),
    msg_id: str = typer.Option(None, "--msg-id", help="The message's id (one --message or --file): sent again "
                               "within the dedup window, it is not sent twice (with --data-dir, across a "
                               "crash and restart of this publisher)."),
    msg_id_field: str = typer.Option(None, "--msg-id-field", help="With --stdin: each line is a JSON object whose "
                                     "field F is its message id (the line is sent whole)."),
    dedup_window: float = typer.Option(120.0, min=0.001, help="Seconds a message id is remembered."),
) -> None:
    """Publish on each TOPIC: the --message texts, the lines of --stdin, the bytes of --file, or (asked for
    with --synthetic, --count, --rate or --size) COUNT synthetic messages of SIZE bytes at RATE per second."""
    from chordpub import Client

    endpoint_arg(via)
    check_acl(acl, curve)
    check_mode(mode)
    output_file(trace, "--trace")
    setup_logging(log_level, log_file)
    given = sum((bool(message), stdin, file is not None))
    synthetic = synthetic or count is not None or size is not None or (rate is not None and not given)
    if given + synthetic != 1:
        fail("give one of --message, --stdin, --file, or synthetic load (--synthetic, --count, --rate, --size)")
    if not 0 <= priority <= 9:
        fail(f"--priority must be in 0..9, got {priority}")
    if key is not None and not 0 < len(key) <= 256:
        fail("--key must be 1..256 characters")
    if keyed_lines and (not stdin or key is not None):
        fail("--keyed-lines goes with --stdin, and without --key")
    if msg_id is not None and not (len(message or []) == 1 or file is not None):
        fail("--msg-id names one message: give it with one --message or with --file")
    if msg_id is not None and not 0 < len(msg_id) <= 256:
        fail("--msg-id must be 1..256 characters")
    if msg_id_field is not None and (not stdin or keyed_lines):
        fail("--msg-id-field goes with --stdin (lines of JSON), and without --keyed-lines")
    stop = stop_on_signals()
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
    sent = duplicates = 0
    listen = listen_addresses(host, bind, advertise)
    with Client(via, host=listen.host, bind=listen.bind, advertise=listen.host, heartbeat=heartbeat, curve=curve,
                role=principal, acl=acl, name=name, data_dir=data_dir, connect_timeout=connect_timeout,
                metrics_port=metrics_port, ports=ports, dedup_window=dedup_window) as client:
        reload_on_sighup([client.publishing.policy] if client.publishing.policy else [])
        say_metrics(client)
        try:
            if len(topic) > 1 and strength is None and mode == "direct" and not archive:
                client.advertise_many(topic, history=history or 0, reliable=reliable, retain_messages=retain_messages,
                                      retain_seconds=retain_seconds, retain_bytes=retain_bytes)
            else:
                for t in topic:
                    client.advertise(t, history=history or 0, reliable=reliable, strength=strength, mode=mode,
                                     retain_messages=retain_messages, retain_seconds=retain_seconds,
                                     retain_bytes=retain_bytes, archive=archive)
            t0 = time.monotonic()
            for i, line in enumerate(payloads):
                payload, this_key = line, key
                if keyed_lines:
                    raw_key, tab, rest = line.partition(b"\t")
                    this_key = raw_key.decode("utf-8", errors="replace") if tab and raw_key else None
                    payload = rest if tab else line
                    if this_key is None:
                        logging.getLogger("chordpub.pub").warning("line %d has no KEY<TAB>: sent without a key",
                                                                  i + 1)
                this_id = msg_id if msg_id_field is None else _line_id(line, msg_id_field, i + 1)
                for t in topic:
                    seq = client.publish(t, payload, key=this_key, priority=priority, msg_id=this_id)
                    if getattr(seq, "duplicate", False):
                        duplicates += 1
                        continue
                    if out and seq:  # (0: not sent, another publisher leads this exclusive topic)
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
        again = f" ({plural(duplicates, 'duplicate')} of messages sent before, not sent again)" if duplicates else ""
        standby = sum(p.standby for p in client.publications.values())
        if standby:
            again += f" ({plural(standby, 'message')} not sent: another publisher led the exclusive topic)"
        typer.echo(f"published {plural(sent, 'message')} on {topics} as {client.id}{again}", err=True)


def _line_id(line: bytes, field: str, number: int) -> str | None:
    """The message id in a --stdin line's JSON field (None, and a warning, when it has none: the line
    is sent without one, at least once)."""
    try:
        found = json.loads(line).get(field)
    except (ValueError, AttributeError):
        found = None
    if isinstance(found, int | float) and not isinstance(found, bool):
        found = str(found)
    if not isinstance(found, str) or not 0 < len(found) <= 256:
        logging.getLogger("chordpub.pub").warning("line %d has no %r of 1..256 characters: sent without an id",
                                                  number, field)
        return None
    return found


@topic_app.command("info")
@clean_errors
def topic_info(topic: str = typer.Argument(..., help="The topic."),
               via: str = typer.Option(..., help="Any node of the ring, H:P."),
               curve: Path = typer.Option(None, help=CURVE_HELP),
               connect_timeout: float = connect_timeout_option(),
               as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Show the topic's id, owner node, publishers (with strength, history, retention, their msg-id
    dedup window: ids held, duplicates not sent, ids evicted by its bounds, and on an exclusive topic
    whether each leads, its epoch and the messages it did not send), subscriber count, and each
    consumer group: its members, backlog, in flight, delivered, redelivered and dead-lettered."""
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
            if p.get("exclusive"):
                x = p["exclusive"]
                lines.append(f"    {'leads' if x['leading'] else 'stands by'} (epoch {x['epoch']}), "
                             f"{x['standby']} messages not sent while another led")
            if p.get("dedup"):
                d = p["dedup"]
                lines.append(f"    dedup window {d['window_s']:g} s: {d['ids']} ids held (at most {d['max_ids']}, "
                             f"{d['max_bytes']} bytes), {d['duplicates']} duplicates not sent, "
                             f"{d['evicted']} ids evicted by the bounds before the window's end")
        for name, g in o.get("groups", {}).items():
            lines.append(f"group {name}: {plural(len(g['members']), 'member')}, backlog {g['backlog']}, in flight "
                         f"{g['in_flight']}, delivered {g['delivered']} ({g['redelivered']} redelivered), "
                         f"dead-lettered {g['dead_lettered']}")
            for mid, m in g["per_member"].items():
                lines.append(f"  {mid}  in flight {m['in_flight']}  delivered {m['delivered']}  acked {m['acked']}"
                             + ("" if m["joined"] else "  (not dispatched to by any publisher now)"))
        return "\n".join(lines)

    emit(info, as_json, human)

