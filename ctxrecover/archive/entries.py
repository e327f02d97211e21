"""The bookkeeping inside an archive file: entries, the links between them, pins, eviction.

Every statement :class:`~ctxrecover.archive.DiskArchive` runs lives here, on a
:class:`Transaction`. The invariant that makes
eviction safe is one column::

    entries.holds = (pins rows on the entry) + (links rows whose child is the entry)

A *pin* is a row ``(namespace, owner, key)``: the entry is reached directly
from a live history (``live``) or was stored by the owner since its last pin
update (``fresh``, so a cut in progress cannot lose what it just stored). A
*link* is a marker inside a stored entry (a range index's members, the
transcript a summary points to); links rows exist exactly while their parent
entry does. Eviction and expiry only ever take entries with ``holds = 0`` —
nothing a live history reaches, directly or through other entries, and never
a member while its index exists. Each operation costs O(what it changes).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ctxrecover.archive.keys import archive_key, extract_keys
from ctxrecover.archive.store import DEFAULT_NAMESPACE


@dataclass(slots=True)
class Transaction:
    """One write transaction: its connection, clock reading and the file's counters.

    Entries written (or touched) in it have ``access_seq > seq_start``: eviction
    never takes them, so a batch cannot evict its own members.
    """

    conn: sqlite3.Connection
    now: float
    seq: int
    bytes: int
    seq_start: int = 0

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq


__all__: list[str] = []

TEXT_ENCODING = ("utf-8", "surrogatepass")  # round-trips any str, as archive_key hashes it
EXPIRE_BATCH = 256
SCHEMA = (
    "CREATE TABLE entries ("
    " ns TEXT NOT NULL, key TEXT NOT NULL, size INTEGER NOT NULL, created REAL NOT NULL,"
    " accessed REAL NOT NULL, access_seq INTEGER NOT NULL, holds INTEGER NOT NULL,"
    " content BLOB NOT NULL, PRIMARY KEY (ns, key))",
    "CREATE INDEX entries_lru ON entries (access_seq) WHERE holds = 0",
    "CREATE INDEX entries_ttl ON entries (accessed) WHERE holds = 0",
    "CREATE TABLE links (ns TEXT NOT NULL, parent TEXT NOT NULL, child TEXT NOT NULL,"
    " PRIMARY KEY (ns, parent, child)) WITHOUT ROWID",
    "CREATE INDEX links_child ON links (ns, child)",
    "CREATE TABLE pins (ns TEXT NOT NULL, owner TEXT NOT NULL, key TEXT NOT NULL,"
    " live INTEGER NOT NULL, fresh INTEGER NOT NULL, PRIMARY KEY (ns, owner, key)) WITHOUT ROWID",
    "CREATE INDEX pins_key ON pins (ns, key)",
    "CREATE INDEX pins_fresh ON pins (ns, owner) WHERE fresh = 1",
    "CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID",
    "INSERT INTO meta (name, value) VALUES ('seq', 0), ('bytes', 0)",
)


def create_schema(conn: sqlite3.Connection) -> None:
    for statement in SCHEMA:
        conn.execute(statement)


def begin(conn: sqlite3.Connection, now: float) -> Transaction:
    meta = dict(conn.execute("SELECT name, value FROM meta").fetchall())
    return Transaction(conn, now, seq=meta["seq"], bytes=meta["bytes"])


def finish(t: Transaction) -> None:
    t.conn.executemany("UPDATE meta SET value = ? WHERE name = ?", ((t.seq, "seq"), (t.bytes, "bytes")))


# -- entries -----------------------------------------------------------------------------------


def _hold(t: Transaction, ns: str, keys: Iterable[str], delta: int) -> None:
    t.conn.executemany(
        "UPDATE entries SET holds = holds + ? WHERE ns = ? AND key = ?", ((delta, ns, key) for key in keys)
    )


def insert(t: Transaction, ns: str, key: str, data: bytes, children: Iterable[str]) -> bool:
    """Store ``data`` under ``key`` (True) or refresh the existing entry's LRU/TTL (False).

    ``children`` are the keys its text refers to: each gets a links row and one hold.
    """
    seq = t.next_seq()
    refreshed = t.conn.execute(
        "UPDATE entries SET accessed = ?, access_seq = ? WHERE ns = ? AND key = ?", (t.now, seq, ns, key)
    ).rowcount
    if refreshed:
        return False
    holds = t.conn.execute(
        "SELECT (SELECT COUNT(*) FROM pins WHERE ns = ?1 AND key = ?2)"
        " + (SELECT COUNT(*) FROM links WHERE ns = ?1 AND child = ?2)",
        (ns, key),
    ).fetchone()[0]
    t.conn.execute(
        "INSERT INTO entries (ns, key, size, created, accessed, access_seq, holds, content)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (ns, key, len(data), t.now, t.now, seq, holds, data),
    )
    t.bytes += len(data)
    kids = [child for child in dict.fromkeys(children) if child != key]
    if kids:
        t.conn.executemany(
            "INSERT INTO links (ns, parent, child) VALUES (?, ?, ?)", ((ns, key, k) for k in kids)
        )
        _hold(t, ns, kids, +1)
    return True


def delete(t: Transaction, ns: str, key: str, size: int) -> None:
    """Remove an entry and its links rows (its children each lose one hold)."""
    kids = [
        child for (child,) in t.conn.execute("SELECT child FROM links WHERE ns = ? AND parent = ?", (ns, key))
    ]
    if kids:
        t.conn.execute("DELETE FROM links WHERE ns = ? AND parent = ?", (ns, key))
        _hold(t, ns, kids, -1)
    t.conn.execute("DELETE FROM entries WHERE ns = ? AND key = ?", (ns, key))
    t.bytes -= size


def evict(t: Transaction, max_bytes: int) -> bool:
    """Delete unheld entries, least recently used first, until the file holds ``max_bytes`` or less.

    Entries written in this transaction are never taken. False when that is
    not enough (the caller rolls back: nothing is evicted for a refused put).
    """
    while t.bytes > max_bytes:
        victim = t.conn.execute(
            "SELECT ns, key, size FROM entries"
            " WHERE holds = 0 AND access_seq <= ? ORDER BY access_seq LIMIT 1",
            (t.seq_start,),
        ).fetchone()
        if victim is None:
            return False
        delete(t, *victim)
    return True


def expire(t: Transaction, cutoff: float) -> None:
    """Delete unheld entries last accessed before ``cutoff`` (their unheld members follow)."""
    while True:
        rows = t.conn.execute(
            "SELECT ns, key, size FROM entries WHERE holds = 0 AND accessed < ? LIMIT ?",
            (cutoff, EXPIRE_BATCH),
        ).fetchall()
        if not rows:
            return
        for row in rows:
            delete(t, *row)


def apply_touches(t: Transaction, touched: Mapping[tuple[str, str], float]) -> None:
    """Write the LRU/TTL touches recorded by reads since the last write, in access order."""
    t.conn.executemany(
        "UPDATE entries SET accessed = MAX(accessed, ?), access_seq = ? WHERE ns = ? AND key = ?",
        [(when, t.next_seq(), ns, key) for (ns, key), when in touched.items()],
    )


def reach(conn: sqlite3.Connection) -> list[tuple[str, str, str, int]]:
    """``(namespace, owner, key, size)`` of every entry each owner reaches from its pins (live or
    fresh), directly or through links: what no eviction can take, by who holds it."""
    return conn.execute(
        "WITH RECURSIVE reached (ns, owner, key) AS ("
        " SELECT ns, owner, key FROM pins"
        " UNION SELECT r.ns, r.owner, l.child FROM reached r"
        " JOIN links l ON l.ns = r.ns AND l.parent = r.key)"
        " SELECT r.ns, r.owner, r.key, e.size FROM reached r JOIN entries e ON e.ns = r.ns AND e.key = r.key"
    ).fetchall()


# -- pins --------------------------------------------------------------------------------------


def _pin_state(t: Transaction, ns: str, owner: str, key: str) -> tuple[int, int] | None:
    row = t.conn.execute(
        "SELECT live, fresh FROM pins WHERE ns = ? AND owner = ? AND key = ?", (ns, owner, key)
    ).fetchone()
    return None if row is None else (row[0], row[1])


def _set_pin(
    t: Transaction, ns: str, owner: str, key: str, before: tuple[int, int] | None, live: int, fresh: int
) -> None:
    """Write one pin row (``before`` is its current state); a row with neither flag is deleted.
    Keeps ``holds`` in step."""
    if live or fresh:
        t.conn.execute(
            "INSERT INTO pins (ns, owner, key, live, fresh) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (ns, owner, key) DO UPDATE SET live = excluded.live, fresh = excluded.fresh",
            (ns, owner, key, live, fresh),
        )
        if before is None:
            _hold(t, ns, (key,), +1)
    elif before is not None:
        t.conn.execute("DELETE FROM pins WHERE ns = ? AND owner = ? AND key = ?", (ns, owner, key))
        _hold(t, ns, (key,), -1)


def pin_fresh(t: Transaction, ns: str, owner: str, keys: Iterable[str]) -> None:
    """``owner`` just stored ``keys``: hold them until its next :func:`pin_live`."""
    for key in dict.fromkeys(keys):
        state = _pin_state(t, ns, owner, key)
        if state is None or not state[1]:
            _set_pin(t, ns, owner, key, state, state[0] if state else 0, 1)


def pin_live(t: Transaction, ns: str, owner: str, added: Iterable[str], removed: Iterable[str]) -> None:
    """Apply a change of ``owner``'s live set and end its fresh holds."""
    for key in added:
        state = _pin_state(t, ns, owner, key)
        if state is None or not state[0]:
            _set_pin(t, ns, owner, key, state, 1, state[1] if state else 0)
    for key in removed:
        state = _pin_state(t, ns, owner, key)
        if state is not None and state[0]:
            _set_pin(t, ns, owner, key, state, 0, state[1])
    fresh = t.conn.execute(
        "SELECT key, live FROM pins WHERE ns = ? AND owner = ? AND fresh = 1", (ns, owner)
    ).fetchall()
    for key, live in fresh:
        _set_pin(t, ns, owner, key, (live, 1), live, 0)


def reset_owner(t: Transaction, ns: str, owner: str, keys: Iterable[str]) -> None:
    """Make ``keys`` exactly ``owner``'s live set (no fresh holds): at a session's start or resume."""
    wanted = set(keys)
    held = {
        key: (live, fresh)
        for key, live, fresh in t.conn.execute(
            "SELECT key, live, fresh FROM pins WHERE ns = ? AND owner = ?", (ns, owner)
        )
    }
    for key, state in held.items():
        if key not in wanted:
            _set_pin(t, ns, owner, key, state, 0, 0)
    for key in wanted:
        if held.get(key) != (1, 0):
            _set_pin(t, ns, owner, key, held.get(key), 1, 0)


# -- upgrade and checks ----------------------------------------------------------------------


def migrate_v1(t: Transaction) -> None:
    """Move a schema-1 file (one table ``entries``, no namespaces) into the schema-2 tables."""
    conn = t.conn
    conn.execute("DROP INDEX IF EXISTS entries_lru")
    conn.execute("DROP INDEX IF EXISTS entries_ttl")
    conn.execute("ALTER TABLE entries RENAME TO entries_v1")
    create_schema(conn)
    rows = conn.execute(
        "SELECT key, created, accessed, content FROM entries_v1 ORDER BY access_seq"
    ).fetchall()
    for key, created, accessed, content in rows:
        data = bytes(content)
        t.now = accessed
        insert(t, DEFAULT_NAMESPACE, key, data, extract_keys(data.decode(*TEXT_ENCODING)))
        conn.execute(
            "UPDATE entries SET created = ? WHERE ns = ? AND key = ?", (created, DEFAULT_NAMESPACE, key)
        )
    conn.execute("DROP TABLE entries_v1")


def verify(conn: sqlite3.Connection) -> list[str]:
    """Every inconsistency in the file: SQLite's integrity check, the byte and hold counts, each key."""
    problems = [row[0] for row in conn.execute("PRAGMA integrity_check") if row[0] != "ok"]
    meta = dict(conn.execute("SELECT name, value FROM meta").fetchall())
    total = conn.execute("SELECT COALESCE(SUM(size), 0) FROM entries").fetchone()[0]
    if meta.get("bytes") != total:
        problems.append(f"byte count {meta.get('bytes')} != {total} bytes stored")
    wrong = conn.execute(
        "SELECT ns, key, holds, (SELECT COUNT(*) FROM pins p WHERE p.ns = e.ns AND p.key = e.key)"
        " + (SELECT COUNT(*) FROM links l WHERE l.ns = e.ns AND l.child = e.key) AS expected"
        " FROM entries e WHERE holds != expected"
    ).fetchall()
    problems += [f"entry {ns}/{key}: holds {holds} != {expected}" for ns, key, holds, expected in wrong]
    for ns, key, content in conn.execute("SELECT ns, key, content FROM entries"):
        try:
            intact = archive_key(bytes(content).decode(*TEXT_ENCODING)) == key
        except UnicodeDecodeError:
            intact = False
        if not intact:
            problems.append(f"entry {ns}/{key}: content does not match its key")
    return problems
