"""Log compaction for dht/raft.py (Raft §7): the applied prefix of the log folded into a snapshot of
the caller's state, and InstallSnapshot, in chunks, for a follower that lacks what was folded.

A mixin of `Raft`: the rules read its indexes and logs, and belong beside it; they live here so that
each file says one thing.
"""

from __future__ import annotations

from dht.raft_messages import LEADER, AppendReply, Snapshot, SnapshotReply

SNAPSHOT_CHUNK = 256 * 1024  # bytes of a snapshot in one InstallSnapshot message
MAX_SNAPSHOT_BYTES = 256 * 1024 * 1024  # a snapshot being received, at most (a group's state is bounded below)


class Compaction:
    """`Raft`'s snapshots: `snapshot` is (index, term, configuration, data)."""

    def compact(self, index: int, data: bytes) -> None:
        """Fold the log up to `index` (applied already) into `data`, the caller's state as of `index`."""
        if not self.snap_index < index <= self.applied:
            raise ValueError(f"compaction to {index}: only an applied index past {self.snap_index}")
        configs = [c for c in self._configs if c <= index]
        members = self.log[configs[-1] - self.snap_index - 1].members if configs else self.snapshot[2]
        term = self.term_at(index)
        del self.log[:index - self.snap_index]
        self._configs = [c for c in self._configs if c > index]
        self.snapshot = (index, term, members, data)  # type: ignore[assignment]

    def _send_snapshot(self, peer: str) -> None:
        index, term, members, data = self.snapshot
        at, offset = self._sending.get(peer, (index, 0))
        if at != index or offset > len(data):
            offset = 0  # a newer snapshot since: from its start
        chunk = data[offset:offset + SNAPSHOT_CHUNK]
        self._sending[peer] = (index, offset)
        self._out.append(Snapshot(self.id, peer, self.term, index, term, members, offset, chunk,
                                  offset + len(chunk) >= len(data), self.now))

    def _on_snapshot(self, msg: Snapshot) -> None:
        if not self._heard_leader(msg):
            return
        if msg.index <= self.commit:  # it has all that already: on with appends from its commit
            self._out.append(AppendReply(self.id, msg.src, self.term, True, self.commit, msg.sent))
            return
        if msg.offset == 0:
            self._receiving = (msg.index, msg.last_term, bytearray())
        got = self._receiving
        if got is None or got[:2] != (msg.index, msg.last_term) or msg.offset != len(got[2]):
            have = len(got[2]) if got is not None and got[:2] == (msg.index, msg.last_term) else 0
            self._out.append(SnapshotReply(self.id, msg.src, self.term, msg.index, have, msg.sent))
            return
        if len(got[2]) + len(msg.data) > MAX_SNAPSHOT_BYTES:  # more than any group's state: not taken
            self._receiving = None
            return
        got[2].extend(msg.data)
        if not msg.done:
            self._out.append(SnapshotReply(self.id, msg.src, self.term, msg.index, len(got[2]), msg.sent))
            return
        keep = self.log[msg.index - self.snap_index:] if self.term_at(msg.index) == msg.last_term else []
        self.log = keep  # what follows the snapshot, if this log agrees with it there (§7)
        self._configs = [e.index for e in keep if e.members is not None]
        self.snapshot = (msg.index, msg.last_term, msg.members, bytes(got[2]))
        self._receiving = None
        self.commit = self.applied = msg.index
        self._restored = self.snapshot[3]
        if self._unsaved_from is not None and self._unsaved_from <= msg.index:
            self._unsaved_from = msg.index + 1 if keep else None
        self._out.append(AppendReply(self.id, msg.src, self.term, True, msg.index, msg.sent))

    def _on_snapshot_reply(self, msg: SnapshotReply) -> None:
        if self.role != LEADER or msg.term != self.term or msg.src not in self.members:
            return
        self.acked[msg.src] = max(self.acked.get(msg.src, -self.election_ticks), msg.sent)
        if msg.index == self.snap_index:
            self._sending[msg.src] = (msg.index, msg.offset)
        self._send_append(msg.src)
