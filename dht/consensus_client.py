"""A client of the ring's consensus groups (dht/consensus_service.py): linearizable keys with
compare-and-set, and the commands behind elections (dht/election.py).

A name (a key or an election) belongs to its arc's group (dht/arcs.py). The client finds the group
through the ring (the owner of the arc's last id and its successors announce their consensus
member), asks the member it last found leading, and follows the leader a member names. Every
command carries this client's session (id, seq): a command sent again after an answer was lost
(a timeout, a leader that changed) is answered from the group's session table, never applied twice
(Raft thesis §6.3). Commands of one client go one at a time.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time

from dht.arcs import arc_end, arc_of
from dht.client import DhtClient, DhtError
from dht.consensus_wire import endpoint_of
from dht.group_placement import SERVICE
from dht.ids import key_id, process_of
from dht.kv_machine import check_command, check_text
from dht.transport import RpcClient, SocketSetup

DEFAULT_TIMEOUT = 5.0  # seconds a command may take, elections and retries included
ASK_TIMEOUT = 1.0  # seconds one member is waited for before the next is asked
RETRY_PAUSE = 0.05  # seconds between asks while a group elects its leader
RELOOK_AFTER = 0.5  # seconds of members naming no leader before the ring is asked again who they are
MAX_CANDIDATES = 8  # members asked in turn when the leader is not known
DOWN_FOR = 0.5  # seconds a member that did not answer is not asked again (its group elects meanwhile)


class ConsensusError(RuntimeError):
    """The command was not confirmed: no leader with its group's majority answered in time."""


class NoMajority(ConsensusError):
    """No majority of the name's group could be reached (a partition, or too many members down)."""


class VersionMismatch(ConsensusError):
    """A compare-and-set found another version: nothing was written."""

    def __init__(self, key: str, version_found: int) -> None:
        super().__init__(f"{key!r} is at version {version_found}" if version_found else f"{key!r} does not exist")
        self.key, self.version_found = key, version_found


def check_name(name: object, what: str = "name") -> str:
    """`name` if it is a valid key, election name or candidate (the groups' own check), else ValueError."""
    return check_text(name, what)


class ConsensusClient:
    """Strongly consistent operations on the ring entered at `via` ("host:port")."""

    def __init__(self, via: str, *, timeout: float = DEFAULT_TIMEOUT, setup: SocketSetup | None = None,
                 client_id: str | None = None) -> None:
        if not timeout > 0:
            raise ValueError("timeout must be positive")
        self.dht = DhtClient(via, timeout=ASK_TIMEOUT, retries=0, setup=setup)
        # the members' sockets: a member whose process died fails its call at once, not after a timeout
        self.rpc = RpcClient(timeout=ASK_TIMEOUT, retries=0, setup=setup, watch=True)
        self._down: dict[str, float] = {}  # member endpoint -> until when it is not asked (it did not answer)
        self.timeout = timeout
        self.client_id = client_id or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._seq = 0
        self._lock = threading.Lock()
        self._leaders: dict[int, str] = {}  # arc -> the consensus endpoint found leading its group
        self._groups: dict[int, list[str]] = {}  # arc -> the members the ring named last (16 arcs at most)

    # -- keys ---------------------------------------------------------------------------------------
    def put(self, key: str, value: bytes | str, *, if_version: int | None = None,
            timeout: float | None = None) -> int:
        """Write `key`; its new version. `if_version`: only if the key is at that version now (0: only if
        it does not exist), else VersionMismatch and nothing is written."""
        data = value.encode() if isinstance(value, str) else value
        answer = self.command(key, {"op": "put", "key": check_name(key, "key"), "value": data,
                                    **_if(if_version)}, timeout)
        if not answer["ok"]:
            raise VersionMismatch(key, answer.get("version_found", 0)) if "version_found" in answer else \
                ConsensusError(answer.get("error", "refused"))
        return answer["version"]

    def get(self, key: str, *, timeout: float | None = None) -> tuple[bytes | None, int]:
        """`key`'s value and version, (None, 0) when it does not exist: read through the group's log, so
        never older than a write that completed before it began."""
        answer = self.command(key, {"op": "get", "key": check_name(key, "key")}, timeout)
        return answer["value"], answer["version"]

    def delete(self, key: str, *, if_version: int | None = None, timeout: float | None = None) -> bool:
        """Delete `key` (with `if_version`, only at that version, else VersionMismatch); whether it existed."""
        answer = self.command(key, {"op": "delete", "key": check_name(key, "key"), **_if(if_version)}, timeout)
        if not answer["ok"]:
            raise VersionMismatch(key, answer.get("version_found", 0))
        return answer["deleted"]

    # -- elections (dht/election.py) -----------------------------------------------------------------
    def campaign(self, name: str, candidate: str, lease: float, *, strength: int | None = None,
                 timeout: float | None = None) -> dict:
        """Take `name` if free, or renew it if `candidate` holds it: the answer names the holder, its epoch
        and its lease. With a `strength` above the holder's, claim it: granted when the holder's lease ends."""
        command = {"op": "campaign", "name": check_name(name, "election name"),
                   "candidate": check_name(candidate, "candidate"), "lease_ms": _lease_ms(lease)}
        if strength is not None:
            command["strength"] = strength
        return self.command(name, command, timeout)

    def resign(self, name: str, candidate: str, epoch: int, *, timeout: float | None = None) -> bool:
        return self.command(name, {"op": "resign", "name": check_name(name, "election name"),
                                   "candidate": check_name(candidate, "candidate"), "epoch": epoch}, timeout)["ok"]

    def leader(self, name: str, *, timeout: float | None = None) -> tuple[str | None, int]:
        """Who holds `name` now, and their epoch ((None, 0): nobody)."""
        answer = self.command(name, {"op": "who", "name": check_name(name, "election name")}, timeout)
        return answer["leader"], answer["epoch"]

    # -- the requests --------------------------------------------------------------------------------
    def command(self, name: str, command: dict, timeout: float | None = None) -> dict:
        """Run one command in `name`'s group; the group's answer. ValueError for a malformed command
        (nothing is sent); NoMajority when no leader answered within `timeout`."""
        check_command(command)
        with self._lock:
            self._seq += 1
            command = {**command, "session": [self.client_id, self._seq]}
            return self._ask(name, command, self.timeout if timeout is None else timeout)

    def _ask(self, name: str, command: dict, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        arc = arc_of(key_id(name, self.dht.bits), self.dht.bits)
        leader = self._leaders.get(arc)
        candidates = [leader] if leader else []
        remembered = [m for m in self._groups.get(arc, []) if m != leader]  # asked before the ring is: a
        last = "no member of its group answered"  # lookup through a moving ring can take seconds
        looked_at = time.monotonic()  # when the members asked were last looked up (or remembered)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NoMajority(f"no leader of {name!r}'s group answered within {timeout:g}s ({last}): a partition "
                                 "or failures leave it without a majority here; it was not confirmed, and is "
                                 "applied at most once")
            if not candidates and remembered:
                candidates, remembered = remembered, []
            elif not candidates:
                candidates, looked_at = self._members(arc), time.monotonic()
                if candidates:
                    self._groups[arc] = list(candidates)
                else:
                    last = "the ring did not say who holds the group"
                    time.sleep(min(RETRY_PAUSE * 4, max(0.0, left)))  # the ring is moving: ask it again
                    continue
            target = candidates.pop(0)
            if self._down.get(target, 0.0) > time.monotonic():
                if not candidates:
                    time.sleep(min(RETRY_PAUSE, max(0.0, left)))
                continue
            reply = self.rpc.call(target, "cmd", timeout=min(ASK_TIMEOUT, left), retries=0, arc=arc, cmd=command)
            if not reply.ok:
                last = f"{target}: {reply.err}"
                self._leaders.pop(arc, None)
                self._down[target] = time.monotonic() + DOWN_FOR
                if len(self._down) > MAX_CANDIDATES * 8:
                    self._down = {e: t for e, t in self._down.items() if t > time.monotonic()}
                continue
            answer = reply.body.get("answer")
            if not isinstance(answer, dict):
                last = f"{target}: a reply without an answer"
                continue
            if answer.get("bad"):
                raise ValueError(answer.get("error", "refused"))
            error = answer.get("error")
            if error is None or "key" in answer or "name" in answer:  # the group's own answer
                self._leaders[arc] = target
                return answer
            last = f"{target}: {error}"
            hint = answer.get("leader")
            if isinstance(hint, str) and "#" in hint and endpoint_of(hint) != target:
                candidates.insert(0, endpoint_of(hint))
            elif hint is None and "not the leader" in error:
                # it is electing one (ask the members in turn again shortly), or it left the group (a leader
                # that removed itself knows no other): after RELOOK_AFTER of such answers, the ring again
                self._leaders.pop(arc, None)
                if time.monotonic() - looked_at >= RELOOK_AFTER:
                    candidates, remembered, looked_at = [], [], time.monotonic()
                else:
                    candidates.append(target)
                time.sleep(min(RETRY_PAUSE, max(0.0, deadline - time.monotonic())))
            elif "send it again" in error or "try later" in error:
                candidates.insert(0, target)
                time.sleep(min(RETRY_PAUSE, max(0.0, deadline - time.monotonic())))

    def _members(self, arc: int) -> list[str]:
        """Consensus endpoints that may hold `arc`'s group: its last id's owner's process and the next."""
        try:
            found = self.dht.lookup_id(arc_end(arc, self.dht.bits))
            if not found.ok or found.owner is None:
                return []
            owner = self.dht.info(found.owner.endpoint)
        except DhtError:
            return []
        out: list[str] = []
        seen: set[str] = set()
        for i, endpoint in enumerate([owner["endpoint"]] + [s["endpoint"] for s in owner["successors"]]):
            if process_of(endpoint) in seen or len(out) >= MAX_CANDIDATES:
                continue
            seen.add(process_of(endpoint))
            try:
                member = (owner if i == 0 else self.dht.info(endpoint))["services"].get(SERVICE)
            except DhtError:
                continue
            if isinstance(member, str) and "#" in member:
                out.append(endpoint_of(member))
        return out

    def close(self) -> None:
        self.rpc.close()
        self.dht.close()

    def __enter__(self) -> ConsensusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _if(version: int | None) -> dict:
    if version is None:
        return {}
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError("if_version is an integer >= 0 (0: the key must not exist)")
    return {"if": version}


def _lease_ms(lease: float) -> int:
    if isinstance(lease, bool) or not isinstance(lease, int | float) or not 0 < lease <= 86_400:
        raise ValueError("a lease is a positive number of seconds, at most a day")
    return max(1, round(lease * 1000))
