"""An append-only file of records: the data directory's hot writes, at the cost of one `write()`.

A client's data directory (pubsub/durable.py) must hold a message before it is sent and a durable
subscription's position before a message reaches the application. One SQLite transaction each cost
13-24 µs on this project's machine, on the message's own path; the same facts appended here cost one
`write()` of a few hundred bytes, and are folded into the database later, in bulk, off that path.
A record written is in the kernel's page cache when `append` returns: it survives the process being
killed at any later moment, as a WAL commit under `synchronous=NORMAL` does; like that commit, only a
power cut can take the last ones back.

A record is framed as its length (4 bytes, big-endian), the CRC-32 of its body (4 bytes) and its body
(msgpack). A process killed in the middle of a `write()` leaves at most a torn last record: `read`
stops at the first frame that is short or whose checksum fails, and says how many bytes it left.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import Any

import msgpack

_HEAD = struct.Struct(">II")  # body length, CRC-32 of the body
MAX_RECORD = 1 << 30  # a frame claiming more is a torn or foreign one


class RecordLog:
    """The file at `path`, opened for appending (created if missing)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self.size = os.fstat(self._fd).st_size

    def append(self, record: Any) -> None:
        """Write `record` (anything msgpack packs) in one `write()`."""
        body = msgpack.packb(record, use_bin_type=True)
        frame = _HEAD.pack(len(body), zlib.crc32(body)) + body
        try:
            written = os.write(self._fd, frame)  # a regular file takes it whole; a full disk raises OSError
            while written < len(frame):
                written += os.write(self._fd, frame[written:])
        except OSError:  # what part of the frame went in is cut off: a later record must not follow a torn one
            os.ftruncate(self._fd, self.size)
            raise
        self.size += len(frame)

    def clear(self) -> None:
        """Empty the file (its records are safe elsewhere)."""
        os.ftruncate(self._fd, 0)
        self.size = 0

    def close(self) -> None:
        os.close(self._fd)


def read(path: Path) -> tuple[list[Any], int]:
    """The records in the file at `path`, oldest first, and the bytes after the last whole one (a
    record torn by a kill, or damage): those are left unread. A missing file holds none."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], 0
    records, at = [], 0
    while at + _HEAD.size <= len(data):
        length, crc = _HEAD.unpack_from(data, at)
        body = data[at + _HEAD.size:at + _HEAD.size + length]
        if length > MAX_RECORD or len(body) < length or zlib.crc32(body) != crc:
            break
        try:
            records.append(msgpack.unpackb(body, raw=False, strict_map_key=False))
        except ValueError:  # a checksum that holds over bytes msgpack refuses: not ours
            break
        at += _HEAD.size + length
    return records, len(data) - at
