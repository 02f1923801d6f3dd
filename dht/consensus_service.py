"""A node process's consensus groups (dht/arcs.py: one per arc it holds), driven over ZeroMQ: the
loop that feeds each group's Raft (dht/consensus_group.py) its ticks, its peers' messages and its
clients' commands, and sends what each returns.

One thread owns the groups and one ROUTER socket (`endpoint`), which takes both the peers' Raft messages (op "raft":
one message per peer process per turn of the loop carries every group's, as multi-Raft systems coalesce their
heartbeats) and the clients' commands (op "cmd", answered when the command's entry applies, or at once with the
leader to ask). A second thread asks the ring who should hold each group this process leads
(dht/group_placement.py), and the leader changes the group's members towards that, one at a time.

A member is `host:port#incarnation`: a process started again (without the state it had) is a new
member, which the group's leader adds as it removes the old one, so a restarted process can never
vote twice in one term.

Quiet groups cost nothing: a leader whose group has nothing in flight, no election lease to time, and
the members the ring wants, tells its followers so and stops ticking it (CockroachDB's quiescence);
they stop too. Any message or command for the group, or a change of the ring (the host calls
`ring_changed`), wakes it, and a follower that no longer hears its leader then elects another. A member
removed while it did not hear backs off its campaigns (dht/campaign_backoff.py).
"""

from __future__ import annotations

import logging
import queue
import random
import secrets
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from typing import Any

import zmq

from dht import raft_wire, wire
from dht.arcs import ARCS, next_change
from dht.campaign_backoff import CampaignBackoff
from dht.consensus_group import TICK_MS, Group
from dht.consensus_wire import SCHEMAS, arc_field, batches, endpoint_of
from dht.group_placement import run_placement
from dht.kv_machine import CommandError
from dht.pacing import WakingQueue
from dht.raft import FOLLOWER, LEADER, PRE_CANDIDATE, AppendReply, Vote
from dht.rpc_server import RejectLog
from dht.sockets import base_options, bind_port
from dht.transport import RpcClient, SocketSetup

log = logging.getLogger(__name__)

QUIET_TICKS = 10  # ticks a settled group waits before it stops ticking (1 s at the default tick)
PLACE_EVERY = 30.0  # seconds between checks of every led group's members against the ring (asleep too)
BATCH_BYTES = 640 * 1024  # Raft messages' bytes in one request to a peer, about, at most


class ConsensusService:
    """The groups of this process: every arc's group, itself the only member, when this process began the
    ring (`bootstrap`); else those whose leaders add it."""

    def __init__(self, bind: str, host: str, replicas: int,
                 locate: Callable[[int, dict], list[str] | None], setup: SocketSetup | None = None,
                 port: int = 0, bits: int = 64, context: zmq.Context | None = None,
                 forget: Callable[[], None] = lambda: None) -> None:
        """`locate(end, known)`: who should hold the arc ending at `end`; `forget()`: the ring moved or a
        peer died, so what `locate` remembers from earlier passes is asked again."""
        self.context = context or zmq.Context.instance()
        self.socket = self.context.socket(zmq.ROUTER)
        base_options(self.socket)
        if setup is not None:
            setup(self.socket, True)
        self.endpoint = f"{host}:{bind_port(self.socket, bind, port)}"
        self.id = f"{self.endpoint}#{secrets.token_hex(4)}"
        # the member that started the ring's groups: groups of a ring started apart (then merged) never mix
        self.genesis: str | None = None
        self.replicas, self.bits, self.locate, self.forget = replicas, bits, locate, forget
        # watching: a member's process that dies closes our connection to it, which wakes our groups
        self.peers = RpcClient(timeout=1.0, retries=0, setup=setup, context=self.context, watch=True)
        self.random = random.Random()
        self.groups: dict[int, Group] = {}
        self.awake: set[int] = set()
        self.quiet: dict[int, int] = {}  # arc -> ticks its led group has been settled
        self.wanted: dict[int, list[str]] = {}  # arc -> the members the ring wants (led groups, once placed)
        self.backoff = CampaignBackoff(lambda lo, hi: self.random.uniform(lo, hi))
        self.jobs = WakingQueue()  # from other threads: ("ring", None), ("wanted", (arc, members))
        self._placing: queue.Queue = queue.Queue()  # arcs for the placement thread
        self._asked: dict[int, int] = {}  # arcs it has not answered yet -> the ring's moves when asked
        self._moves = 0  # changes of the ring so far: an answer from before the latest is asked again
        self._dirty: set[int] = set()
        self._out: dict[str, list] = defaultdict(list)  # member -> [[arc, raft message], ...]
        self._quiesce: dict[str, list] = defaultdict(list)  # member -> [[arc, term, index], ...]
        self.stopped = threading.Event()
        self.reject_log = RejectLog("malformed consensus message")
        self.messages_in = self.messages_out = self.bytes_out = 0
        self.failures = 0  # loop turns that raised (logged at most every 5 s)
        self.leaders_lost = 0  # groups whose leader's process was seen dying (an election hurried)
        self._failure_logged = float("-inf")
        self._threads: list[threading.Thread] = []

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> ConsensusService:
        place = partial(run_placement, self._placing, self.locate, self.bits, self.jobs.put, self.stopped)
        for name, target in (("loop", self._run), ("placement", place)):
            t = threading.Thread(target=target, name=f"consensus-{name}-{self.endpoint}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self.stopped.set()
        self.jobs.put(("stop", None))
        self._placing.put(None)
        for t in self._threads:
            t.join(timeout=5)
        if not any(t.is_alive() for t in self._threads):
            self.jobs.close()
            self.socket.close(linger=0)
            self.peers.close()

    def bootstrap(self) -> None:
        """This process began the ring: it starts every arc's group, with itself the only member."""
        self.jobs.put(("bootstrap", None))

    def ring_changed(self) -> None:
        """The ring moved (from the host's maintenance thread): the groups this process leads ask the
        ring again who should hold them, and wake only to change their members."""
        self.jobs.put(("ring", None))

    def peer_died(self) -> None:
        """A connection to a peer process closed (it died): every group wakes, so that one whose leader
        it was elects another."""
        self.jobs.put(("died", None))

    def summary(self) -> dict:
        """What `node info` shows (from any thread): groups held, led and awake, and what was dropped:
        malformed or foreign-ring messages (`rejected`) and loop turns that failed (`failures`); the
        consensus messages and bytes it sent (what groups cost the ring)."""
        groups = list(self.groups.values())
        return {"member": self.id, "groups": len(groups), "led": sum(g.is_leader for g in groups),
                "awake": len(self.awake), "rejected": self.reject_log.count, "failures": self.failures,
                "leaders_lost": self.leaders_lost, "messages_out": self.messages_out, "bytes_out": self.bytes_out}

    def state(self) -> dict:
        """Each group's role, term, leader and members, for `info` and the tests (from any thread)."""
        out = {}
        for arc, g in list(self.groups.items()):
            r = g.raft
            out[str(arc)] = {"role": r.role, "term": r.term, "leader": r.leader, "members": list(r.members),
                        "commit": r.commit, "snapshot": r.snap_index, "awake": arc in self.awake}
        return out

    # -- the loop ---------------------------------------------------------------------------------
    def _group(self, arc: int, members: tuple[str, ...] = ()) -> Group:
        g = self.groups.get(arc)
        if g is None:
            g = self.groups[arc] = Group(self.id, members, self.random.randint, tick_ms=TICK_MS)
        self.awake.add(arc)
        self.quiet[arc] = 0
        return g

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        poller.register(self.jobs.fd, zmq.POLLIN)
        poller.register(self.peers.socket, zmq.POLLIN)
        poller.register(self.peers.watch_socket, zmq.POLLIN)
        closed = self.peers.closings()
        tick = TICK_MS / 1000
        next_tick = time.monotonic() + tick
        next_sweep = time.monotonic() + PLACE_EVERY
        while not self.stopped.is_set():
            try:
                resume = self.backoff.next_resume() or next_sweep
                wait = min(next_tick if self.awake else next_sweep, next_sweep, resume) - time.monotonic()
                events = dict(poller.poll(max(0, int(wait * 1000)) + 1))
                if self.peers.socket in events:
                    self.peers.on_readable()  # (peers never answer "raft"; an error reply is dropped)
                if self.peers.watch_socket in events and self.peers.closings() != closed:
                    closed = self.peers.closings()
                    self.jobs.put(("died", None))
                if self.jobs.fd in events:
                    self._take_jobs()
                if self.socket in events:
                    self._receive()
                now = time.monotonic()
                self.awake.update(self.backoff.due(now))
                if now >= next_tick:
                    next_tick = now + tick  # never two ticks closer than a tick: a late one is not made up,
                    # so the groups' lease clocks only ever run slow (dht/consensus_group.py relies on it)
                    self._tick()
                elif not self.awake:
                    next_tick = now + tick
                if now >= next_sweep:  # a ring that moved unseen (a pass that failed, a lost change)
                    next_sweep = now + PLACE_EVERY * random.uniform(0.9, 1.1)
                    for arc, g in self.groups.items():
                        if g.is_leader:
                            self._place_later(arc)
                self._flush()
            except zmq.ContextTerminated:
                return
            except Exception:  # a bug must be seen, and must stop neither the node nor the other groups
                self.failures += 1
                if time.monotonic() - self._failure_logged >= 5.0:  # seen, without flooding the log
                    self._failure_logged = time.monotonic()
                    log.exception("consensus loop turn failed (%d so far)", self.failures)
                self._dirty.clear()
                self._out.clear()
                self._quiesce.clear()

    def _take_jobs(self) -> None:
        self.jobs.clear()
        while True:
            try:
                kind, arg = self.jobs.get_nowait()
            except queue.Empty:
                return
            if kind == "bootstrap" and self.genesis is None:
                self.genesis = self.id
                for arc in range(ARCS):
                    self._group(arc, (self.id,))
            elif kind == "ring":  # the groups this process leads look again (awake only if they must change)
                self.forget()
                self.wanted.clear()
                self._moves += 1
                for arc, g in self.groups.items():
                    if g.is_leader:
                        self._place_later(arc)
            elif kind == "died":  # a peer's process died: its groups' followers must see whether it led
                self.forget()  # (and a member's process that comes back is a new member)
                closed = self.peers.closed()
                for arc, g in self.groups.items():
                    self.awake.add(arc)
                    self.quiet[arc] = 0
                    leader = g.raft.leader
                    if leader is not None and endpoint_of(leader) in closed and g.raft.leader_gone(leader):
                        self.leaders_lost += 1
            elif kind == "wanted":
                arc, members = arg
                asked_at = self._asked.pop(arc, self._moves)
                g = self.groups.get(arc)
                if asked_at != self._moves and g is not None and g.is_leader:
                    self._place_later(arc)  # the ring moved while the answer was sought: it may be stale
                    continue
                log.debug("arc %d: the ring wants %s", arc, members)
                if members is not None and g is not None:
                    self.wanted[arc] = members
                    if g.is_leader and next_change(g.raft.members, members, self.id) is not None:
                        self.awake.add(arc)
                        self.quiet[arc] = 0
                        self._dirty.add(arc)

    def _receive(self) -> None:
        for _ in range(256):  # then a tick's turn: a flood cannot starve the groups' clocks
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) != 2:
                self.reject_log(f"expected identity and one body frame, got {len(frames)}")
                continue
            ident, body = frames
            try:
                request = wire.decode_request(body, SCHEMAS)
            except wire.WireError as exc:
                self.reject_log(str(exc))
                self._reply(ident, wire.request_id(_loose(body)), error=str(exc))
                continue
            op = request["op"]
            if op == "raft":
                self._on_raft(request)
            elif op == "cmd":
                self._on_command(ident, request)
            else:
                self._reply(ident, request["id"], member=self.id, groups=self.state())

    def _on_raft(self, request: dict) -> None:
        self.messages_in += 1
        if self.genesis is None:
            self.genesis = request["g"]
        elif request["g"] != self.genesis:
            self.reject_log(f"raft messages of another ring's groups (started by {request['g']})")
            return
        for item in request["m"]:
            try:
                if not isinstance(item, list) or len(item) != 2:
                    raise wire.WireError("a raft item is [arc, message]")
                arc, msg = arc_field(item[0], "arc"), raft_wire.decode(item[1])
            except wire.WireError as exc:
                self.reject_log(str(exc))
                continue
            if msg.dst != self.id:
                continue  # for an earlier incarnation of this process
            if isinstance(msg, AppendReply) and msg.success and arc in self.groups:
                self.groups[arc].step(msg)  # an answer to a heartbeat does not wake a quiet leader
            elif isinstance(msg, Vote) and arc in self.groups and arc not in self.awake and (
                    self.backoff.waiting(arc) or msg.src not in self.groups[arc].raft.members):
                self.groups[arc].step(msg)  # answered; a removed member's campaign wakes no one
            else:
                self._group(arc).step(msg)
            self._dirty.add(arc)
        for item in request.get("q", ()):
            if not (isinstance(item, list) and len(item) == 3 and all(isinstance(x, int) for x in item)):
                self.reject_log("a quiesce item is [arc, term, index]")
                continue
            arc, term, index = item
            g = self.groups.get(arc)
            if g is None:
                continue
            r = g.raft
            if (r.role == FOLLOWER and r.leader == request["src"] and r.term == term
                    and r.last_index == r.commit == index):
                self.awake.discard(arc)

    def _on_command(self, ident: bytes, request: dict) -> None:
        arc = request["arc"]
        g = self.groups.get(arc)
        if g is None:
            self._reply(ident, request["id"], answer={"ok": False, "error": f"no group of arc {arc} here",
                                                      "leader": None})
            return
        self.awake.add(arc)
        self.quiet[arc] = 0
        try:
            g.request(request["cmd"], (ident, request["id"]))
        except CommandError as exc:
            self._reply(ident, request["id"], answer={"ok": False, "error": str(exc), "bad": True})
            return
        self._dirty.add(arc)

    def _tick(self) -> None:
        for arc in list(self.awake):
            g = self.groups[arc]
            r = g.raft
            if r.role == FOLLOWER and not r.stands and r.since_leader >= r.election_ticks:
                # not (or no longer) a member, or told of its removal, and its lease on the last leader it
                # heard is over (it may vote again: a group mid-change may need its vote): nothing more to
                # time until a message
                self.awake.discard(arc)
                continue
            g.tick()
            self._dirty.add(arc)
            if r.leader is not None:  # (a candidate is no success: removed members may grant each other pre-votes)
                self.backoff.heard_leader(arc)
            elif r.role == PRE_CANDIDATE and r.elapsed == 0:  # a campaign began this tick
                step = self.backoff.campaigned(arc, self.wanted.get(arc), self.id, time.monotonic())
                if step == "ask":
                    self._place_later(arc)
                elif step == "wait":
                    self.awake.discard(arc)
            if r.role != LEADER:
                continue
            if arc not in self.wanted:
                self._place_later(arc)
            if self._settled(arc, g):
                self.quiet[arc] = self.quiet.get(arc, 0) + 1
                if self.quiet[arc] >= QUIET_TICKS:
                    for m in r.members:
                        if m != self.id:
                            self._quiesce[m].append([arc, r.term, r.last_index])
                    self.awake.discard(arc)
            else:
                self.quiet[arc] = 0

    def _place_later(self, arc: int) -> None:
        """Ask the placement thread who should hold `arc` (once: not while an earlier ask is open)."""
        if arc not in self._asked:
            self._asked[arc] = self._moves
            self._placing.put(arc)

    def _settled(self, arc: int, g: Group) -> bool:
        """Nothing for this leader's group to do until something happens to it."""
        r = g.raft
        wanted = self.wanted.get(arc)
        return (wanted is not None and next_change(r.members, wanted, self.id) is None and not g.waiting
                and not g.lease_ends and r.commit == r.last_index == r.applied
                and all(r.match_index.get(m, 0) == r.last_index for m in r.members if m != self.id))

    def _flush(self) -> None:
        for arc in list(self._dirty):
            g = self.groups[arc]
            if g.is_leader and arc in self.wanted:
                self._reconfigure(arc, g)
            rd = g.ready()
            for msg in rd.messages:
                self._out[msg.dst].append([arc, raft_wire.encode(msg)])
            for (ident, rid), answer in rd.answers:
                self._reply(ident, rid, answer=answer)
        self._dirty.clear()
        for member in set(self._out) | set(self._quiesce):
            quiesce = self._quiesce.pop(member, None)
            for i, part in enumerate(batches(self._out.pop(member, []), BATCH_BYTES)):
                fields: dict[str, Any] = {"src": self.id, "g": self.genesis, "m": part}
                if quiesce and i == 0:
                    fields["q"] = quiesce
                self.peers.send(endpoint_of(member), "raft", **fields)
                self.messages_out += 1
        self.bytes_out = self.peers.bytes_sent

    def _reconfigure(self, arc: int, g: Group) -> None:
        r = g.raft
        change = next_change(r.members, self.wanted[arc], self.id)
        if change is None or r._config_index() > r.commit:
            return
        try:
            r.propose(members=change)
        except ValueError as exc:
            log.debug("arc %d: no configuration change now: %s", arc, exc)

    def _reply(self, ident: bytes, rid: int | None, error: str | None = None, **fields: object) -> None:
        body = wire.encode_error(rid, error) if error is not None else wire.encode_reply(rid, **fields)
        try:
            self.socket.send_multipart([ident, body], zmq.NOBLOCK)
        except zmq.ZMQError as exc:  # the client has gone: it will ask again
            log.debug("consensus reply not sent: %s", exc)

def _loose(body: bytes) -> dict:
    try:
        return wire.decode_map(body)
    except wire.WireError:
        return {}
