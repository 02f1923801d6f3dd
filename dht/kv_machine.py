"""What a consensus group agrees on: versioned keys and named elections. Pure: no sockets, no clocks.

Every member of a group applies the same committed commands in the same order (dht/raft.py), so
every member holds the same state after each log index, and a command's result is decided once, at
its index. The commands:
- keys: `put` (compare-and-set with `if`: 0 = the key must be absent, v = its version must be v),
  `delete` (the same `if`), `get`. A key's version is the log index of its last write, so versions
  only grow, and a key deleted and written again never repeats one (etcd's mod_revision);
- elections: `campaign` grants a free name to a candidate, whose `epoch` is the index of that grant
  (a fencing token: every later grant of any name has a higher one); the holder's `campaign` again
  renews it, and tells anyone else who holds it; `resign` frees it; `expire` frees it when its lease
  ran out without a renewal (the group's leader proposes it, dht/consensus_group.py: only the leader
  keeps lease time, as etcd's lessor does); `who` reads the holder through the log.
  A campaign may carry a `strength` (an exclusive topic's publishers, pubsub/exclusive.py): a stronger
  candidate than the holder *claims* the name. The holder's renewals are refused from then on, so it
  stops acting at once, and its lease runs out as any unrenewed lease does; the `expire` (or `resign`)
  that frees the name grants it to the claimant in the same step, a new epoch. So a stronger
  candidate takes over within one lease, and the weaker never acts past its own lease.
A command may carry its client's `(client, seq)`: a command retried after a lost answer is then
answered from the session table (Raft thesis §6.3) instead of applied twice; the table keeps the
last answer of at most SESSIONS clients.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import msgpack

MAX_KEY_CHARS = 256
MAX_VALUE_BYTES = 64 * 1024
MAX_KEYS = 100_000  # keys one group holds; a put of a new key beyond is refused
MAX_STATE_BYTES = 64 * 1024 * 1024  # keys and values one group holds, in bytes: a put beyond is refused
MAX_ELECTIONS = 100_000  # names held at once in one group; a campaign for a new name beyond is refused
SESSIONS = 10_000  # clients whose last answer a group remembers (retries of older ones are applied again)
OPS = ("put", "delete", "get", "campaign", "resign", "expire", "who")
READS = ("get", "who")


class CommandError(ValueError):
    """A command that is not well formed: refused before it is proposed."""


@dataclass
class Held:
    value: bytes
    version: int


@dataclass
class Holder:
    candidate: str
    epoch: int  # the index of the grant
    lease_ms: int
    renewed: int  # the index of the last grant or renewal: an expiry proposed before a renewal does nothing
    strength: int | None = None  # the holder's, when it campaigned with one
    claim: tuple[str, int, int] | None = None  # a stronger candidate waiting: (candidate, strength, lease_ms)


def check_command(cmd: object) -> dict:
    """`cmd` as a well-formed command, or CommandError saying what is wrong (nothing is applied)."""
    if not isinstance(cmd, dict) or cmd.get("op") not in OPS:
        raise CommandError(f"a command is a map with op one of {', '.join(OPS)}")
    op = cmd["op"]
    if op in ("put", "delete", "get"):
        check_text(cmd.get("key"), "key")
        if op != "get" and cmd.get("if") is not None and not _uint(cmd["if"]):
            raise CommandError("if_version is an integer >= 0")
        if op == "put" and (not isinstance(cmd.get("value"), bytes) or len(cmd["value"]) > MAX_VALUE_BYTES):
            raise CommandError(f"a value is bytes, at most {MAX_VALUE_BYTES}")
    else:
        check_text(cmd.get("name"), "election name")
        if op in ("campaign", "resign"):
            check_text(cmd.get("candidate"), "candidate")
        if op == "campaign" and (not _uint(cmd.get("lease_ms")) or cmd["lease_ms"] < 1):
            raise CommandError("a lease is a positive number of milliseconds")
        strength = cmd.get("strength")
        if op == "campaign" and strength is not None and (isinstance(strength, bool) or not isinstance(strength, int)
                                                          or abs(strength) >= 2 ** 63):
            raise CommandError("a strength is an integer")
        if op == "resign" and not _uint(cmd.get("epoch")):
            raise CommandError("an epoch is an integer >= 0")
        if op == "expire" and not _uint(cmd.get("renewed")):
            raise CommandError("an expiry names the renewal it ends (an index >= 0)")
    session = cmd.get("session")
    if session is not None and not (isinstance(session, list | tuple) and len(session) == 2
                                    and isinstance(session[0], str) and _uint(session[1])):
        raise CommandError("a session is [client id, seq]")
    return cmd


def encode(cmd: dict) -> bytes:
    return msgpack.packb(check_command(cmd), use_bin_type=True)


def decode(data: bytes) -> dict:
    try:
        return check_command(msgpack.unpackb(data, raw=False))
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CommandError(f"not a command: {exc}") from None


def check_text(value: object, what: str) -> str:
    """A key, election name or candidate: 1..MAX_KEY_CHARS characters (CommandError, a ValueError)."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_KEY_CHARS:
        article = "an" if what[0] in "aeiou" else "a"
        raise CommandError(f"{article} {what} is 1..{MAX_KEY_CHARS} characters of text")
    return value


def _uint(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class KvMachine:
    """One group's keys and elections, as of the last index applied."""

    def __init__(self) -> None:
        self.keys: dict[str, Held] = {}
        self.holders: dict[str, Holder] = {}
        self.sessions: OrderedDict[str, tuple[int, dict]] = OrderedDict()  # client -> (seq, its answer)
        self.applied = 0
        self.bytes = 0  # of the keys and values held

    def snapshot(self) -> bytes:
        """The whole state as of `applied` (Raft §7: the log up to there can go)."""
        return msgpack.packb({
            "applied": self.applied,
            "keys": [[k, h.value, h.version] for k, h in self.keys.items()],
            "holders": [[n, h.candidate, h.epoch, h.lease_ms, h.renewed, h.strength, h.claim]
                        for n, h in self.holders.items()],
            "sessions": [[c, seq, answer] for c, (seq, answer) in self.sessions.items()]}, use_bin_type=True)

    @classmethod
    def restore(cls, data: bytes) -> KvMachine:
        """The state a `snapshot()` holds (written by a member of the same group: trusted as the log is)."""
        raw = msgpack.unpackb(data, raw=False)
        m = cls()
        m.applied = raw["applied"]
        for k, value, version in raw["keys"]:
            m.keys[k] = Held(value, version)
            m.bytes += len(k) + len(value)
        for name, candidate, epoch, lease_ms, renewed, strength, claim in raw["holders"]:
            m.holders[name] = Holder(candidate, epoch, lease_ms, renewed, strength, tuple(claim) if claim else None)
        for client, seq, answer in raw["sessions"]:
            m.sessions[client] = (seq, answer)
        return m

    def apply(self, index: int, data: bytes) -> dict | None:
        """Apply the command committed at `index` (empty data: a leader's no-op); its answer."""
        if index != self.applied + 1:
            raise ValueError(f"entries apply in order: {self.applied} then {index}")
        self.applied = index
        if not data:
            return None
        try:
            cmd = decode(data)
        except CommandError as exc:  # proposed by a member that checked it: never, but the log decides
            return {"ok": False, "error": str(exc)}
        session = cmd.get("session")
        if session is not None:
            client, seq = session
            seen = self.sessions.get(client)
            if seen is not None and seen[0] >= seq:
                return seen[1] if seen[0] == seq else {"ok": False, "error": "an older request of this client"}
        answer = getattr(self, "_" + cmd["op"])(index, cmd)
        if session is not None and cmd["op"] not in READS:  # a read asked again is read again: the
            # table remembers writes only, and never holds a value
            self.sessions[session[0]] = (session[1], answer)
            self.sessions.move_to_end(session[0])
            while len(self.sessions) > SESSIONS:
                self.sessions.popitem(last=False)
        return answer

    # -- keys -----------------------------------------------------------------------------------------
    def _found(self, key: str) -> int:
        held = self.keys.get(key)
        return held.version if held else 0

    def _put(self, index: int, cmd: dict) -> dict:
        key, want = cmd["key"], cmd.get("if")
        if want is not None and self._found(key) != want:  # a compare-and-set that finds another version
            return {"ok": False, "key": key, "version_found": self._found(key)}
        if key not in self.keys and len(self.keys) >= MAX_KEYS:
            return {"ok": False, "key": key, "error": f"this group holds {MAX_KEYS} keys already"}
        old = self.keys.get(key)
        grown = len(cmd["value"]) - (len(old.value) if old else -len(key))
        if self.bytes + grown > MAX_STATE_BYTES:
            return {"ok": False, "key": key, "error": f"this group holds {MAX_STATE_BYTES} bytes of keys already"}
        self.bytes += grown
        self.keys[key] = Held(cmd["value"], index)
        return {"ok": True, "key": key, "version": index}

    def _delete(self, index: int, cmd: dict) -> dict:
        key, want = cmd["key"], cmd.get("if")
        if want is not None and self._found(key) != want:
            return {"ok": False, "key": key, "version_found": self._found(key)}
        held = self.keys.pop(key, None)
        if held is not None:
            self.bytes -= len(key) + len(held.value)
        return {"ok": True, "key": key, "deleted": held is not None}

    def _get(self, index: int, cmd: dict) -> dict:
        held = self.keys.get(cmd["key"])
        return {"ok": True, "key": cmd["key"], "value": held.value if held else None,
                "version": held.version if held else 0}

    # -- elections ------------------------------------------------------------------------------------
    def _campaign(self, index: int, cmd: dict) -> dict:
        name, candidate, strength = cmd["name"], cmd["candidate"], cmd.get("strength")
        holder = self.holders.get(name)
        if holder is None and len(self.holders) >= MAX_ELECTIONS:
            return {"ok": False, "name": name, "error": f"this group holds {MAX_ELECTIONS} elections already"}
        if holder is None:
            holder = self.holders[name] = Holder(candidate, index, cmd["lease_ms"], index, strength)
        elif holder.candidate == candidate:
            if holder.claim is not None:  # a stronger one waits: no renewal, the lease runs out
                return self._answer(name, holder, ok=False)
            holder.renewed, holder.lease_ms, holder.strength = index, cmd["lease_ms"], strength
        elif strength is not None and (holder.strength is None or strength > holder.strength) and (
                holder.claim is None or strength > holder.claim[1] or holder.claim[0] == candidate):
            holder.claim = (candidate, strength, cmd["lease_ms"])
        return self._answer(name, holder, ok=holder.candidate == candidate)

    @staticmethod
    def _answer(name: str, holder: Holder, *, ok: bool) -> dict:
        return {"ok": ok, "name": name, "leader": holder.candidate, "epoch": holder.epoch,
                "lease_ms": holder.lease_ms, "renewed": holder.renewed,
                "claimed": holder.claim[0] if holder.claim else None}

    def _resign(self, index: int, cmd: dict) -> dict:
        holder = self.holders.get(cmd["name"])
        if holder is None or (holder.candidate, holder.epoch) != (cmd["candidate"], cmd["epoch"]):
            return {"ok": False, "name": cmd["name"]}
        return self._free(index, cmd["name"], holder)

    def _expire(self, index: int, cmd: dict) -> dict:
        holder = self.holders.get(cmd["name"])
        if holder is None or holder.renewed != cmd["renewed"]:  # renewed since the expiry was proposed
            return {"ok": False, "name": cmd["name"]}
        return self._free(index, cmd["name"], holder)

    def _free(self, index: int, name: str, holder: Holder) -> dict:
        """The name let go; a claimant waiting takes it at this index (its lease starts here)."""
        if holder.claim is None:
            del self.holders[name]
            return {"ok": True, "name": name}
        candidate, strength, lease_ms = holder.claim
        granted = self.holders[name] = Holder(candidate, index, lease_ms, index, strength)
        return {**self._answer(name, granted, ok=True), "granted": candidate}

    def _who(self, index: int, cmd: dict) -> dict:
        """`chordpub leader`'s answer, read through the log like `get`."""
        holder = self.holders.get(cmd["name"])
        return {"ok": True, "name": cmd["name"], "leader": holder.candidate if holder else None,
                "epoch": holder.epoch if holder else 0}
