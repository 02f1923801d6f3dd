"""What a `Client` offers of the ring's consensus groups: leader election and linearizable keys
(dht/election.py, dht/consensus_client.py), through the same ring and keys the client already uses."""

from __future__ import annotations

import threading
from collections.abc import Callable

from dht.consensus_client import ConsensusClient
from dht.election import DEFAULT_LEASE, Election
from pubsub.exclusive import election_name


class ConsensusFace:
    """Mixed into `Client`: needs its `via`, `timeout` and `_consensus_setup()`."""

    via: str
    timeout: float

    def _init_consensus(self) -> None:
        self._consensus: ConsensusClient | None = None  # made on the first key or leader call
        self._elections: list[Election] = []
        self._consensus_lock = threading.Lock()

    def _consensus_setup(self):  # noqa: ANN202 - SocketSetup | None
        return None

    def _keys_client(self) -> ConsensusClient:
        with self._consensus_lock:
            if self._consensus is None:
                self._consensus = ConsensusClient(self.via, timeout=min(self.timeout, 5.0),
                                                  setup=self._consensus_setup())
            return self._consensus

    def elect(self, name: str, *, candidate: str | None = None, lease: float = DEFAULT_LEASE,
              on_gain: Callable[[int], None] | None = None, on_loss: Callable[[int], None] | None = None
              ) -> Election:
        """Campaign for `name` (renewed in the background until `resign()`): the handle's `is_leader`,
        `epoch` (a fencing token that only grows), `leader()` and `wait_leader()`; `on_gain(epoch)` and
        `on_loss(epoch)` are called from the campaign's thread. A leader cut off from its group's majority
        stops leading (`on_loss`) before the name can be granted to anyone else."""
        return self._campaign(name, candidate=candidate, lease=lease, on_gain=on_gain, on_loss=on_loss)

    def _exclusive(self, topic: str, strength: int, candidate: str) -> Election:
        """The election `topic`'s exclusive publishers campaign in, with this one's strength
        (pubsub/exclusive.py)."""
        return self._campaign(election_name(topic), candidate=candidate, lease=DEFAULT_LEASE, strength=strength)

    def _campaign(self, name: str, *, candidate: str | None, lease: float, on_gain: Callable[[int], None] | None = None,
                  on_loss: Callable[[int], None] | None = None, strength: int | None = None) -> Election:
        own = ConsensusClient(self.via, timeout=max(lease, 1.0), setup=self._consensus_setup())
        try:
            election = Election(own, name, candidate=candidate, lease=lease, on_gain=on_gain, on_loss=on_loss,
                                strength=strength)
        except BaseException:
            own.close()
            raise
        with self._consensus_lock:
            self._elections.append(election)
        return election

    def leader(self, name: str) -> tuple[str | None, int]:
        """Who holds election `name` now, and their epoch ((None, 0): nobody)."""
        return self._keys_client().leader(name)

    def kv_put(self, key: str, value: bytes | str, *, if_version: int | None = None) -> int:
        """Write `key` (compare-and-set with `if_version`: 0 = must not exist; else VersionMismatch);
        its new version."""
        return self._keys_client().put(key, value, if_version=if_version)

    def kv_get(self, key: str) -> tuple[bytes | None, int]:
        """`key`'s value and version ((None, 0): absent), linearizable."""
        return self._keys_client().get(key)

    def kv_delete(self, key: str, *, if_version: int | None = None) -> bool:
        """Delete `key` (with `if_version`, only at that version); whether it existed."""
        return self._keys_client().delete(key, if_version=if_version)

    def _drop_election(self, election: Election) -> None:
        with self._consensus_lock:
            if election in self._elections:
                self._elections.remove(election)
        election.resign()
        election.client.close()

    def _close_consensus(self) -> None:
        with self._consensus_lock:
            elections, self._elections = self._elections, []
            keys, self._consensus = self._consensus, None
        for e in elections:
            e.resign()
            e.client.close()
        if keys is not None:
            keys.close()

