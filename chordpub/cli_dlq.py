"""`chordpub dlq show DIR` and `chordpub dlq replay DIR --via H:P`: a client's dead-letter queue."""

from __future__ import annotations

import base64
from pathlib import Path

import typer

from chordpub.cli_common import CURVE_HELP, clean_errors, emit, endpoint_arg, plural

dlq_app = typer.Typer(help="A client's dead-letter queue (in its --data-dir): what a subscription did not "
                      "deliver, and why.", no_args_is_help=True)


def _open(directory: Path):  # noqa: ANN202 - a pubsub.durable.DataDir
    from pubsub.durable import DataDir

    return DataDir(directory, create=False)


def _letter_json(row: dict) -> dict:
    out = {k: row[k] for k in ("id", "topic", "publisher", "subscriber", "from_seq", "to_seq", "reason", "ts",
                               "replayed")}
    out["held"] = row["payload"] is not None
    if row["payload"] is not None:
        out["sent_ns"] = row["sent_ns"]
        out["payload_b64"] = base64.b64encode(row["payload"]).decode("ascii")
    return out


@dlq_app.command("show")
@clean_errors
def show(directory: Path = typer.Argument(..., help="The client's --data-dir."),
         pending: bool = typer.Option(False, "--pending", help="Only what has not been replayed."),
         as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """List the dead letters: each message the queue holds (topic, publisher, seq, reason), or the
    range of those known only by their sequence numbers."""
    data = _open(directory)
    try:
        rows = data.dead_letters(pending_only=pending)
        name = data.name
    finally:
        data.close()
    held = sum(1 for r in rows if r["payload"] is not None)
    out = {"client": name, "letters": [_letter_json(r) for r in rows], "held": held,
           "ranges": len(rows) - held, "messages": sum(r["to_seq"] - r["from_seq"] + 1 for r in rows)}

    def human(o: dict) -> str:
        lines = [f"dead letters of {o['client']}: {len(o['letters'])} ({plural(o['held'], 'message')} held, "
                 f"{o['ranges']} ranges known by number only)"]
        for r in o["letters"]:
            seqs = f"seq {r['from_seq']}" if r["from_seq"] == r["to_seq"] else f"seq {r['from_seq']}..{r['to_seq']}"
            state = "held" if r["held"] else "range"
            lines.append(f"  #{r['id']} {r['topic']} {r['publisher']} {seqs} [{state}"
                         + (", replayed" if r["replayed"] else "") + f"]: {r['reason']}")
        return "\n".join(lines)

    emit(out, as_json, human)


@dlq_app.command("replay")
@clean_errors
def replay(directory: Path = typer.Argument(..., help="The client's --data-dir."),
           via: str = typer.Option(..., help="Any node of the ring, H:P."),
           topic: str = typer.Option(None, help="Only the dead letters of this topic."),
           curve: Path = typer.Option(None, help=CURVE_HELP),
           as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Publish again, on its topic, each message the queue holds and has not replayed yet (a new
    publisher sends them, in the queue's order); mark them replayed. Ranges known only by number
    have nothing to send and are counted."""
    from chordpub import Client

    endpoint_arg(via)
    data = _open(directory)
    try:
        rows = [r for r in data.dead_letters(pending_only=True) if topic is None or r["topic"] == topic]
        held = [r for r in rows if r["payload"] is not None]
        if held:
            with Client(via, curve=curve, role="publisher") as client:
                for r in held:
                    client.publish(r["topic"], r["payload"])
                    data.mark_replayed([r["id"]])
    finally:
        data.close()
    out = {"replayed": len(held), "ranges": len(rows) - len(held),
           "topics": sorted({r["topic"] for r in held})}
    emit(out, as_json, lambda o: f"replayed {plural(o['replayed'], 'message')} on "
         f"{', '.join(o['topics']) or 'no topic'}; {plural(o['ranges'], 'range')} without a message to send")
