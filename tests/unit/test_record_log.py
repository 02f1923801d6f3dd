"""A data directory's hot writes (pubsub/record_log.py, pubsub/durable.py, pubsub/journal.py): appended to
its log, folded into the database later, and never lost to a kill, a torn record or a cut-short fold.

To see it fail: in pubsub/durable.py, leave out the fold a client makes when it opens the directory
(`self._fold()` under "what a killed process left"): what it writes after a torn record is never read
back ("the message written after the torn record is lost"); the other mutants are in docs/testing.md."""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest

from pubsub import record_log
from pubsub.durable import EARLIER_FORMATS, FILE, FOLDING, FORMAT, LOG, DataDir, DataDirError
from pubsub.envelope import Envelope
from pubsub.journal import LONE_GAP_NS, Journal
from pubsub.message import Message
from pubsub.positions import Positions
from pubsub.publication import Publication
from pubsub.record_log import RecordLog, read


def killed(data: DataDir) -> None:
    """What a SIGKILL leaves: the files as they are, nothing folded or tidied."""
    data.checkpointer.stop()
    data._log.close()  # type: ignore[union-attr]
    data.db.close()


def envelopes(data: DataDir, seqs: range) -> list[Envelope]:
    return [Envelope("t", data.name, s, time.time_ns(), f"m{s}".encode()) for s in seqs]


def test_a_record_torn_by_a_kill_is_dropped_and_what_the_next_client_writes_is_kept(tmp_path: Path):
    first = DataDir(tmp_path, "pub")
    first.journal(envelopes(first, range(1, 4)), {})
    killed(first)
    with open(tmp_path / LOG, "ab") as log:  # the kill came in the middle of the next record's write
        log.write(b"\x00\x00\x01\x00\xde\xad")
    second = DataDir(tmp_path, "pub")
    try:
        second.journal(envelopes(second, range(4, 5)), {})
        last, kept, _acks, _ids = second.publication("t")
        assert last == 4, "the message written after the torn record is lost"
        assert [e.payload for e in kept] == [b"m1", b"m2", b"m3", b"m4"]
    finally:
        second.close()


def test_a_damaged_record_and_everything_after_it_are_left_unread(tmp_path: Path):
    log = RecordLog(tmp_path / "log")
    for i in range(3):
        log.append([i, b"payload %d" % i])
    log.close()
    data = bytearray((tmp_path / "log").read_bytes())
    frame = len(data) // 3
    data[frame + frame - 2] ^= 0x01  # a bit of the second record's payload
    (tmp_path / "log").write_bytes(bytes(data))
    records, left = read(tmp_path / "log")
    assert records == [[0, b"payload 0"]]
    assert left == 2 * frame


def test_a_write_the_disk_refuses_halfway_leaves_no_torn_record_for_the_next_to_follow(tmp_path: Path, monkeypatch):
    log = RecordLog(tmp_path / "log")
    log.append(["first"])
    real_write = os.write

    def half_then_full(fd: int, data: bytes) -> int:  # the disk fills in the middle of the frame
        if len(data) > 8:
            real_write(fd, data[:8])
            monkeypatch.setattr(record_log.os, "write", failing)
            return 8
        return real_write(fd, data)

    def failing(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(record_log.os, "write", half_then_full)
    with pytest.raises(OSError):
        log.append(["second", b"x" * 100])
    monkeypatch.setattr(record_log.os, "write", real_write)  # the disk has room again
    log.append(["third"])
    log.close()
    assert read(tmp_path / "log") == ([["first"], ["third"]], 0), "a record after the torn one was lost"


def test_hot_writes_wait_in_the_log_and_a_reader_sees_them_where_they_are(tmp_path: Path):
    """A durable subscription's positions reach the database only when folded (at close here); until
    then a reader of the directory (`create=False`, as `chordpub dlq` opens it) reads them in the log."""
    data = DataDir(tmp_path, "sub")
    try:
        positions = Positions(data, "billing", "t")
        handed = [Message("t", b"x", "p1", s, 0, 0) for s in range(1, 11)]
        positions.hand(handed)
        positions.commit(handed[4])
        with closing(sqlite3.connect(tmp_path / FILE)) as db:
            assert db.execute("SELECT count(*) FROM positions").fetchone() == (0,)
        reader = DataDir(tmp_path, create=False)
        try:
            assert reader.positions("billing") == {"p1": (5, 10)}
        finally:
            reader.close()
        assert (tmp_path / LOG).stat().st_size > 0, "the reader folded the writer's log"
    finally:
        data.close()
    with closing(sqlite3.connect(tmp_path / FILE)) as db:
        assert db.execute("SELECT publisher, committed, handed FROM positions").fetchall() == [("p1", 5, 10)]
    assert (tmp_path / LOG).stat().st_size == 0


def test_a_fold_cut_short_by_a_kill_is_done_again_by_the_next_client(tmp_path: Path):
    first = DataDir(tmp_path, "pub")
    first.journal(envelopes(first, range(1, 4)), {})
    first.save_acks("t", {"durable-sub": 2})
    killed(first)
    (tmp_path / LOG).rename(tmp_path / FOLDING)  # renamed aside, the kill before its records were applied
    second = DataDir(tmp_path, "pub")
    try:
        last, kept, acks, _ids = second.publication("t")
        assert (last, len(kept), acks) == (3, 3, {"durable-sub": 2}), "the interrupted fold was not done again"
        assert not (tmp_path / FOLDING).exists()
    finally:
        second.close()


def test_a_fold_keeps_what_retention_still_holds_and_writes_nothing_it_let_go(tmp_path: Path):
    """Retention lets go of messages journaled before the trim that says so; a fold that holds both
    keeps only the messages above its topic's last trim (with their tags), every msg id, and the
    last seq, and inserts nothing it would delete in the same transaction."""
    data = DataDir(tmp_path, "pub")
    try:
        envs = [Envelope("t", data.name, s, time.time_ns(), b"m%d" % s, "k" if s % 2 else None) for s in range(1, 1001)]
        for env in envs:
            env.msg_id = f"id{env.seq}"
        for start in range(0, 1000, 100):  # each write lets go of all but the last write's messages
            data.journal(envs[start:start + 100], {"t": start - 99} if start >= 200 else {})
        before = data.db.total_changes
        last, kept, _acks, ids = data.publication("t")  # (folds)
        assert last == 1000 and [e.seq for e in kept] == list(range(801, 1001))
        assert [e.key for e in kept[:2]] == ["k", None]
        assert [i for i, _s, _ns in ids] == [f"id{s}" for s in range(1, 1001)]
        changes = data.db.total_changes - before  # rows inserted and deleted: 1000 ids, 200 kept, 100 tags
        assert changes < 1000 + 200 + 100 + 10, f"the fold inserted what it let go ({changes} changes)"
    finally:
        data.close()


def test_a_directory_of_the_earlier_format_is_taken_and_marked_so_that_an_older_client_refuses_it(tmp_path: Path):
    """A client of the earlier format does not read client.log: a directory this client writes must be
    one such a client refuses (its format check), not one it opens and reads short."""
    DataDir(tmp_path, "pub").close()
    with closing(sqlite3.connect(tmp_path / FILE)) as db, db:
        db.execute("UPDATE meta SET value=? WHERE name='format'", (EARLIER_FORMATS[0],))

    def stored() -> str:
        with closing(sqlite3.connect(tmp_path / FILE)) as db:
            return db.execute("SELECT value FROM meta WHERE name='format'").fetchone()[0]

    DataDir(tmp_path, create=False).close()  # a reader takes it as it is
    assert stored() == EARLIER_FORMATS[0]
    writer = DataDir(tmp_path, "pub")
    writer.close()
    assert stored() == FORMAT, "the directory was left in the format of a client that does not read the log"
    with closing(sqlite3.connect(tmp_path / FILE)) as db, db:
        db.execute("UPDATE meta SET value='chordpub-client/9' WHERE name='format'")
    with pytest.raises(DataDirError, match="format 'chordpub-client/9'"):
        DataDir(tmp_path, "pub")


def test_a_lone_message_is_written_and_sent_by_its_publishing_thread_and_a_burst_by_the_journals(tmp_path: Path):
    """A message with nothing before it for LONE_GAP_NS skips the journal thread's wake-up; those that
    follow it closely queue for the thread's group commit, and every one is sent after it is written,
    in order."""
    data = DataDir(tmp_path, "pub")
    sent: list[tuple[str, int]] = []

    def send(batch: list[tuple[Publication, Envelope]]) -> dict[str, int]:
        last, _kept, _acks, _ids = data.publication("t")
        assert last >= batch[-1][1].seq, "sent before it was written"
        sent.extend((threading.current_thread().name, env.seq) for _pub, env in batch)
        return {}

    journal = Journal(data, send)
    pub = Publication("t", data.name, history_size=100, reliable=True)
    pub.journaled = True
    try:
        start = time.time_ns()
        for i in range(5):
            env = pub.stamp(b"x", start + i * 1000)  # a burst: a microsecond apart
            journal.put(pub, env, send)
        assert journal.flush(10)
        journal.put(pub, pub.stamp(b"x", start + 4000 + LONE_GAP_NS), send)
        me = threading.current_thread().name
        assert sent[0] == (me, 1), "the first message, alone, was not sent by its publishing thread"
        assert [t for t, _s in sent[1:5]] == ["chordpub-journal"] * 4
        assert sent[5] == (me, 6)
        assert [s for _t, s in sent] == [1, 2, 3, 4, 5, 6]
    finally:
        journal.stop()
        data.close()
