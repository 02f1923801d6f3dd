"""A consumer group's exactly once into the application's database: `msg.ack(commit_with=conn)`.

A group delivers at least once: a member that dies after its work and before its ack has the message
sent again, to another member or to itself restarted (docs/contracts.md, "Consumer groups"). With
`commit_with`, the ack first commits the member's writes on `conn` together with a row saying that the
group applied that message, by (publisher, seq) of its topic (table `chordpub_applied`). A message that
comes again finds its row, and the writes made for it are rolled back instead: each message is applied
once, whichever members took it (JetStream's double ack beside a deduplicating consumer; Kafka's offsets
committed in the consumer's transaction). The members share the database: one SQLite file (WAL mode
lets them write in turn), or one connection within a process.

The rows are bounded: APPLIED_KEPT of them per database, the oldest pruned every PRUNE_EVERY inserts. A
message comes again within `ack_wait` × `max_deliver` of its first delivery, far fewer messages back.
"""

from __future__ import annotations

import sqlite3

APPLIED = "chordpub_applied"
APPLIED_KEPT = 100_000
PRUNE_EVERY = 1_000


def apply_once(conn: object, group: str, topic: str, publisher: str, seq: int) -> bool:
    """Commit the writes made on `conn` since its last commit with the row that the group applied
    (publisher, seq) of `topic`: True. When the row is there already (a redelivery of a message the
    group applied), roll those writes back instead: False."""
    if not isinstance(conn, sqlite3.Connection):
        raise ValueError(f"commit_with takes the application's sqlite3.Connection, not {type(conn).__name__}")
    row = (group, topic, publisher, seq)
    try:
        try:
            cur = conn.execute(f"INSERT OR IGNORE INTO {APPLIED} VALUES (?, ?, ?, ?)", row)
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            conn.execute(f"CREATE TABLE IF NOT EXISTS {APPLIED} (grp TEXT NOT NULL, topic TEXT NOT NULL, "
                         "publisher TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (grp, topic, publisher, seq))")
            cur = conn.execute(f"INSERT OR IGNORE INTO {APPLIED} VALUES (?, ?, ?, ?)", row)
        if cur.rowcount == 0:
            conn.rollback()
            return False
        if cur.lastrowid is not None and cur.lastrowid % PRUNE_EVERY == 0:
            conn.execute(f"DELETE FROM {APPLIED} WHERE rowid <= ?", (cur.lastrowid - APPLIED_KEPT,))
        conn.commit()
    except BaseException:
        conn.rollback()  # neither the writes nor the row: the message is not acked, and comes again
        raise
    return True
