"""What one experiment run measured, read back from its run directory (no Spark: the quick summary
`mininet run` prints; `chordpub analyze` and `study report` are the Spark jobs), and which topics
each of its processes took."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from traces.writer import read_jsonl


def topics_for(index: int, per: int, topics: int) -> list[str]:
    """The topics of the index-th publisher (or subscriber): `per` consecutive ones of `topics`, each
    process starting one further on, so that every topic is covered while there are processes."""
    return [f"topic{(index + i) % topics}" for i in range(min(per, topics))]


def subscribers_per_topic(subs: int, per: int, topics: int) -> dict[str, int]:
    """How many subscriber processes follow each topic (every topic named, followed or not)."""
    out = {f"topic{t}": 0 for t in range(topics)}
    for j in range(subs):
        for topic in topics_for(j, per, topics):
            out[topic] += 1
    return out


def summarize(run_dir: Path) -> dict:
    """Deliveries, their latency p50/p99/min (in all and per topic), lookups and their mean hops, from
    RUN's JSON Lines."""
    latencies: dict[str, list[float]] = {}
    lookups_hops, modes = [], set()
    for f in sorted((run_dir / "deliveries").glob("*.jsonl")):
        for row in read_jsonl(f):
            latencies.setdefault(str(row["topic"]), []).append(float(row["latency_ms"]))
            modes.add(row.get("mode"))
    for f in sorted((run_dir / "lookups").glob("*.jsonl")):
        lookups_hops += [int(r["hops"]) for r in read_jsonl(f) if r.get("ok", True)]
    sent: dict[str, int] = {}
    for f in (run_dir / "logs").glob("*.sent.jsonl"):
        for row in read_jsonl(f):
            sent[str(row["topic"])] = sent.get(str(row["topic"]), 0) + 1
    every = np.asarray([x for v in latencies.values() for x in v])
    return {
        "sent": sum(sent.values()), "deliveries": int(every.size), "modes": sorted(m for m in modes if m),
        "latency_ms": _latency(every),
        "topics": {t: {"sent": sent.get(t, 0), "deliveries": len(latencies.get(t, [])),
                       "latency_ms": _latency(np.asarray(latencies.get(t, [])))}
                   for t in sorted(set(sent) | set(latencies))},
        "lookups": len(lookups_hops),
        "mean_hops": _round(np.mean(lookups_hops)) if lookups_hops else None,
    }


def _latency(lat: np.ndarray) -> dict:
    return {"min": _round(lat.min()) if lat.size else None,
            "p50": _round(np.percentile(lat, 50)) if lat.size else None,
            "p99": _round(np.percentile(lat, 99)) if lat.size else None}


def _round(x: float) -> float:
    return round(float(x), 3)


def tail(path: Path, lines: int = 4) -> str:
    """The last lines of a process's log, on one line (for an error message)."""
    if not path.exists():
        return "no output"
    return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:]) or "no output"
