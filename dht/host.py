"""ChordHost: a node process on the ring, holding one ring position or several (virtual nodes).

Chord balances load with virtual nodes (Stoica et al., SIGCOMM'01 §6.2, Fig. 9: with 20 positions per
real node the 99th percentile of keys per node falls from 4.6x to 1.6x the mean). A host with
`vnodes` V holds V positions (dht/node.py's ChordNode, ids from its endpoint and the index,
dht/ids.py), each a full Chord participant, behind one RPC socket: a request names the position it
is for (`at`, from the endpoint "host:port/i"; none is position 0). The positions share one thread
of each kind whatever V is:

- the *server* answers every position's requests (dht/transport.py RpcServer);
- the *maintenance* thread runs each position's rounds (dht/maintenance.py), a period apart for each
  and spread over the period, and the jobs their handlers queue, through one ROUTER socket; what
  one position asks another of the same process is answered in place (dht/local_calls.py);
- the *prober* takes the positions in turn, one probe an interval for the whole process
  (dht/prober.py);
- the *notifier* publishes every position's record changes on one events socket (dht/notifier.py).

Killing the process kills its positions; a graceful leave (SIGTERM, `node leave` to any of its
positions) takes them out one after another, each handing its keys to its successor. Copies of a
position's keys go to positions of other processes (`replica_targets`), so that nothing is lost
when a process dies, however its positions lie on the ring.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time

import zmq

from dht.consensus_service import ConsensusService
from dht.gate import Denials
from dht.group_placement import SERVICE, Placement
from dht.hop_lane import HopLane
from dht.ids import position_endpoint
from dht.local_calls import LocalFirst
from dht.maintenance import Maintainer
from dht.membership import QUIET_DOUBLINGS
from dht.node import ChordNode
from dht.node_config import NodeConfig
from dht.notifier import Notifier
from dht.pacing import LINK_JOBS, Pacing, WakingQueue
from dht.policy import PolicyFile
from dht.prober import HINTS, PROBE_PERIODS
from dht.proximity import RoundTrips
from dht.rpc_server import RpcServer
from dht.shared import Shared
from dht.transport import Refused, RpcClient, SocketSetup

log = logging.getLogger(__name__)


class ChordHost:
    """The positions of one process and the threads, sockets and counters they share."""

    def __init__(self, config: NodeConfig, setup: SocketSetup | None = None) -> None:
        config.validate()
        self.config = config
        self.setup = setup
        self.stopped = threading.Event()
        self.joined = threading.Event()  # every position has joined
        self.changes: queue.Queue = queue.Queue()  # record changes, for the notifier
        self.policy = PolicyFile(config.acl) if config.acl is not None else None
        self.server = RpcServer(config.bind or config.host, config.port, self._handle, setup=setup,
                                advertise=config.host, advertise_port=config.advertise_port)
        self.denials = Denials(f"node {self.server.endpoint}")
        shared = Shared(self.server, setup, self.stopped, WakingQueue(), self.changes, self.policy, self.denials,
                        [position_endpoint(self.server.endpoint, i) for i in range(config.vnodes)])
        self.shared = shared
        self.jobs = shared.jobs
        # binds the events socket, so that `info` names it
        self.notifier = Notifier(self, config.bind or config.host, advertise=config.host, port=config.ports)
        config.services["events"] = self.notifier.endpoint
        # the arcs' consensus groups (dht/arcs.py); the ring's first process starts them all
        self.placement = Placement(self.server.endpoint, config.replicas, setup)
        self.consensus = ConsensusService(config.bind or config.host, config.host, config.replicas,
                                          locate=self.placement.wanted, forget=self.placement.forget, setup=setup,
                                          port=config.ports + 3 if config.ports else 0, bits=config.bits)
        config.services[SERVICE] = self.consensus.id
        shared.consensus = self.consensus.summary
        self.positions = [ChordNode(config, shared, i) for i in range(config.vnodes)]
        self.server.tally = self._tally_served
        self.server.lane = HopLane(self.positions)
        self.notifier.tally = self._tally_published
        timeout = self.positions[0].timeout
        self.round_trips = RoundTrips()  # per peer process: positions of one process share the path
        maintenance_rpc = RpcClient(timeout=timeout, retries=0, setup=setup, watch=True)
        # libzmq retries a lost connection every 100 ms by default, each retry an event that would wake
        # the sleeping maintenance thread; a peer asked again gets a new connection anyway (fresh_if_down)
        maintenance_rpc.socket.setsockopt(zmq.RECONNECT_IVL_MAX, max(1000, int(4000 * config.stabilize)))
        maintenance_rpc.on_rtt = self.round_trips.observe
        # the maintenance thread's requests: to our own positions answered in place (dht/local_calls.py)
        self.rpc = LocalFirst(maintenance_rpc, self.server.endpoint, self._handle)
        self.maintainers = [Maintainer(p, self.rpc, self.round_trips) for p in self.positions]
        self.pacings = [Pacing(max_stretch=config.quiet_stretch) for _ in self.positions]
        self.probe_rpc = LocalFirst(RpcClient(timeout=timeout, retries=0, setup=setup, watch=True),
                                    self.server.endpoint, self._handle)  # the prober thread's
        self.hints: queue.Queue = queue.Queue(maxsize=HINTS)
        for p in self.positions:
            p.prober.rpc, p.prober.hints = self.probe_rpc, self.hints
        self._relay = None
        self._threads: list[threading.Thread] = []

    # -- what callers see of position 0, the process's own endpoint and id ------------------------
    @property
    def node(self) -> ChordNode:
        return self.positions[0]

    @property
    def endpoint(self) -> str:
        return self.positions[0].endpoint

    @property
    def me(self):  # noqa: ANN201 - a dht.routing.Peer
        return self.positions[0].me

    @property
    def timeout(self) -> float:
        return self.positions[0].timeout

    @property
    def join_error(self) -> str | None:
        return next((p.join_error for p in self.positions if p.join_error), None)

    @property
    def relay(self):  # noqa: ANN201 - pubsub.relay.Relay | None
        return self._relay

    @relay.setter
    def relay(self, relay) -> None:  # noqa: ANN001 - a pubsub.relay.Relay (dht never imports pubsub)
        self._relay = relay
        for p in self.positions:
            p.relay = relay

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> ChordHost:
        for name, target in (("server", self._serve), ("maintenance", self._maintain),
                             ("notifier", self.notifier.run), ("prober", self._probe)):
            t = threading.Thread(target=target, name=f"chord-{name}-{self.server.port}", daemon=True)
            t.start()
            self._threads.append(t)
        self.consensus.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self.server.wake()
        self.jobs.put((None, "wake", None))  # the maintenance thread's
        self.changes.put(None)  # the notifier's wake-up
        try:
            self.hints.put_nowait(None)  # the prober's
        except queue.Full:
            pass  # it has hints to follow: it looks at `stopped` after the first
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=5)
        self.consensus.stop()
        self.placement.close()
        if not any(t.is_alive() for t in self._threads):
            self.notifier.close()
            self.jobs.close()
        for p in self.positions:
            with p.lock:
                p.store.close()

    def leave(self) -> None:
        """Graceful leave of every position: runs in the maintenance thread, which then stops the node."""
        self.jobs.put((0, "leave", None))

    def wait(self, timeout: float | None = None) -> bool:
        return self.stopped.wait(timeout)

    def close(self) -> None:
        """Close the sockets of a host that was never started (tests that call handlers directly)."""
        self.jobs.close()
        self.server.close()
        self.notifier.close()
        self.rpc.close()
        self.probe_rpc.close()
        self.consensus.stop()
        self.placement.close()

    # -- the server thread ----------------------------------------------------------------------
    def _serve(self) -> None:
        try:
            self.server.serve(self.stopped)
        finally:
            self.server.close()

    def _handle(self, request: dict) -> dict:
        at = request.get("at", 0)
        if at >= len(self.positions):
            raise Refused(f"no position {at} here: {self.server.endpoint} holds {len(self.positions)}")
        return self.positions[at]._handle(request)

    def _tally_served(self, at: int, received: int, sent: int) -> None:
        position = self.positions[at]
        position.bytes_in += received
        position.replies_bytes += sent

    def _tally_published(self, origin: int, sent: int) -> None:
        if 0 <= origin < len(self.positions):
            self.positions[origin].events_bytes += sent
            self.positions[origin].events += 1

    # -- the maintenance thread -----------------------------------------------------------------
    def _step(self, index: int, step) -> None:  # noqa: ANN001 - a callable of no arguments
        """Run one step of a position's maintenance, its requests' bytes counted as that position's."""
        before, sent = self.rpc.bytes_sent, self.rpc.sent
        try:
            step()
        finally:
            self.positions[index].requests_bytes += self.rpc.bytes_sent - before
            self.positions[index].requests_sent += self.rpc.sent - sent

    def _maintain(self) -> None:
        try:
            for i, m in enumerate(self.maintainers):
                via = None if i == 0 else [self.positions[0].endpoint]
                self._step(i, lambda m=m, via=via: m.join(via))
                if self.stopped.is_set():
                    return
            if self.positions[0].started_ring:
                self.consensus.bootstrap()
            self.joined.set()
            self._rounds()
        except Exception:  # a maintenance bug must not silently stop the node healing
            log.exception("maintenance stopped")
        finally:
            self.rpc.close()

    def _rounds(self) -> None:
        """Each position's rounds start a period apart (not a period after the last one ended: a round
        slowed by timeouts on dead peers must not also delay the next stabilize, which is what heals
        the ring around them); the positions' rounds are spread over the period. A quiet position's
        rounds come further apart (dht/pacing.py); the thread sleeps until a round is due, a job comes,
        or a connection of ours closes, and a closed one brings every position's next round to a
        period after its last."""
        period = self.config.stabilize
        v = len(self.positions)
        start = time.monotonic()
        last = [start - period + period * i / v for i in range(v)]
        next_round = [start + period * i / v for i in range(v)]
        poller = zmq.Poller()
        poller.register(self.jobs.fd, zmq.POLLIN)
        if self.rpc.watch_socket is not None:
            poller.register(self.rpc.watch_socket, zmq.POLLIN)
        seen = self._connections_closed()
        ours_closed = self.rpc.closings()
        # a policy file is read again every period, however far apart a quiet position's rounds are
        next_policy = start + period if self.shared.policy is not None else float("inf")
        while not self.stopped.is_set():
            wait = min(*next_round, next_policy) - time.monotonic()
            if wait > 0:
                poller.poll(max(1, int(wait * 1000)))
            self.jobs.clear()
            while True:
                try:
                    index, kind, arg = self.jobs.get_nowait()
                except queue.Empty:
                    break
                if kind == "leave":
                    self._leave_all()
                    return
                if index is None or self.positions[index].left:
                    continue  # a wake-up (stop), or a job for a position that has gone
                if kind in LINK_JOBS:
                    self.pacings[index].wake()
                try:
                    self._step(index, lambda m=self.maintainers[index], k=kind, a=arg: m.job(k, a))
                except Exception:  # a maintenance bug must not silently stop the node healing
                    log.exception("maintenance step %s failed", kind)
            closed = self._connections_closed()
            if closed != seen:
                seen = closed
                self._look_again()
                if self.rpc.closings() != ours_closed:  # a peer of ours died (a client's leaving says nothing)
                    ours_closed = self.rpc.closings()
                    self.consensus.peer_died()
                for i in range(v):
                    self.pacings[i].wake()
                    self.maintainers[i].suspect = True  # a closed connection may be the predecessor's
                    next_round[i] = min(next_round[i], last[i] + period)
            now = time.monotonic()
            if now >= next_policy:
                next_policy = now + period
                self.positions[0].check_policy()
            due = [i for i in range(v) if next_round[i] <= now and not self.positions[i].left]
            if not due or self.stopped.is_set():
                continue
            try:
                self.rpc.new_cycle()
                before = {i: self._links(i) for i in due}
                for i in due:  # every due position's ring pointers first: no lookup of another delays them
                    self.maintainers[i].next_round_periods = self.pacings[i].next_if_quiet()
                    last[i] = time.monotonic()
                    next_round[i] = last[i] + period * random.uniform(0.9, 1.1)
                    if not self.stopped.is_set():
                        self._step(i, self.maintainers[i].ring_round)
                for i in due:
                    if not self.stopped.is_set():
                        self._step(i, self.maintainers[i].rest_round)
                        # a peer that did not answer may be cut off (no connection closes in a partition)
                        changed = (self._links(i) != before[i] or not self.maintainers[i].fingers_settled
                                   or bool(self.rpc.silent))
                        stretch = self.pacings[i].ran(changed=changed)
                        self.maintainers[i].paced = stretch > 1
                        self.maintainers[i].round_periods = stretch
                        if changed:
                            self._look_again()
                        if self._links(i)[:2] != before[i][:2]:
                            self.consensus.ring_changed()  # a neighbour came or went: groups look again
                        next_round[i] = last[i] + period * stretch * random.uniform(0.9, 1.1)
            except Exception:  # a maintenance bug must not silently stop the node healing
                log.exception("maintenance round failed")

    def _look_again(self) -> None:
        """The ring moved: the prober looks for members due at once, not after its quiet wait."""
        try:
            self.hints.put_nowait(None)
        except queue.Full:
            pass  # it has hints to follow: it looks after them

    def _connections_closed(self) -> int:
        """Maintenance connections to peers that closed so far: the successors and fingers it calls and
        each predecessor it watches. Connections to us say nothing: clients come and go all the time,
        and a ring serving them would never be quiet."""
        return self.rpc.closings()

    def _links(self, index: int) -> tuple:
        """What a round that changed something changed: the position's predecessor, successor list and
        fingers (a ring that has just grown is still fixing its fingers, a round at a time)."""
        position = self.positions[index]
        with position.lock:
            routing = position.routing
            return routing.predecessor, tuple(routing.successors), tuple(routing.fingers)

    def _leave_all(self) -> None:
        """Every position leaves, the last on the circle first: a position whose successor is one of
        ours that has already gone hands its keys past it, so no key moves twice within the process."""
        try:
            for i in sorted(range(len(self.positions)), key=lambda j: -self.positions[j].me.id):
                if not self.positions[i].left:
                    self._step(i, self.maintainers[i].leave)
                    self.shared.positions.remove(self.positions[i].endpoint)  # `info` lists those still in
        finally:
            self.stopped.set()

    # -- the prober thread ----------------------------------------------------------------------
    def _probe(self) -> None:
        probers = [p.prober for p in self.positions]
        every = probers[0].every
        try:
            while not self.joined.wait(0.2):
                if self.stopped.is_set():
                    return
            next_probe = time.monotonic() + every * random.uniform(0.5, 1.0)
            turn = 0
            idle = 0  # probe turns in a row that found no member due
            while not self.stopped.is_set():
                # without probes, the routing table's nodes are still remembered every PROBE_PERIODS periods
                wait = max(0.0, next_probe - time.monotonic()) if every > 0 else PROBE_PERIODS * self.config.stabilize
                self.probe_rpc.new_cycle()  # each probe and hint asks afresh
                try:
                    try:
                        hint = self.hints.get(timeout=wait)
                        if hint is None:  # stop() wakes us, or the ring moved (_rounds): look again now
                            if self.stopped.is_set():
                                continue
                            next_probe, idle = time.monotonic(), 0
                    except queue.Empty:
                        hint = None
                    if hint is not None:
                        prober, peer, hops = hint
                        if not prober.node.left:
                            prober.counted(lambda p=prober, e=peer, h=hops: p.follow(e, h))
                    else:
                        if every > 0 and time.monotonic() >= next_probe:
                            prober = probers[turn % len(probers)]
                            turn += 1
                            probed = not prober.node.left and prober.counted(prober.probe)
                            # a turn of every position with nothing due: members are all known in the ring,
                            # and the next look waits as long as their probes do (QUIET_DOUBLINGS)
                            idle = 0 if probed else idle + 1
                            quiet = idle >= len(probers)
                            next_probe = time.monotonic() + every * (1 << QUIET_DOUBLINGS if quiet else 1) \
                                * random.uniform(0.9, 1.1)
                        for prober in probers:  # (a probe syncs its own position's)
                            prober.sync()
                except Exception:  # a prober bug must not stop the node probing
                    log.exception("probe failed")
                for prober in probers:
                    prober.save()
        finally:
            for prober in probers:
                prober.save(force=True)
            self.probe_rpc.close()
