"""Leader election for users: one campaign for a name, its lease renewed in the background, and a
handle that says whether this process leads, under which epoch, and tells callbacks when that changes.

The name's group grants it to one candidate at a time with a lease (dht/kv_machine.py), and frees it
only a full lease after the holder *sent* its last renewal, by the group's clock
(dht/consensus_group.py). The holder counts its own lease from the moment it sent that renewal, less
`DRIFT` of it for the two clocks' rates, so it stops acting (`is_leader` false, `on_loss` called)
before the group can give the name to anyone else: two holders never overlap, even when a partition
cuts the holder off from its group (it cannot renew, so it stops). The epoch is the index of the grant
in the group's log: every later grant has a higher one, so a resource can refuse an older holder's
writes (a fencing token, as Chubby's sequencers).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections import deque
from collections.abc import Callable

from dht.consensus_client import ConsensusClient, ConsensusError, check_name

log = logging.getLogger(__name__)

DEFAULT_LEASE = 1.0  # seconds: a dead holder's name is free this long after its last renewal
RENEWALS = 4  # renewals per lease: a holder loses it only when this many in a row get no answer
DRIFT = 0.05  # of a lease: what the holder's clock may gain on its group's during one


class Election:
    """A campaign for `name` as `candidate`, renewed until `resign()` or `close()`."""

    def __init__(self, client: ConsensusClient, name: str, *, candidate: str | None = None,
                 lease: float = DEFAULT_LEASE, on_gain: Callable[[int], None] | None = None,
                 on_loss: Callable[[int], None] | None = None, ahead: float = 0.0,
                 strength: int | None = None) -> None:
        """`ahead`: seconds before the lease's end at which this process stops leading without a renewal
        (`on_loss` then), for a leader whose acting takes time to stop. `strength`: a stronger candidate
        takes the name from a weaker holder a lease later at most (dht/kv_machine.py's claims)."""
        check_name(name, "election name")
        if isinstance(lease, bool) or not isinstance(lease, int | float) or not 0.2 <= lease <= 86_400:
            raise ValueError("a lease is a number of seconds from 0.2 to 86400")
        if not 0 <= ahead < lease / 2:
            raise ValueError("ahead is from 0 to half the lease")
        if strength is not None and (isinstance(strength, bool) or not isinstance(strength, int)):
            raise ValueError("a strength is an integer")
        self.name, self.lease, self.ahead, self.strength = name, float(lease), ahead, strength
        self.candidate = check_name(candidate or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}",
                                    "candidate")
        self.client = client
        self.on_gain, self.on_loss = on_gain, on_loss
        self.epoch = 0  # of this process's latest grant (0: never led)
        self.holder: str | None = None  # who holds the name, as the last answer said
        self._valid_until = float("-inf")  # monotonic time this process stops leading without a renewal
        self._leading = False
        self._stop = threading.Event()
        self._lock = threading.RLock()  # one change of leadership at a time
        self._renewed = threading.Condition(self._lock)
        self._told: deque[tuple[Callable[[int], None], int]] = deque()  # callbacks owed, in order (under _lock)
        self._telling = threading.Lock()  # held by the one thread calling them
        self._thread = threading.Thread(target=self._run, name=f"election-{name}", daemon=True)
        self._clock = threading.Thread(target=self._watch, name=f"election-clock-{name}", daemon=True)
        self._thread.start()
        self._clock.start()

    @property
    def is_leader(self) -> bool:
        """True while this candidate holds the name and its lease has certainly not ended."""
        return self._leading and time.monotonic() < self._valid_until

    def leader(self) -> tuple[str | None, int]:
        """Who holds the name now, asked of its group, and their epoch ((None, 0): nobody)."""
        return self.client.leader(self.name)

    def wait_leader(self, timeout: float | None = None) -> bool:
        """Wait until this candidate leads (or `timeout` passes); whether it does."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_leader:
            if self._stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
                return False
            self._stop.wait(0.01)
        return True

    def resign(self) -> None:
        """Stop campaigning and free the name now (if held) rather than a lease later."""
        self._stop.set()
        with self._lock:
            self._renewed.notify_all()
        me = threading.current_thread()  # (a callback may resign: it runs on one of these threads)
        if me is not self._clock:
            self._clock.join(timeout=5)
        with self._lock:
            epoch, leading = self.epoch, self._leading
            self._lose()
        self._deliver()
        if me is not self._thread:
            self._thread.join(timeout=self.lease + 5)
        if leading:
            try:
                self.client.resign(self.name, self.candidate, epoch, timeout=self.lease)
            except ConsensusError as exc:  # the lease frees it anyway
                log.warning("resigning %s: %s", self.name, exc)

    close = resign

    def _run(self) -> None:
        every = self.lease / RENEWALS
        while not self._stop.is_set():
            sent = time.monotonic()
            try:
                answer = self.client.campaign(self.name, self.candidate, self.lease, strength=self.strength,
                                              timeout=every * 2)
            except ConsensusError as exc:
                log.debug("campaign for %s: %s", self.name, exc)
                answer = None
            except Exception:  # a bug must not leave a leader that believes it still leads
                log.exception("campaign for %s failed", self.name)
                answer = None
            if self._stop.is_set():
                return
            if answer is not None:
                self._answered(answer, sent)
                self._deliver()
            self._stop.wait(max(0.0, every - (time.monotonic() - sent)))

    def _answered(self, answer: dict, sent: float) -> None:
        with self._lock:
            if self._stop.is_set():
                return
            self.holder = answer.get("leader")
            if answer.get("ok"):
                if self._leading and answer["epoch"] != self.epoch:
                    self._lose()  # granted anew: the old epoch ended in between
                self._valid_until = sent + self.lease * (1 - DRIFT) - self.ahead
                if not self._leading and time.monotonic() < self._valid_until:
                    self._leading, self.epoch = True, answer["epoch"]
                    self._tell(self.on_gain, self.epoch)
            elif self._leading:
                self._lose()
            self._renewed.notify_all()

    def _watch(self) -> None:
        """The lease's end, on a thread of its own: a renewal that hangs (a partition can hold a request
        for seconds) never delays `on_loss` past it."""
        while not self._stop.is_set():
            with self._lock:
                left = self._valid_until - time.monotonic()
                if self._leading and left <= 0:
                    self._lose()
                elif not self._stop.is_set():
                    self._renewed.wait(left if self._leading and left > 0 else None)
            self._deliver()

    def _lose(self) -> None:
        if self._leading:
            self._leading = False
            self._tell(self.on_loss, self.epoch)

    def _tell(self, callback: Callable[[int], None] | None, epoch: int) -> None:
        """Owe `callback` a call (under _lock): `_deliver` makes it once the lock is released, so that a
        callback may use the handle, `resign()` included, and the other thread never waits on it."""
        if callback is not None:
            self._told.append((callback, epoch))

    def _deliver(self) -> None:
        """Make the calls owed, in order, outside _lock: one thread at a time; a thread that finds the
        other at it leaves them to it (that one goes on until none is owed)."""
        while True:
            if not self._telling.acquire(blocking=False):
                return
            try:
                while True:
                    with self._lock:
                        if not self._told:
                            break
                        callback, epoch = self._told.popleft()
                    try:
                        callback(epoch)
                    except Exception:  # the user's code: logged, never the end of the campaign
                        log.exception("election callback for %s failed", self.name)
            finally:
                self._telling.release()
            with self._lock:
                if not self._told:  # (one owed after the loop's last look and before the release is ours)
                    return
