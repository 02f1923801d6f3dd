"""`chordpub ring watch`: look at the ring again and again and show it as a live table.

Each look walks the ring by successor pointers (stepping over nodes that do not answer, as the nodes
themselves do), pings the nodes that were on the ring at the last look and are not any more, and
folds the result into a `dht.ringview.RingView`. On a terminal the table is redrawn in place (rich
Live); otherwise, and with --json, each look is printed after the last.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from dht.client import DhtClient, DhtError
from dht.ringcheck import evaluate, split_problems, walk
from dht.ringview import DEAD, DETACHED, LEFT, NEW, RingView, Row, by_process

STYLES = {NEW: "cyan", LEFT: "yellow", DEAD: "bold red", DETACHED: "magenta"}


def watch(client: DhtClient, endpoint: str, interval: float, seconds: float | None, as_json: bool) -> None:
    """Look every `interval` seconds until `seconds` have passed (0: look once) or Ctrl-C."""
    view = RingView()
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # a file or a pipe: no reason to cut the table at 80 columns
    live_table = console.is_terminal and not as_json and seconds != 0
    end = None if seconds is None else time.monotonic() + seconds
    live = Live(console=console, auto_refresh=False, transient=False) if live_table else None
    # Ctrl-C cuts a look short (pinging a gone node takes its timeout), but never rich's drawing, where an
    # interrupt can leave its lock held: then the loop ends after the frame. Plain flags, no Event: a
    # handler that takes a lock the interrupted code holds never returns (a watch that ignored Ctrl-C)
    asked = {"stop": False, "drawing": False}
    main = threading.current_thread() is threading.main_thread()

    def interrupted(*_: object) -> None:
        asked["stop"] = True
        if not asked["drawing"]:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, interrupted) if main else None
    try:
        if live is not None:
            live.start()
        while not asked["stop"]:
            started = time.monotonic()
            snapshot = look(client, endpoint, view, started)
            asked["drawing"] = True
            if as_json:
                print(json.dumps(snapshot), flush=True)
            elif live is not None:
                live.update(render(snapshot, interval), refresh=True)
            else:
                console.print(render(snapshot, interval if seconds != 0 else None))
            asked["drawing"] = False
            if asked["stop"] or (end is not None and time.monotonic() >= end):
                return
            time.sleep(max(0.0, interval - (time.monotonic() - started)))  # the pace; Ctrl-C ends it
    except KeyboardInterrupt:
        return
    except BrokenPipeError:  # `ring watch --json | head -1`: the reader has seen enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
        if live is not None:
            live.stop()


def look(client: DhtClient, endpoint: str, view: RingView, now: float) -> dict:
    """One look: walk from `endpoint`, or from the first node of the last look that answers."""
    silent: set[str] = set()
    infos: list[dict] = []
    problems: list[str] = []
    for start in dict.fromkeys([endpoint, *view.members]):
        try:
            infos, problems = walk(client, start, silent=silent)
            break
        except DhtError:
            silent.add(start)
    walked = {i["endpoint"] for i in infos}
    missing = [e for e in view.members if e not in walked and e not in silent]
    answering = {e for e in missing if client.ping(e)}
    silent.update(e for e in missing if e not in answering)
    rows = view.look(infos, silent, answering, now)
    problems = problems + split_problems(client, infos, silent)
    report = evaluate(infos, problems, int(infos[0].get("bits") or 64)) if infos else {
        "nodes": 0, "consistent": False, "problems": ["no node of the ring answers"]}
    return {"time": time.time(), "via": endpoint, "nodes": len(infos), "consistent": report["consistent"],
            "problems": report["problems"], "rows": [r.to_dict() for r in rows], "processes": by_process(rows),
            "events": [{"ago_s": round(now - t, 3), "event": e} for t, e in view.recent_events()]}


def render(snapshot: dict, interval: float | None) -> Group:
    """The table of one look; interval None for a single look."""
    state = Text("consistent", style="green") if snapshot["consistent"] else Text(
        f"healing ({len(snapshot['problems'])} problems)", style="yellow")
    head = Text.assemble(f"ring via {snapshot['via']}: {snapshot['nodes']} nodes, ", state,
                         f"; looked at {time.strftime('%H:%M:%S', time.localtime(snapshot['time']))}" +
                         ("" if interval is None else f", every {interval:g}s; Ctrl-C stops"))
    widest = max((len(r["endpoint"]) for r in snapshot["rows"]), default=4)
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name, justify in (("node", "left"), ("id", "right"), ("arc", "right"), ("keys", "right"),
                          ("topics", "right"), ("successors", "right"), ("lookups/s", "right"),
                          ("status", "left")):
        table.add_column(name, justify=justify, no_wrap=True, min_width=widest if name == "node" else None)
    for row in snapshot["rows"]:
        table.add_row(*cells(Row(**row)))
    parts = [head, table]
    processes = snapshot.get("processes") or []
    if any(p["positions"] > 1 for p in processes):  # virtual nodes: what each process carries in all
        per = Table(box=None, pad_edge=False, header_style="bold")
        for name in ("process", "positions", "arc", "keys", "topics"):
            per.add_column(name, justify="left" if name == "process" else "right", no_wrap=True)
        for p in processes:
            per.add_row(p["process"], str(p["positions"]), f"{p['arc']:.1%}", str(p["keys"]), str(p["records"]))
        parts.append(per)
    if snapshot["events"]:
        parts.append(Text("recent: " + "; ".join(f"{e['event']} {e['ago_s']:.0f}s ago"
                                                  for e in reversed(snapshot["events"][-4:])), style="dim"))
    return Group(*parts)


def cells(row: Row) -> list[str | Text]:
    status = Text(row.status, style=STYLES.get(row.status, "green"))
    if row.arc is None:
        return [row.endpoint, str(row.id), "", "", "", "", "", status]
    health = f"{row.successors_ok}/{row.successors_want}"
    successors = Text(health, style="green" if row.successors_ok == row.successors_want else "yellow")
    if row.successors_gone:
        successors.append(f" ({row.successors_gone} gone)", style="red")
    rate = "" if row.lookups_per_s is None else f"{row.lookups_per_s:.1f}"
    return [row.endpoint, str(row.id), f"{row.arc:.1%}", str(row.keys), str(row.records), successors, rate,
            status]
