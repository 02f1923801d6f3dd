"""What `chordpub ring watch` shows, and what it noticed between two looks at the ring.

Pure: each look is the list of node infos a walk of the ring gathered (dht/ringcheck.py), the
endpoints that did not answer, and the time. From them it keeps, in ring order (by id):

- each node's share of the circle, the arc (predecessor, node] of the ideal ring of the nodes
  walked: the keys it should own (SIGCOMM'01 §4.2, consistent hashing gives each node about 1/N);
- keys and records (topics) it owns, and the lookup steps it served per second since the last look;
- successor-list health: how many of the first min(r, N-1) entries are the nodes that truly follow
  it, and how many entries name nodes that are gone (the list heals one hop per stabilize round);
- what changed: a node that appears has joined; one that disappears has left when a neighbour was
  told so (the `leaving` message of a graceful departure, ToN'03 §V-D), and died otherwise.

Nodes that went stay listed, marked, for `keep` seconds; the events are a bounded list. A process
holding several ring positions (virtual nodes) has a row for each; `by_process` sums them per process.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, field

from dht.ids import distance, process_of

UP, NEW, LEFT, DEAD, DETACHED = "up", "new", "left", "dead", "detached"


@dataclass
class Row:
    """One line of the view. Figures are None for a node that is gone."""

    endpoint: str
    id: int
    status: str  # up | new (joined lately) | left | dead | detached (answers but is off the ring)
    arc: float | None = None
    keys: int | None = None
    records: int | None = None
    successors_ok: int | None = None
    successors_want: int | None = None
    successors_gone: int | None = None
    lookups_per_s: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Gone:
    id: int
    status: str
    since: float


@dataclass
class RingView:
    """The state carried from one look to the next; `look` returns the rows to show."""

    keep: float = 30.0  # seconds a node that went stays listed
    new_for: float = 10.0  # seconds a node that joined is marked new
    max_events: int = 12
    members: dict[str, int] = field(default_factory=dict)  # endpoint -> id, on the ring at the last look
    joined_at: dict[str, float] = field(default_factory=dict)
    gone: dict[str, Gone] = field(default_factory=dict)
    served: dict[str, tuple[float, int]] = field(default_factory=dict)  # endpoint -> (time, lookups served)
    events: deque = field(default_factory=deque)  # (time, text)
    looks: int = 0

    def look(self, infos: list[dict], silent: set[str], answering: set[str], now: float) -> list[Row]:
        """Fold in one walk. `silent`: endpoints that did not answer; `answering`: endpoints off the
        walk that still answer a ping (they are listed as detached, not gone)."""
        current = {i["endpoint"]: i for i in infos}
        told_left = {e for i in infos for e in i.get("neighbours_left", ())}
        for endpoint in current:
            if endpoint not in self.members:
                self.joined_at[endpoint] = now if self.looks else float("-inf")
                if self.looks:
                    self._event(now, f"{endpoint} joined")
                self.gone.pop(endpoint, None)
        for endpoint, nid in self.members.items():
            if endpoint in current or endpoint in answering:
                continue
            status = LEFT if endpoint in told_left else DEAD
            self.gone[endpoint] = Gone(nid, status, now)
            self._event(now, f"{endpoint} {'left' if status == LEFT else 'died'}")
        # a node that died before the first look, still named in a successor list
        named = {s["endpoint"]: s["id"] for i in infos for s in i["successors"]}
        for endpoint in silent:
            if endpoint not in current and endpoint not in self.gone and endpoint in named:
                self.gone[endpoint] = Gone(named[endpoint], DEAD, now)
                self._event(now, f"{endpoint} does not answer")
        for endpoint in [e for e, g in self.gone.items() if now - g.since > self.keep]:
            del self.gone[endpoint]
        detached = {e: nid for e, nid in self.members.items() if e in answering and e not in current}
        self.members = {e: i["id"] for e, i in current.items()} | detached
        for endpoint in [e for e in self.joined_at if e not in self.members]:
            del self.joined_at[endpoint]
        rows = self._rows(infos, now) + [Row(e, nid, DETACHED) for e, nid in detached.items()]
        rows += [Row(e, g.id, g.status) for e, g in self.gone.items()]
        self.served = {i["endpoint"]: (now, int(i.get("lookups_served") or 0)) for i in infos}
        self.looks += 1
        return sorted(rows, key=lambda r: r.id)

    def _rows(self, infos: list[dict], now: float) -> list[Row]:
        if not infos:
            return []
        bits = int(infos[0].get("bits") or 64)
        ring = sorted(infos, key=lambda i: i["id"])
        n = len(ring)
        gone = set(self.gone)
        rows = []
        for at, info in enumerate(ring):
            prev = ring[at - 1]["id"]
            arc = 1.0 if n == 1 else distance(prev, info["id"], bits) / (1 << bits)
            r = int(info.get("r") or len(info["successors"]) or 1)
            want = [ring[(at + j) % n]["id"] for j in range(1, min(r, n - 1) + 1)]
            have = [s["id"] for s in info["successors"][: len(want)]]
            ok = sum(1 for a, b in zip(want, have, strict=False) if a == b)
            rate = None
            before = self.served.get(info["endpoint"])
            if before is not None and now > before[0]:
                rate = max(0.0, (int(info.get("lookups_served") or 0) - before[1]) / (now - before[0]))
            status = NEW if now - self.joined_at.get(info["endpoint"], float("-inf")) < self.new_for else UP
            rows.append(Row(info["endpoint"], info["id"], status, arc, info.get("keys"), info.get("records"),
                            ok, len(want), sum(1 for s in info["successors"] if s["endpoint"] in gone),
                            rate))
        return rows

    def recent_events(self) -> list[tuple[float, str]]:
        return list(self.events)

    def _event(self, now: float, text: str) -> None:
        self.events.append((now, text))
        while len(self.events) > self.max_events:
            self.events.popleft()


def by_process(rows: list[Row]) -> list[dict]:
    """The live rows summed per process (its ring positions, "host:port/i", dht/ids.py): positions,
    share of the circle, keys and topics owned — what one real node carries (SIGCOMM'01 §6.2)."""
    out: dict[str, dict] = {}
    for row in rows:
        if row.arc is None:
            continue  # gone
        p = out.setdefault(process_of(row.endpoint), {"process": process_of(row.endpoint), "positions": 0,
                                                      "arc": 0.0, "keys": 0, "records": 0})
        p["positions"] += 1
        p["arc"] += row.arc
        p["keys"] += row.keys or 0
        p["records"] += row.records or 0
    return sorted(out.values(), key=lambda p: p["process"])
