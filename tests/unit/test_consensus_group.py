"""A consensus group's keys and elections (dht/consensus_group.py over dht/raft.py and dht/kv_machine.py),
driven by a loop that plays the network and the clients: messages delayed and dropped, partitions of
any split, members stopped and restarted from what they persisted, clients that retry at the leader
and give up on an answer that does not come.

Checked: the clients' recorded history of puts, compare-and-sets, gets and deletes is linearizable
(tests/helpers/linearizable.py), and a group that answers reads from any member's state without the
log is caught by the same check; election holders, each acting on its lease from when it sent its
last renewal, never overlap, and epochs only grow.

To see it fail: answer reads at once from the member's own state (`BrokenReads`, below: the checker
refuses its history), or run a lease's clock for half its length (two holders overlap), or let an
expiry free a name renewed since it was proposed, or answer an overwritten proposal with the result
found at its index (a write reported done that never happened)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from dht import kv_machine
from dht.consensus_group import Group
from dht.kv_machine import SESSIONS, CommandError, KvMachine, encode
from dht.raft import Entry
from tests.helpers.linearizable import Op, linearizable

E = 10  # election ticks
TIMEOUT = 6 * E  # ticks a client waits for an answer before it gives up (the op may still take effect)


class BrokenReads(Group):
    """A group that answers reads from whichever member is asked, at once: fast and not linearizable."""

    def request(self, command: dict, ticket: object) -> None:
        if command["op"] == "get":
            held = self.machine.keys.get(command["key"])
            self._answers.append((ticket, {"ok": True, "key": command["key"], "value": held.value if held else None,
                                           "version": held.version if held else 0}))
            return
        super().request(command, ticket)


@dataclass
class Asking:
    op: Op
    command: dict
    member: str
    sent: int  # the tick of the latest send
    rid: int


class Sim:
    """Members of one group, its clients, and the network between them, one tick at a time."""

    def __init__(self, n: int, seed: int, group: type[Group] = Group, clients: int = 4, drop: float = 0.02,
                 keys: str = "abcd") -> None:
        self.keys = keys
        self.rng = random.Random(seed)
        self.ids = tuple(f"m{i}" for i in range(n))
        self.group, self.drop = group, drop
        self.disk: dict[str, tuple[int, str | None, list[Entry]]] = {i: (0, None, []) for i in self.ids}
        self.nodes: dict[str, Group | None] = {i: self._start(i) for i in self.ids}
        self.flight: list[tuple[int, str, str, object]] = []  # (due tick, from, to, message or request or answer)
        self.sides: list[set[str]] = [set(self.ids)]
        self.now = 0
        self.clients = [f"c{i}" for i in range(clients)]
        self.home = {c: self.ids[i % n] for i, c in enumerate(self.clients)}  # a client shares its host's side
        self.asking: dict[str, Asking | None] = dict.fromkeys(self.clients)
        self.versions: dict[tuple[str, str], int] = {}  # (client, key) -> the version it saw last
        self.history: list[Op] = []
        self.rid = 0

    def _start(self, i: str) -> Group:
        term, vote, log = self.disk[i]
        return self.group(i, self.ids, self.rng.randint, election_ticks=E, term=term, voted_for=vote, log=list(log))

    # -- the network -----------------------------------------------------------------------------------
    def side_of(self, who: str) -> str:
        return self.home.get(who, who)

    def reachable(self, a: str, b: str) -> bool:
        a, b = self.side_of(a), self.side_of(b)
        return any(a in side and b in side for side in self.sides)

    def send(self, src: str, dst: str, what: object) -> None:
        if self.rng.random() >= self.drop:
            self.flight.append((self.now + self.rng.randint(0, 2), src, dst, what))

    def _collect(self, node: Group) -> None:
        ready = node.ready()
        term, vote, log = self.disk[node.raft.id]
        if ready.entries:
            log = log[:ready.entries[0].index - 1] + ready.entries
        self.disk[node.raft.id] = (ready.term, ready.voted_for, log)
        for msg in ready.messages:
            self.send(msg.src, msg.dst, msg)
        for (client, rid), answer in ready.answers:
            self.send(node.raft.id, client, (rid, answer))

    # -- clients ----------------------------------------------------------------------------------------
    def _new_op(self, client: str) -> None:
        key = self.rng.choice(self.keys)
        kind = self.rng.choice(["put", "put", "cas", "get", "get", "delete"])
        seen = self.versions.get((client, key), 0)
        if_version = None
        if kind == "cas" or (kind == "delete" and self.rng.random() < 0.5):
            if_version = seen if self.rng.random() < 0.8 else self.rng.randint(0, 5)
        self.rid += 1
        value = f"{client}-{self.rid}".encode() if kind in ("put", "cas") else None
        op = Op(key, "put" if kind == "cas" else kind, value, if_version, call=self.now)
        command = {"op": op.kind, "key": key, **({"value": value} if value is not None else {}),
                   **({"if": if_version} if if_version is not None else {})}
        self.asking[client] = Asking(op, command, self.rng.choice(self.ids), self.now, self.rid)
        self.send(client, self.asking[client].member, (client, self.rid, command))

    def _answered(self, client: str, rid: int, answer: dict) -> None:
        asking = self.asking[client]
        if asking is None or asking.rid != rid:
            return  # an answer to a request given up on
        if answer.get("error"):  # not proposed, or overwritten: never applied; ask (the leader) again
            asking.member = answer.get("leader") or self.rng.choice(self.ids)
            asking.sent = self.now
            self.send(client, asking.member, (client, rid, asking.command))
            return
        op = asking.op
        if op.kind == "get":
            output: tuple = (answer["value"], answer["version"])
            self.versions[(client, op.key)] = answer["version"]
        elif answer["ok"]:
            output = ("ok", answer["version"]) if op.kind == "put" else ("ok",)
            if op.kind == "put":
                self.versions[(client, op.key)] = answer["version"]
        else:
            output = ("refused", answer["version_found"])
            self.versions[(client, op.key)] = answer["version_found"]
        self.history.append(Op(op.key, op.kind, op.value, op.if_version, output, op.call, self.now))
        self.asking[client] = None

    # -- time ------------------------------------------------------------------------------------------------
    def tick(self, clients: bool = True) -> None:
        self.now += 1
        for node in self.nodes.values():
            if node is not None:
                node.tick()
                self._collect(node)
        while due := [f for f in self.flight if f[0] <= self.now]:
            self.flight = [f for f in self.flight if f[0] > self.now]
            self.rng.shuffle(due)
            for _, src, dst, what in due:
                if not self.reachable(src, dst):
                    continue
                if dst in self.asking:
                    self._answered(dst, *what)
                elif (node := self.nodes.get(dst)) is not None:
                    if isinstance(what, tuple):
                        client, rid, command = what
                        node.request(command, (client, rid))
                    else:
                        node.step(what)
                    self._collect(node)
        for client, asking in self.asking.items():
            if asking is not None and self.now - asking.sent > TIMEOUT:  # no answer: it may or may not apply
                self.history.append(asking.op)
                self.asking[client] = None
            if self.asking[client] is None and clients and self.rng.random() < 0.3:
                self._new_op(client)

    def chaos(self, ticks: int) -> None:
        """Random partitions (any split, 20-100 ticks each) and members stopped and restarted."""
        end = self.now + ticks
        while self.now < end:
            roll = self.rng.random()
            if roll < 0.5:
                cut = set(self.rng.sample(self.ids, self.rng.randint(1, len(self.ids) - 1)))
                self.sides = [cut, set(self.ids) - cut]
            elif roll < 0.8:
                victim = self.rng.choice(self.ids)
                self.nodes[victim] = None
                for _ in range(self.rng.randint(5, 30)):
                    self.tick()
                self.nodes[victim] = self._start(victim)
            else:
                self.sides = [set(self.ids)]
            for _ in range(self.rng.randint(20, 100)):
                self.tick()
        self.sides = [set(self.ids)]
        self.nodes = {i: n if n is not None else self._start(i) for i, n in self.nodes.items()}

    def settle(self) -> None:
        """No new operations; the ones asked are answered or given up on."""
        for _ in range(TIMEOUT + 4 * E):
            self.tick(clients=False)


@pytest.mark.parametrize("seed", range(6))
def test_keys_stay_linearizable_through_partitions_kills_and_lost_messages(seed):
    sim = Sim(5, seed)
    sim.chaos(1500)
    sim.settle()
    done = [op for op in sim.history if op.output is not None]
    assert len(done) >= 100, f"only {len(done)} operations completed: the group was not available enough"
    assert sum(op.kind == "put" and op.output[0] == "ok" for op in done) >= 20
    assert linearizable(sim.history)


def test_reads_answered_without_the_log_are_caught():
    """The same runs (two keys, so that reads meet writes often) with reads answered by whichever
    member is asked: a member behind its leader answers a read with what a completed write replaced."""
    caught = 0
    for seed in range(8):
        sim = Sim(5, seed, group=BrokenReads, keys="ab")
        sim.chaos(1000)
        sim.settle()
        caught += not linearizable(sim.history)
    assert caught >= 3, f"the checker caught stale reads in {caught} of 8 histories"


def test_a_command_retried_after_a_lost_answer_is_applied_once():
    m = KvMachine()
    put = encode({"op": "put", "key": "k", "value": b"1", "session": ["c", 1]})
    first = m.apply(1, put)
    assert m.apply(2, put) == first and m.keys["k"].version == 1  # the same answer, not a second write
    assert m.apply(3, encode({"op": "put", "key": "k", "value": b"2", "if": 1, "session": ["c", 2]}))["ok"]
    assert not m.apply(4, put)["ok"], "an older request of this client is not applied"
    m.apply(5, encode({"op": "get", "key": "k", "session": ["reader", 1]}))
    assert "reader" not in m.sessions, "a read is read again when retried: the table holds no values"
    for i in range(SESSIONS + 1):
        m.apply(6 + i, encode({"op": "delete", "key": "z", "session": [f"other{i}", 1]}))
    assert len(m.sessions) == SESSIONS and "c" not in m.sessions


def test_an_expiry_proposed_before_a_renewal_frees_nothing_and_epochs_grow():
    """The leader proposes an expiry when a lease ran out; a renewal applied before it means the holder
    is back: the expiry frees nothing. To see it fail, let `_expire` ignore the renewal it ends."""
    m = KvMachine()

    def campaign(index: int, candidate: str) -> dict:
        return m.apply(index, encode({"op": "campaign", "name": "lock", "candidate": candidate, "lease_ms": 1000}))

    assert campaign(1, "k") == {"ok": True, "name": "lock", "leader": "k", "epoch": 1, "lease_ms": 1000, "renewed": 1,
                                "claimed": None}
    assert campaign(2, "k")["renewed"] == 2
    assert not m.apply(3, encode({"op": "expire", "name": "lock", "renewed": 1}))["ok"], "renewed since"
    assert campaign(4, "j")["leader"] == "k"
    assert m.apply(5, encode({"op": "expire", "name": "lock", "renewed": 2}))["ok"]
    assert campaign(6, "j") == {"ok": True, "name": "lock", "leader": "j", "epoch": 6, "lease_ms": 1000, "renewed": 6,
                                "claimed": None}
    assert m.apply(7, encode({"op": "who", "name": "lock"}))["leader"] == "j"
    assert not m.apply(8, encode({"op": "resign", "name": "lock", "candidate": "j", "epoch": 1}))["ok"]
    assert m.apply(9, encode({"op": "resign", "name": "lock", "candidate": "j", "epoch": 6}))["ok"]
    assert m.apply(10, encode({"op": "who", "name": "lock"}))["leader"] is None


def test_a_stronger_candidate_claims_the_name_and_takes_it_when_the_holder_lets_go():
    """An exclusive topic's publishers campaign with their strength: a stronger one than the holder
    claims the name; the holder's renewals are refused from then on (it stops acting), and the expiry
    or resignation that frees the name grants it to the claimant, a new epoch. A weaker or equal one
    only waits. To see it fail, let the holder renew while a claim waits, or let `_free` drop the claim."""
    m = KvMachine()
    index = iter(range(1, 100))

    def campaign(candidate: str, strength: int | None) -> dict:
        cmd = {"op": "campaign", "name": "ex", "candidate": candidate, "lease_ms": 500}
        return m.apply(next(index), encode(cmd if strength is None else {**cmd, "strength": strength}))

    assert campaign("weak", 1)["ok"]
    assert not campaign("equal", 1)["ok"] and not campaign("none", None)["ok"]
    assert campaign("weak", 1)["ok"] and m.holders["ex"].claim is None, "neither claims it"
    claimed = campaign("strong", 5)
    assert not claimed["ok"] and claimed["leader"] == "weak" and claimed["claimed"] == "strong"
    assert not campaign("middle", 3)["ok"] and m.holders["ex"].claim[0] == "strong", "the stronger claim stays"
    refused = campaign("weak", 1)
    assert not refused["ok"] and refused["renewed"] == 4, "a holder with a claimant waiting is not renewed"
    freed = m.apply(next(index), encode({"op": "expire", "name": "ex", "renewed": 4}))
    assert freed["ok"] and freed["granted"] == "strong" and freed["epoch"] == freed["renewed"] == 8
    assert campaign("strong", 5) == {"ok": True, "name": "ex", "leader": "strong", "epoch": 8, "lease_ms": 500,
                                     "renewed": 9, "claimed": None}
    assert not campaign("weak", 1)["ok"] and m.holders["ex"].claim is None
    assert not campaign("stronger", 9)["ok"]
    restored = KvMachine.restore(m.snapshot())
    assert restored.holders == m.holders, "a claim survives a snapshot"
    handed = m.apply(next(index), encode({"op": "resign", "name": "ex", "candidate": "strong", "epoch": 8}))
    assert handed["granted"] == "stronger" and m.holders["ex"].epoch == 12


def test_the_machine_holds_its_keys_and_elections_within_their_bounds(monkeypatch):
    monkeypatch.setattr(kv_machine, "MAX_KEYS", 2)
    monkeypatch.setattr(kv_machine, "MAX_ELECTIONS", 1)
    m = KvMachine()
    for i, key in enumerate(("a", "b"), 1):
        assert m.apply(i, encode({"op": "put", "key": key, "value": b"v"}))["ok"]
    assert "holds 2 keys" in m.apply(3, encode({"op": "put", "key": "c", "value": b"v"}))["error"]
    assert m.apply(4, encode({"op": "put", "key": "a", "value": b"w"}))["ok"], "an existing key is written"
    assert m.apply(5, encode({"op": "campaign", "name": "x", "candidate": "k", "lease_ms": 10}))["ok"]
    refused = m.apply(6, encode({"op": "campaign", "name": "y", "candidate": "k", "lease_ms": 10}))
    assert not refused["ok"] and "holds 1 elections" in refused["error"] and len(m.holders) == 1


@pytest.mark.parametrize("command, says", [
    ({"op": "put", "key": "", "value": b"x"}, "key is 1.."),
    ({"op": "put", "key": "k" * 257, "value": b"x"}, "key is 1.."),
    ({"op": "put", "key": "k", "value": "text"}, "a value is bytes"),
    ({"op": "put", "key": "k", "value": b"x", "if": -1}, "if_version"),
    ({"op": "campaign", "name": "n", "candidate": "c", "lease_ms": 0}, "lease"),
    ({"op": "campaign", "name": "", "candidate": "c", "lease_ms": 10}, "election name"),
    ({"op": "expire", "name": "n", "renewed": 1}, "leader's to propose"),
    ({"op": "drop-table"}, "op one of"),
])
def test_a_malformed_request_is_refused_whole_and_proposes_nothing(command, says):
    g = Group("m0", ("m0",), random.Random(0).randint, election_ticks=E)
    while not g.is_leader:
        g.tick()
    g.ready()
    last = g.raft.last_index
    with pytest.raises(CommandError, match=says):
        g.request(command, "t")
    assert g.raft.last_index == last and not g.ready().answers


@pytest.mark.parametrize("seed", range(4))
def test_election_holders_never_overlap_and_epochs_grow(seed):
    """Candidates campaign for one name through partitions and kills; each believes it leads from a
    granted answer until its lease ends, counted from when it sent its last granted request (it renews
    about three times a lease). The intervals of any two never overlap; epochs only grow. With odd
    seeds the candidates campaign with strengths (an exclusive topic's publishers), so the stronger
    ones claim the name from the weaker."""
    lease = 4 * E  # ticks (the group's tick is 100 ms: 4 s)
    sim = Sim(5, seed, clients=0)
    candidates = [f"k{i}" for i in range(3)]
    sim.home.update({k: sim.ids[i * 2 % 5] for i, k in enumerate(candidates)})
    sim.asking.update(dict.fromkeys(candidates))
    intervals: dict[str, list[list[int]]] = {k: [] for k in candidates}
    epochs: list[tuple[int, int, str]] = []  # (tick granted, epoch, candidate)
    sent_at: dict[tuple[str, int], int] = {}
    lead_until: dict[str, int] = {}

    def answered(client: str, rid: int, answer: dict) -> None:
        if not answer.get("ok") or (sent := sent_at.pop((client, rid), None)) is None:
            return  # (asked of every member: the others say they do not lead)
        if sent + lease - 1 < sim.now:
            return  # answered after the lease it would renew was over: the holder does not act on it
        if lead_until.get(client, -1) < sim.now:  # a new interval
            intervals[client].append([sim.now, sim.now])
            epochs.append((sim.now, answer["epoch"], client))
        lead_until[client] = max(lead_until.get(client, 0), sent + lease - 1)
        intervals[client][-1][1] = lead_until[client]

    sim._answered = answered  # type: ignore[method-assign]
    while sim.now < 1500:
        sim.sides = [set(sim.ids)] if sim.rng.random() < 0.4 else \
            [cut := set(sim.rng.sample(sim.ids, 2)), set(sim.ids) - cut]
        for _ in range(sim.rng.randint(20, 100)):
            sim.tick(clients=False)
            for k in candidates:
                if sim.rng.random() < 3 / lease:
                    sim.rid += 1
                    sent_at[(k, sim.rid)] = sim.now
                    for member in sim.ids:  # asked everywhere: only the leader proposes it
                        cmd = {"op": "campaign", "name": "lock", "candidate": k, "lease_ms": lease * 100}
                        if seed % 2:
                            cmd["strength"] = int(k[1:])
                        sim.send(k, member, (k, sim.rid, cmd))
    spans = sorted((a, b, k) for k, iv in intervals.items() for a, b in iv)
    assert len(spans) >= 3, f"the name was taken up {len(spans)} times"
    for (a1, b1, k1), (a2, _, k2) in zip(spans, spans[1:], strict=False):
        assert b1 < a2, f"{k1} led {a1}..{b1} and {k2} from {a2}"
    grants = [(e, k) for _, e, k in sorted(epochs)]  # (a holder whose own lease lapsed while the group
    assert grants == sorted(grants)  # kept its grant takes it up again with the same epoch)
    assert len({e for e, _ in grants}) == len(set(grants)), "one epoch, one holder"
