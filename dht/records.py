"""Leased records: a key whose value is a set of named fields, each a lease, plus watchers.

The topic registry (pubsub/directory.py) is built on this without the ring knowing what a
publisher is: a publisher is a field that its heartbeat keeps renewing, a subscriber's notify
endpoint is a watcher, and when a field appears, changes or expires the owner tells every
watcher. Expiry times are wall-clock seconds, because a record moves between nodes (replica to
owner) and must keep its deadlines; the ring assumes loosely synchronized clocks, and leases are
seconds long. Pure: time is a parameter, bytes in and out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgpack

MAX_FIELDS = 4096
MAX_TTL = 86_400.0


@dataclass
class Record:
    fields: dict[str, tuple[bytes, float]] = field(default_factory=dict)  # name -> (value, expires)
    watchers: dict[str, float] = field(default_factory=dict)  # endpoint -> expires

    def encode(self) -> bytes:
        return msgpack.packb({"f": {k: [v, e] for k, (v, e) in self.fields.items()}, "w": self.watchers},
                             use_bin_type=True)

    @classmethod
    def decode(cls, raw: bytes | None) -> Record:
        """The record stored in `raw` (an empty one for None); ValueError on anything else."""
        if raw is None:
            return cls()
        try:
            body = msgpack.unpackb(raw, raw=False, strict_map_key=True)
            fields = {str(k): (bytes(v), float(e)) for k, (v, e) in body["f"].items()}
            watchers = {str(k): float(e) for k, e in body["w"].items()}
        except Exception as exc:  # any shape error means "not a record"
            raise ValueError(f"not a record: {type(exc).__name__}") from None
        return cls(fields, watchers)

    def set_field(self, name: str, value: bytes, ttl: float, now: float) -> bool:
        """Create or renew a field. Returns True when watchers should hear of it (new or changed)."""
        if name not in self.fields and len(self.fields) >= MAX_FIELDS:
            raise ValueError(f"a record holds at most {MAX_FIELDS} fields")
        old = self.fields.get(name)
        self.fields[name] = (value, now + min(ttl, MAX_TTL))
        return old is None or old[0] != value

    def del_field(self, name: str) -> bool:
        return self.fields.pop(name, None) is not None

    def watch(self, endpoint: str, ttl: float, now: float) -> None:
        self.watchers[endpoint] = now + min(ttl, MAX_TTL)

    def expire(self, now: float) -> bool:
        """Drop expired fields and watchers. Returns True when a field went (watchers must hear)."""
        gone = [k for k, (_, e) in self.fields.items() if e <= now]
        for k in gone:
            del self.fields[k]
        for w in [w for w, e in self.watchers.items() if e <= now]:
            del self.watchers[w]
        return bool(gone)

    def view(self, now: float) -> dict[str, bytes]:
        """The live fields' values."""
        return {k: v for k, (v, e) in self.fields.items() if e > now}

    def live_watchers(self, now: float) -> list[str]:
        return [w for w, e in self.watchers.items() if e > now]

    def next_expiry(self) -> float | None:
        times = [e for _, e in self.fields.values()] + list(self.watchers.values())
        return min(times) if times else None
