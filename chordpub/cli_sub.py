"""`chordpub sub`: follow topics through one Client, plainly or as a member of a consumer group
(`--group`, with `--exec` a work queue from the shell)."""

from __future__ import annotations

import base64
import json
import threading
import time
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
    check_source,
    clean_errors,
    client_ports_option,
    connect_timeout_option,
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

FORMATS = ("text", "json")


def _printer(fmt: str, several: bool):  # noqa: ANN202 - (Message) -> None
    def show(m) -> None:  # noqa: ANN001 - a chordpub.Message
        if fmt == "json":
            row = {"topic": m.topic, "publisher": m.publisher, "seq": m.seq, "latency_ms": round(m.latency_ms, 3),
                   "recovered": m.recovered, "redelivered": m.redelivered}
            if m.group is not None:
                row.update(group=m.group, deliveries=m.deliveries, key=m.key, priority=m.priority)
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
    topic: list[str] = typer.Option(None, help="A topic or a pattern to follow (levels split on /; * or + is one "
                                    "level, a last > or # the rest); give it several times to follow several."),
    topics_file: Path = typer.Option(None, "--topics-file", help="Follow every topic of this file too, one a line "
                                     "(blank lines and # comments skipped): thousands are subscribed together.",
                                     exists=True, dir_okay=False, readable=True),
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
    principal: str = typer.Option("subscriber", help="With --curve: the key this process presents (a role, or a "
                                  "principal made with `chordpub keys add NAME DIR`); a policy judges it by it."),
    acl: Path = acl_option(),
    connect_timeout: float = connect_timeout_option(),
    durable: str = typer.Option(None, help="A durable subscription of this name (reliable): its position per "
                                "publisher is committed to --data-dir after each message is handled, and a "
                                "restart with the same name and directory resumes after it."),
    data_dir: Path = typer.Option(None, help="Where a durable subscription keeps its positions and dead "
                                  "letters (`chordpub dlq show DIR`); one subscriber name per directory."),
    log_level: str = log_level_option(),
    log_file: Path = log_file_option(),
    metrics_port: int = metrics_port_option(),
    ports: int = client_ports_option(),
    group: str = typer.Option(None, help="Join this consumer group: each message of the topic goes to one member "
                              "of the group (and to every plain subscriber); acknowledged, redelivered when a "
                              "member fails or dies."),
    prefetch: int = typer.Option(100, help="With --group: messages at most unacknowledged per publisher."),
    ack_wait: float = typer.Option(30.0, help="With --group: seconds before an unacknowledged message goes to "
                                   "another member."),
    max_deliver: int = typer.Option(5, help="With --group: deliveries before a message is dead-lettered "
                                    "(--data-dir or --dead-letter keep it)."),
    key_ordered: bool = typer.Option(False, "--key-ordered", help="With --group: one member at a time per key, "
                                     "in publish order."),
    durable_group: bool = typer.Option(False, "--durable-group", help="With --group: the group's backlog outlives "
                                       "every member and a publisher's restart (the publisher needs --data-dir)."),
    exec_cmd: str = typer.Option(None, "--exec", help="With --group: run this command once per message, the "
                                 "payload on its stdin (CHORDPUB_TOPIC, _SEQ, _PUBLISHER, _KEY, _DELIVERIES in "
                                 "its environment); exit status 0 acks the message, anything else naks it."),
) -> None:
    """Receive every TOPIC from all of its publishers; a summary per topic at the end. Stdout carries
    only the data asked for: the messages with --print, the JSON summary with --json (alone);
    a summary in words, or one that would share stdout with messages, goes to stderr; --quiet: none."""
    from chordpub import Client

    endpoint_arg(via)
    check_acl(acl, curve)
    check_mode(mode)
    check_source(source)
    setup_logging(log_level, log_file)
    if group is not None:
        work = _check_group(group, prefetch, ack_wait, max_deliver, exec_cmd, history, reliable, mode, durable, trace)
    elif exec_cmd or key_ordered or durable_group:
        fail("--exec, --key-ordered and --durable-group are for a consumer group: give --group")
    if (durable is None) != (data_dir is None) and group is None:
        fail("--durable and --data-dir go together")
    if fmt not in FORMATS:
        fail(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if count is None and seconds is None and as_json:
        fail("--json needs --count or --seconds (or the summary would never be printed)")
    topic = list(topic or [])
    if topics_file is not None:
        topic += [line.strip() for line in topics_file.read_text().splitlines()
                  if line.strip() and not line.lstrip().startswith("#")]
    if not topic:
        fail("give a --topic (or a --topics-file)")
    if len(set(topic)) != len(topic):
        fail("a --topic is given twice")
    output_file(trace, "--trace")
    output_file(dead_letter, "--dead-letter")
    stop = stop_on_signals()
    dead = open(dead_letter, "a", buffering=1) if dead_letter else None  # noqa: SIM115
    received = [0]
    enough = threading.Event()
    show = _printer(fmt, len(topic) > 1) if print_messages else None

    def on_message(m) -> None:  # noqa: ANN001 - a chordpub.Message
        if enough.is_set():
            if group is not None:
                m.nak()  # not ours to do any more: another member takes it now
            return
        if show is not None:
            try:
                show(m)
            except BrokenPipeError:  # `| head -1`: the reader has gone
                stop.set()
        if group is not None and exec_cmd:
            work(m)
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
                    role=principal, acl=acl, trace=trace, trace_run=run,
                    trace_source=source, on_dead_letter=on_dead_letter, name=durable, data_dir=data_dir,
                    connect_timeout=connect_timeout, metrics_port=metrics_port, ports=ports) as client:
            reload_on_sighup([client.publishing.policy] if client.publishing.policy else [])
            say_metrics(client)
            if group is not None:
                subs = [client.subscribe(t, group=group, prefetch=prefetch, ack_wait=ack_wait,
                                         max_deliver=max_deliver, ordering="key" if key_ordered else "none",
                                         durable=durable_group, callback=on_message) for t in topic]
            else:
                subs = client.subscribe_many(topic, history=history, reliable=reliable, mode=mode,
                                             callback=on_message, durable=durable,
                                             history_policy="up_to" if history_up_to else "at_least")
            while not (stop.is_set() or enough.is_set()):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                stop.wait(0.2 if left is None else min(left, 0.2))
            summaries = [s.summary() for s in subs]
            unmatched = [why for s in subs for why in s.unmatched.values()]
            warnings = [w for s in subs for w in s.warnings]  # each said on stderr once already, as it came
            total = _totals(summaries, subs) | {"warnings": warnings}
            if not quiet:  # said before leaving the ring: a SIGTERM's grace may end while we leave
                summary = json.dumps(total) if as_json else _human_summary(total)
                typer.echo(summary, err=print_messages or not as_json)
            for s in subs:
                s.unsubscribe()
    finally:
        if dead:
            dead.close()
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


def _check_group(group: str, prefetch: int, ack_wait: float, max_deliver: int, exec_cmd: str | None,
                 history: int, reliable: bool, mode: str, durable: str | None, trace: Path | None):  # noqa: ANN202 - (Message) -> None
    """--group's options checked (one line and exit 2 for each mistake); the --exec runner."""
    from pubsub.dispatch import MAX_PREFETCH, check_group

    try:
        check_group(group)
    except ValueError as exc:
        fail(f"--group: {exc}")
    if not 1 <= prefetch <= MAX_PREFETCH:
        fail(f"--prefetch must be in 1..{MAX_PREFETCH}, got {prefetch}")
    if not 0 < ack_wait <= 86_400:
        fail(f"--ack-wait must be seconds in (0, 86400], got {ack_wait:g}")
    if max_deliver < 1:
        fail(f"--max-deliver must be at least 1, got {max_deliver}")
    if history or reliable or durable or mode != "direct" or trace:
        fail("--group takes neither --history, --reliable, --durable, --mode relay nor --trace: a group's delivery "
             "is acknowledged already (--durable-group keeps its backlog; topic info and the metrics count it)")
    return _exec_runner(exec_cmd) if exec_cmd else None


def _exec_runner(command: str):  # noqa: ANN202 - (Message) -> None
    """Run `command` once per message with its payload on stdin; exit 0 acks, anything else naks."""
    import logging
    import os
    import shlex
    import shutil
    import subprocess

    try:
        argv = shlex.split(command)
    except ValueError as exc:
        fail(f"--exec: {exc}")
    if not argv or shutil.which(argv[0]) is None:
        fail(f"--exec: no such program: {argv[0] if argv else command!r}")
    log = logging.getLogger("chordpub.exec")

    def run(m) -> None:  # noqa: ANN001 - a chordpub.Message
        env = {**os.environ, "CHORDPUB_TOPIC": m.topic, "CHORDPUB_SEQ": str(m.seq), "CHORDPUB_PUBLISHER": m.publisher,
               "CHORDPUB_KEY": m.key or "", "CHORDPUB_DELIVERIES": str(m.deliveries)}
        code = subprocess.run(argv, input=m.payload, env=env, check=False).returncode
        if code != 0:
            log.warning("%s exited %d on seq %d of %s (delivery %d): sent again, or dead-lettered after "
                        "--max-deliver", argv[0], code, m.seq, m.publisher, m.deliveries)
            m.nak()

    return run


def _totals(summaries: list[dict], subs: list) -> dict:
    """The --json object: the figures of every topic together, and each topic's under "topics"."""
    from pubsub.stats import LatencyHistogram

    latency = LatencyHistogram()
    for s in subs:
        latency.merge(s.stats.latency)
    p50, p99 = latency.quantile(0.5), latency.quantile(0.99)
    total = {k: sum(s[k] for s in summaries)
             for k in ("expected", "received", "lost", "duplicates", "gaps", "recovered", "dropped", "redelivered")}
    total["fenced"] = sum(s.get("fenced", 0) for s in summaries)
    total["publishers"] = len(set().union(*(s.stats.publishers for s in subs)))
    total["latency_ms"] = {"p50": None if p50 is None else round(p50, 3), "p99": None if p99 is None else round(p99, 3)}
    total["topics"] = summaries
    return total


def _human_summary(o: dict) -> str:
    def line(s: dict) -> str:
        lat = s["latency_ms"]
        latency = "no latency (nothing received)" if lat["p50"] is None else (
            f"latency p50 {lat['p50']} ms p99 {lat['p99']} ms")
        if s.get("group") is not None:  # a member's share of the topic: no "expected" to speak of
            return (f"{s['topic']} (group {s['group']}): received {s['received']} as this member's share from "
                    f"{plural(s['publishers'], 'publisher')}"
                    + (f", {s['redelivered']} of them redelivered (a member died or did not ack in time)"
                       if s.get("redelivered") else "")
                    + f"; {s.get('acked', 0)} acked, {s.get('naked', 0)} naked, "
                    f"{s.get('dead_lettered', 0)} dead-lettered; {latency}")
        return (f"{s['topic']}: received {s['received']} of {s['expected']} expected from "
                f"{plural(s['publishers'], 'publisher')} ({s['recovered']} recovered), {s['lost']} lost, "
                f"{plural(s['duplicates'], 'duplicate')}"
                + (f", {s['dropped']} dropped (not taken in time)" if s.get("dropped") else "")
                + (f", {s['redelivered']} redelivered after a restart" if s.get("redelivered") else "")
                + (f", {s['fenced']} of an older epoch dropped (exclusive topic)" if s.get("fenced") else "")
                + f"; {latency}")

    return "\n".join(line(s) for s in o["topics"])
