"""The client's registrations in the ring, on one thread: one request per owner node per heartbeat.

Every topic a client publishes is a "pub/<id>" field of the topic's record, every topic it follows
a "sub/<id>" field (pubsub/directory.py), each leased for three heartbeats. This thread:
- places new fields (a `set`, and for a subscription a read of the record's publishers in the same
  item), finding each record's owner by lookup, or without one when an earlier reply told us the
  owner's arc (`OwnerArcs`): a ring of N nodes costs at most N lookups, whatever the topic count;
- renews every field each heartbeat with ONE `records` request per owner node, whose cost to the
  owner is a lease deadline per field (dht/records.py); a renewal carries the epoch of the
  publishers' namespace back, and a subscription whose epoch moved reads the record again;
- listens on each owner's events socket for the publishers' namespace of the topics it follows, and
  tells the io loop the new publishers at once;
- follows ownership: a renewal answered "missing" (the owner lost the field) or "not the owner" (the
  ring moved), or an owner that no longer answers, sends the field round again;
- deletes a field the moment the application unsubscribes, or the client closes.

Long because placing, renewing, paging, following owners and applying events are one state machine
over the same registrations, on one thread; the pure parts are pubsub/registration.py's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import msgpack
import zmq

from dht import wire
from dht.client import DhtClient, DhtError, RecordsReply
from dht.ids import key_id
from dht.policy import DENIED
from dht.records import MISSING, NOT_OWNER, events_topic
from dht.transport import SocketSetup
from pubsub.archive import LOG, archived_publishers
from pubsub.archiving import Archives
from pubsub.directory import LEASE_HEARTBEATS, PUB, publishers_from_fields
from pubsub.links import Connections
from pubsub.mailbox import Mailbox
from pubsub.registration import OwnerArcs, Registration

log = logging.getLogger(__name__)

RETRY = 0.2  # seconds before a placement that failed is tried again
PLACE_WAIT = 2.0  # seconds an owner has to answer a placement (a renewal: one heartbeat) ...
MIN_PLACE_WAIT = 0.25  # ... or less, down to this, so that renewals stay at most two heartbeats apart
EVENTS_BATCH = 1000
EVENTS_GRACE = 0.2  # seconds (half a heartbeat at most) a renewal ahead of us leaves the change frames to come
ENTRY_WAIT = 0.5  # seconds the entry node has to tell its links when a Client starts (then placements look)


class Registrar:
    def __init__(self, via: str, context: zmq.Context, setup: SocketSetup | None, heartbeat: float) -> None:
        self.heartbeat = heartbeat
        self.lease = LEASE_HEARTBEATS * heartbeat
        self.dht = DhtClient(via, timeout=1.0, retries=1, setup=setup, context=context)
        self.events = context.socket(zmq.SUB)
        self.events.setsockopt(zmq.LINGER, 0)
        self.events.setsockopt(zmq.SNDHWM, 0)  # one filter per topic followed: never dropped
        self.events.setsockopt(zmq.MAXMSGSIZE, wire.MAX_MESSAGE_BYTES)
        if setup is not None:
            setup(self.events, False)
        self.regs: dict[tuple[str, str], Registration] = {}
        self.watching: dict[str, Registration] = {}  # topic -> its subscription
        self.arcs = OwnerArcs()
        self.archives = Archives(self.dht, self.regs, self.watching)
        self._events = Connections(lambda: self.events)  # owners' events sockets, by our records there
        self.mailbox = Mailbox()
        self._stopping = threading.Event()
        self._lookups_fail_until = 0.0  # a deletion's lookup failed: the fields left wait for their leases meanwhile
        self.renewals = 0  # requests sent for renewals (one per owner per heartbeat)
        self.thread = threading.Thread(target=self._run, name="chordpub-registrar", daemon=True)

    # -- other threads' door -------------------------------------------------------------------------
    def call(self, fn: Callable[[], None]) -> None:
        self.mailbox.call(fn)

    def start(self) -> Registrar:
        self.thread.start()
        return self

    def learn_ring(self, entry: dict) -> None:
        """What the entry node's `ping` said (its id, the ring's id width) and the arcs around it (one
        `get_links`), learned when the Client starts, before its threads do: a first publish then goes
        straight to its owners, with no `info` and no lookup asked while the publishing thread holds
        the interpreter (each of their replies then waited for it: 3-21 ms for the `info` alone). What
        this could not learn, the first placement asks, as before."""
        self.dht.learn_width(entry.get("bits"))
        links = self.dht.rpc.call(self.dht.via, "get_links", timeout=ENTRY_WAIT, retries=0)
        if not links.ok:
            return
        try:
            me = wire.decode_peer({"id": entry.get("node_id"), "endpoint": self.dht.via}, "node")
            predecessor = wire.decode_optional_peer(links.body.get("predecessor"), "predecessor")
            successors = wire.decode_peers(links.body.get("successors"), "successors")
        except wire.WireError as exc:
            log.info("the entry node's links are unusable (%s): placements look their owners up", exc)
            return
        self.arcs.learn_links(me, predecessor, successors)
        # where lookups may start if the entry node dies: with the arcs known, none may run before
        self.dht.learn_entry_points([me.endpoint, *(p.endpoint for p in successors),
                                     *([predecessor.endpoint] if predecessor else [])])

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self.mailbox.wake()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout)

    # -- commands (run on this thread) -----------------------------------------------------------------
    def register(self, reg: Registration) -> None:
        old = self.regs.get(reg.key)
        if old is not None:
            self._leave_owner(old)
        self.regs[reg.key] = reg
        if reg.watch:
            self.watching[reg.topic] = reg
            self.events.setsockopt(zmq.SUBSCRIBE, events_topic(reg.topic, reg.namespace))

    def unregister(self, topic: str, name: str) -> None:
        """Drop the field at once (not at lease expiry); a dead ring just lets the lease run out."""
        reg = self.regs.pop((topic, name), None)
        if reg is None:
            return
        self._forget(reg)
        self._delete([reg])

    def unregister_all(self) -> None:
        regs = list(self.regs.values())
        self.regs.clear()
        for reg in regs:
            self._forget(reg)
        self._delete(regs)

    def reread(self, topic: str) -> None:
        """Someone we do not know published on `topic`: read its record now (at most 10 times a beat)."""
        reg = self.watching.get(topic)
        now = time.monotonic()
        if reg is not None and reg.placed and now >= reg.read_at + self.heartbeat / 10:
            reg.need_read, reg.catch_up = True, None

    def _forget(self, reg: Registration) -> None:
        if reg.watch and self.watching.get(reg.topic) is reg:
            del self.watching[reg.topic]
            self.events.setsockopt(zmq.UNSUBSCRIBE, events_topic(reg.topic, reg.namespace))
        self._leave_owner(reg)

    def _delete(self, regs: list[Registration]) -> None:
        by_owner: dict[str | None, list[Registration]] = {}
        for reg in regs:
            by_owner.setdefault(reg.owner if reg.placed else None, []).append(reg)
        for owner, group in by_owner.items():
            if owner is not None:
                try:
                    results = self.dht.records_at(owner, [{"k": r.topic, "f": r.name, "op": "del"} for r in group],
                                                  timeout=1.0).results
                    group = [r for r, res in zip(group, results, strict=True) if not res.get("ok")]
                except DhtError as exc:
                    log.info("could not unregister at %s (the leases will expire): %s", owner, exc)
                    group = []
            for reg in group:  # owner unknown or moved: one lookup each, unless the ring stopped answering them
                if self._stopping.is_set() or time.monotonic() < self._lookups_fail_until:
                    continue  # (thousands of fields, a second's lookup each, held the client's close for minutes)
                try:
                    self.dht.del_field(reg.topic, reg.name)
                except DhtError as exc:
                    log.info("could not unregister %s (the leases of such fields will expire): %s", reg.topic, exc)
                    self._lookups_fail_until = time.monotonic() + self.lease

    # -- the loop ----------------------------------------------------------------------------------------
    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.events, zmq.POLLIN)
        poller.register(self.mailbox.fd, zmq.POLLIN)
        next_beat = time.monotonic() + self.heartbeat
        try:
            while not self._stopping.is_set():
                now = time.monotonic()
                wait = next_beat - now
                due = [r.retry_at for r in self.regs.values() if not r.placed or r.need_read]
                if due:
                    wait = min(wait, min(due) - now)
                events = dict(poller.poll(max(int(wait * 1000), 0) + 1))
                if self.mailbox.fd in events:
                    self.mailbox.run(until=self._stopping.is_set)
                if self.events in events:
                    self._drain_events()
                self._place(until=next_beat)
                if time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + self.heartbeat
                    self._renew()
        except Exception:
            log.exception("the registrar stopped")
            raise
        finally:
            self.close_unstarted()

    def close_unstarted(self) -> None:
        """Release the sockets (at the end of the thread, or when it never ran)."""
        self.events.close(linger=0)
        self.dht.close()
        if not self.mailbox.closed:
            self.mailbox.close()

    def _owner_of(self, topic: str) -> str | None:
        k = key_id(topic, self.dht.bits)
        owner = self.arcs.owner(k)
        if owner is not None:
            return owner
        found = self.dht.lookup_id(k)
        if not found.ok or found.owner is None:
            log.warning("lookup of %r failed: %s", topic, found.error)
            return None
        return found.owner.endpoint

    def _place(self, until: float = float("inf")) -> None:
        """Set the fields not yet (or no longer) held by their owner, and read what must be read. A
        field whose owner takes a lookup to find goes to it at once, alone: the reply names that
        owner's arc, so the other fields there need no lookup (after a join moved a thousand topics,
        a lookup each would hold this thread, and the renewals of the rest, for seconds). Lookups stop
        at `until` (the next renewal is due): the fields left wait for the next call."""
        now = time.monotonic()
        todo = [r for r in self.regs.values()
                if (not r.placed or r.need_read) and r.retry_at <= now and not (r.placed and self.caught_up(r))]
        if not todo:
            return
        try:
            bits = self.dht.bits  # (asked of the ring once: a ring too busy to answer is asked again)
        except DhtError as exc:
            log.warning("the ring is unreachable: %s", exc)
            for reg in todo:
                reg.retry_at = now + RETRY
            return
        by_owner: dict[str, list[Registration]] = {}
        for reg in todo:
            if reg.owner is None:
                reg.owner = self.arcs.owner(key_id(reg.topic, bits))
                if reg.owner is None:
                    if time.monotonic() >= until:
                        continue
                    try:
                        reg.owner = self._owner_of(reg.topic)
                    except DhtError as exc:
                        log.warning("the ring is unreachable: %s", exc)
                        reg.owner = None
                    if reg.owner is None:
                        reg.retry_at = now + RETRY
                    else:
                        self._send(reg.owner, [reg], [self._placement(reg)], about=True, until=until)
                    continue
            by_owner.setdefault(reg.owner, []).append(reg)
        if by_owner:
            requests = {owner: [self._placement(reg) for reg in group] for owner, group in by_owner.items()}
            replies = self.dht.records_at_each(requests, timeout=self._place_wait(until), about=True)
            for owner, group in by_owner.items():
                self._apply(owner, group, replies[owner])

    def _placement(self, reg: Registration) -> dict:
        """The `records` item that places `reg` (and reads what it reads)."""
        item = {"k": reg.topic, "f": reg.name}
        if not reg.placed:
            item.update(op="set", val=reg.value, ttl=self.lease)
            if reg.count is not None:
                item["count"] = reg.count
        if reg.watch:
            item["read"] = reg.namespace
            if reg.archive_read:
                item["names"] = LOG
        elif reg.read is not None and (not reg.placed or reg.read_after is not None):
            item["read"] = reg.read
        if reg.read_after is not None and "read" in item:
            item["after"] = reg.read_after
        return item

    def _renew(self) -> None:
        """Every placed field, to its owner: one request per owner, all sent at once, so a slow owner
        delays the renewal of its own fields only (one after another, a few slow owners on a loaded
        machine held every other owner's renewals past their leases)."""
        by_owner: dict[str, list[Registration]] = {}
        for reg in self.regs.values():
            if reg.placed and reg.owner is not None:
                by_owner.setdefault(reg.owner, []).append(reg)
        if by_owner:
            requests = {owner: [{"k": r.topic, "f": r.name, "op": "renew",
                                 **({"epoch": r.namespace} if r.watch else {})}
                                for r in group] for owner, group in by_owner.items()}
            self.renewals += len(requests)
            replies = self.dht.records_at_each(requests, timeout=self.heartbeat)
            for owner, group in by_owner.items():
                self._apply(owner, group, replies[owner], renewing=True)
        self.archives.feed()

    def _place_wait(self, until: float) -> float:
        """How long placements may wait for their owners: at most a heartbeat past the next renewal
        round (`until`), so that renewals stay two heartbeats apart in a lease of three. A fresh node
        slow to answer held two placement rounds of PLACE_WAIT between two renewals, 4 s, and fields
        leased for 3 s lapsed at their live owners."""
        return max(MIN_PLACE_WAIT, min(PLACE_WAIT, until + self.heartbeat - time.monotonic()))

    def _send(self, owner: str, group: list[Registration], items: list[dict], about: bool = False,
              until: float = float("inf")) -> None:
        """One placement request to `owner`; `about` asks for its arc and services."""
        try:
            reply: RecordsReply | DhtError = self.dht.records_at(owner, items, about=about,
                                                                  timeout=self._place_wait(until), retries=0)
        except DhtError as exc:
            reply = exc
        self._apply(owner, group, reply)

    def _apply(self, owner: str, group: list[Registration], reply: RecordsReply | DhtError,
               renewing: bool = False) -> None:
        """What `owner` answered for `group`. A renewal gets one attempt, a heartbeat long, and one that
        goes unanswered is not yet a dead owner: a busy one answers late, and sending our fields round
        the ring again would only add to its load. The second in a row is."""
        now = time.monotonic()
        if isinstance(reply, DhtError):
            log.info("%s: %s", owner, reply)
            for reg in group:
                reg.missed += 1
                if not renewing or reg.missed >= 2:
                    self.arcs.forget(owner)
                    self._lost_owner(reg, now)
            return
        for reg in group:
            reg.missed = 0
        if reply.arc is not None:
            self.arcs.learn(owner, reply.arc)
        for reg, result in zip(group, reply.results, strict=True):
            if self.regs.get(reg.key) is not reg:
                continue  # unregistered meanwhile
            if not result.get("ok"):
                err = result.get("err")
                if err == NOT_OWNER:
                    self.arcs.forget(owner)
                    self._lost_owner(reg, now)
                elif err == MISSING:
                    reg.placed = False  # the owner lost it: send it whole
                elif isinstance(err, str) and err.startswith(DENIED):
                    self._refused(reg, err)
                else:
                    log.warning("%s at %s: %s", reg.topic, owner, err)
                    reg.placed = False
                    reg.retry_at = now + self.heartbeat
                continue
            first = reg.on_placed is not None  # (cleared once called: a paged read calls it at its end)
            reg.placed = True
            if reply.services is not None:
                self._follow(reg, owner, reply.services)
            if isinstance(result.get("count"), int):
                reg.counted = result["count"]
            epoch = result.get("epoch")
            if "fields" in result and self._paged(reg, result, epoch, now):
                continue  # more pages to read: the rest of this answer waits for the last one
            if reg.paged is not None and isinstance(result.get("fields"), dict):
                result = {**result, "fields": {**reg.paged, **result["fields"]}}
                epoch, reg.paged, reg.paged_epoch, reg.read_after = reg.paged_epoch, None, None, None
            if isinstance(result.get("names"), list):
                reg.archived = archived_publishers([n for n in result["names"] if isinstance(n, str)])
            if "fields" in result and not reg.watch:
                fields = result.get("fields")
                reg.fields = fields if isinstance(fields, dict) else {}
                reg.need_read = False
            elif "fields" in result:
                reg.need_read, reg.catch_up = False, None
                reg.read_at = now
                self._set_publishers(reg, result.get("fields"), epoch)
            elif reg.watch and epoch != reg.epoch and not reg.need_read:
                self.read_unless_caught_up(reg, epoch, now, min(EVENTS_GRACE, self.heartbeat / 2))
            if first and reg.paged is None:  # (a renewal answered while a read is paging: not yet)
                callback, reg.on_placed = reg.on_placed, None
                callback(reg)

    @staticmethod
    def read_unless_caught_up(reg: Registration, epoch: object, now: float, grace: float) -> None:
        """A renewal found the owner's epoch other than ours: read the record. When the owner is ahead, its
        change frames are usually on their way (a burst of changes keeps every renewal a little ahead
        of them, and a prefix record of thousands of topics read whole at each heartbeat cost more than
        the burst): the read waits `grace`, and `caught_up` calls it off if they came meanwhile."""
        reg.need_read = True
        if reg.epoch is not None and isinstance(epoch, int) and epoch > reg.epoch:
            reg.catch_up, reg.retry_at = epoch, max(reg.retry_at, now + grace)

    @staticmethod
    def caught_up(reg: Registration) -> bool:
        """Whether a read that waited for change frames is called off: they brought us to the epoch."""
        if reg.catch_up is None or reg.epoch is None or reg.epoch < reg.catch_up:
            return False
        reg.need_read, reg.catch_up = False, None
        return True

    @staticmethod
    def _paged(reg: Registration, result: dict, epoch: object, now: float) -> bool:
        """A page of a read the owner answers in several: kept, and the next asked for at once. The
        epoch of the first page is the read's, so a change made while paging is read again."""
        page, after = result.get("fields"), result.get("after")
        if not (result.get("more") and isinstance(page, dict) and isinstance(after, str)):
            return False
        if reg.paged is None:
            reg.paged, reg.paged_epoch = {}, epoch
        reg.paged.update(page)
        reg.read_after, reg.need_read, reg.retry_at, reg.catch_up = after, True, now, None
        return True

    def _refused(self, reg: Registration, err: str) -> None:
        """A policy refuses this field (at placement, or at a renewal once the policy changed): it is
        dropped, and whoever waits for it is told."""
        if reg.placed:
            log.warning("%s: %s; the registration is dropped", reg.topic, err)
        self.regs.pop(reg.key, None)
        self._forget(reg)
        if reg.on_refused is not None:
            reg.on_refused(reg, err)

    def _lost_owner(self, reg: Registration, now: float) -> None:
        self._leave_owner(reg)
        reg.owner = None
        reg.placed = False
        reg.retry_at = now + RETRY

    # -- following the owner: its events socket and its relay -------------------------------------------
    def _follow(self, reg: Registration, owner: str, services: dict[str, str]) -> None:
        if reg.watch:
            events = services.get("events")
            if events != reg.events:
                self._leave_owner(reg)
                if events is not None:
                    self._events.ref(events)
                    reg.events = events
                reg.epoch = None  # another owner keeps another clock
        if reg.relay_service is not None:
            relay = services.get(reg.relay_service)
            if relay is None:
                log.warning("%s: the owner %s runs no relay; relay mode cannot work there", reg.topic, owner)
            if relay != reg.relay:
                reg.relay = relay
                if reg.on_relay is not None:
                    reg.on_relay(reg)

    def _leave_owner(self, reg: Registration) -> None:
        if reg.events is not None:
            self._events.unref(reg.events)
            reg.events = None

    # -- publishers ------------------------------------------------------------------------------------
    def _set_publishers(self, reg: Registration, fields: object, epoch: object) -> None:
        fields = {k: v for k, v in fields.items() if isinstance(k, str)} if isinstance(fields, dict) else {}
        if reg.namespace == PUB:
            reg.publishers = {e.id: e for e in publishers_from_fields(fields)}
        else:
            reg.fields = fields
        reg.epoch = epoch if isinstance(epoch, int) else None
        if reg.on_publishers is not None:
            reg.on_publishers(reg)

    def _drain_events(self) -> None:
        for _ in range(EVENTS_BATCH):
            try:
                frame = self.events.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            self.apply_event(frame)

    def apply_event(self, raw: bytes) -> bool:
        """A change of a record we watch, from its owner's events socket: applied to the publishers we
        know when it is newer than what we read. Anything else is ignored. True when applied."""
        try:
            _prefix, body = msgpack.unpackb(raw, raw=False)
            topic, epoch, prev = body["k"], body["epoch"], body.get("prev")
            sets, dels = dict(body.get("set") or {}), list(body.get("del") or [])
        except Exception:  # not an events message of ours
            return False
        reg = self.watching.get(topic) if isinstance(topic, str) else None
        if reg is None or not reg.placed or not isinstance(epoch, int) or isinstance(epoch, bool):
            return False
        if reg.epoch is not None and epoch <= reg.epoch:
            return False  # older than what we read
        if reg.epoch is None or not isinstance(prev, int) or not prev <= reg.epoch:
            reg.need_read, reg.catch_up = True, None  # made from a state we never saw: we missed a change
            return False
        # (prev < our epoch: a read of ours fell within the changes this frame gathers; each field's last
        # word in it, laid over the state we read, is the state at its epoch)
        if reg.namespace != PUB:  # the watcher keeps its own view: it gets the change alone
            reg.delta = ({k: v for k, v in sets.items() if isinstance(k, str) and k.startswith(reg.namespace)},
                         [n for n in dels if isinstance(n, str)])
        for name in dels if reg.namespace == PUB else ():
            if isinstance(name, str) and name.startswith(PUB):
                reg.publishers.pop(name[len(PUB):], None)
        for entry in publishers_from_fields({k: v for k, v in sets.items() if isinstance(k, str)}
                                            if reg.namespace == PUB else {}):
            reg.publishers[entry.id] = entry
        reg.epoch = epoch
        if reg.on_publishers is not None:
            reg.on_publishers(reg)
        reg.delta = None
        return True
