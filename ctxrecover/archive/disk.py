"""A durable CCR archive in one SQLite file (SPEC §4).

``put`` returns only after its transaction committed with ``synchronous=FULL``
in WAL mode, so content is on disk **before** the caller cuts the history. The
store is bounded: a total size cap (default 256 MiB), a per-entry cap of a
quarter of it (an entry over the cap raises — content is never dropped
silently), LRU eviction by last access, and a TTL (default 168 h) since last
access. One file may be shared by several threads and processes.

>>> import tempfile, pathlib
>>> with DiskArchive(pathlib.Path(tempfile.mkdtemp()) / "ccr.sqlite") as store:
...     key = store.put("a long tool result")
...     store.get(key)
'a long tool result'
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from ctxrecover.archive.keys import MARKER_RE, archive_key, has_marker
from ctxrecover.errors import ArchiveCorruptError, ArchiveError, ConfigError
from ctxrecover.sizes import MIB, format_payload_size

__all__ = ["ArchiveStats", "DiskArchive"]

_T = TypeVar("_T")

DEFAULT_MAX_BYTES = 256 * MIB
ENTRY_CAP_DIVISOR = 4  # per-entry cap = max_bytes // 4
DEFAULT_TTL_SECONDS = 168 * 3600.0
DEFAULT_BUSY_TIMEOUT_S = 30.0
MIN_MAX_BYTES = ENTRY_CAP_DIVISOR

SQLITE_HEADER = b"SQLite format 3\x00"
APPLICATION_ID = 0x43435231  # "CCR1": marks a file as a ctxrecover archive
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS entries ("
    " key TEXT PRIMARY KEY,"
    " size INTEGER NOT NULL,"
    " created REAL NOT NULL,"
    " accessed REAL NOT NULL,"
    " access_seq INTEGER NOT NULL,"
    " content BLOB NOT NULL)",
    "CREATE INDEX IF NOT EXISTS entries_lru ON entries (access_seq, size)",
    "CREATE INDEX IF NOT EXISTS entries_ttl ON entries (accessed)",
)
# sqlite error names that mean "this file cannot be used", not "try again later".
UNUSABLE_FILE_ERRORS = (
    "SQLITE_NOTADB",
    "SQLITE_CORRUPT",
    "SQLITE_CANTOPEN",
    "SQLITE_READONLY",
    "SQLITE_PERM",
    "SQLITE_IOERR",
    "SQLITE_AUTH",
)
CORRUPT_ADVICE = (
    "move the file aside (nothing was deleted) to start a fresh archive, "
    "or fix its permissions if it should be readable"
)
TEXT_ENCODING = ("utf-8", "surrogatepass")  # round-trips any str, as archive_key hashes it


@dataclass(frozen=True, slots=True)
class ArchiveStats:
    """Entries held and the bytes of their UTF-8 content."""

    entries: int
    bytes: int


class DiskArchive:
    """The :class:`~ctxrecover.archive.Archive` protocol on an SQLite file.

    ``clock`` (default :func:`time.time`) drives TTL and is injectable for tests;
    ``ttl_seconds=None`` disables expiry. A corrupt or unreadable file raises
    :class:`ArchiveCorruptError` naming it and is left untouched.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        ttl_seconds: float | None = DEFAULT_TTL_SECONDS,
        clock: Callable[[], float] = time.time,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    ) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < MIN_MAX_BYTES:
            raise ConfigError(
                f"DiskArchive max_bytes must be an integer >= {MIN_MAX_BYTES} (got {max_bytes!r})"
            )
        if ttl_seconds is not None and not ttl_seconds > 0:
            raise ConfigError(
                f"DiskArchive ttl_seconds must be > 0, or None for no expiry (got {ttl_seconds!r})"
            )
        if not busy_timeout_s >= 0:
            raise ConfigError(f"DiskArchive busy_timeout_s must be >= 0 (got {busy_timeout_s!r})")
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_bytes // ENTRY_CAP_DIVISOR
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = self._open(busy_timeout_s)
        try:
            self._write(self._evict_expired)
        except BaseException:
            self.close()
            raise

    # -- the Archive protocol -------------------------------------------------

    def put(self, content: str) -> str:
        """Store ``content`` durably and return its key (idempotent; refreshes LRU and TTL).

        Raises :class:`ArchiveError` when the entry is over the per-entry cap.
        """
        if not isinstance(content, str):
            raise TypeError(f"DiskArchive.put needs a str, got {type(content).__name__}")
        data = content.encode(*TEXT_ENCODING)
        if len(data) > self.max_entry_bytes:
            raise ArchiveError(
                f"cannot archive an entry of {format_payload_size(len(data))} ({len(data)} bytes) in "
                f"{self.path}: the per-entry cap is {format_payload_size(self.max_entry_bytes)} "
                f"({self.max_entry_bytes} bytes, max_bytes // {ENTRY_CAP_DIVISOR}) — open the archive "
                f"with a larger max_bytes"
            )
        key = archive_key(content)

        def store(conn: sqlite3.Connection, now: float) -> None:
            self._evict_expired(conn, now)
            conn.execute(
                "INSERT INTO entries (key, size, created, accessed, access_seq, content)"
                " VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (key) DO UPDATE SET accessed = excluded.accessed,"
                " access_seq = excluded.access_seq",
                (key, len(data), now, now, _next_seq(conn), data),
            )
            self._evict_lru(conn, keep=key)

        self._write(store)
        return key

    def archive(self, content: str) -> str | None:
        """Like :meth:`put`, but refuses (``None``) content that already carries a marker."""
        if has_marker(content):
            return None
        return self.put(content)

    def get(self, key: str) -> str | None:
        """The original content, or ``None`` when unknown, evicted or expired (refreshes LRU)."""
        if not _is_key(key):
            return None

        def fetch(conn: sqlite3.Connection, now: float) -> bytes | None:
            row = conn.execute("SELECT content, accessed FROM entries WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            if self._expired(row[1], now):
                conn.execute("DELETE FROM entries WHERE key = ?", (key,))
                return None
            conn.execute(
                "UPDATE entries SET accessed = ?, access_seq = ? WHERE key = ?", (now, _next_seq(conn), key)
            )
            return bytes(row[0])

        data = self._write(fetch)
        return None if data is None else data.decode(*TEXT_ENCODING)

    def __contains__(self, key: object) -> bool:
        if not _is_key(key):
            return False
        row = self._read("SELECT accessed FROM entries WHERE key = ?", (key,))
        return row is not None and not self._expired(row[0], self._clock())

    # -- the rest ---------------------------------------------------------------

    def __len__(self) -> int:
        return self.stats().entries

    def stats(self) -> ArchiveStats:
        """Entries held and their total content bytes."""
        row = self._read("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM entries", ())
        assert row is not None
        return ArchiveStats(entries=row[0], bytes=row[1])

    def close(self) -> None:
        """Close the file; further use raises :class:`ArchiveError`. Idempotent."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> DiskArchive:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DiskArchive({str(self.path)!r}, max_bytes={self.max_bytes})"

    # -- internals ----------------------------------------------------------------

    def _corrupt(self, reason: str, cause: BaseException | None = None) -> ArchiveCorruptError:
        error = ArchiveCorruptError(
            f"CCR archive {self.path} cannot be used: {reason} — {CORRUPT_ADVICE}", path=str(self.path)
        )
        error.__cause__ = cause
        return error

    def _translate(self, exc: sqlite3.Error) -> ArchiveError:
        name = getattr(exc, "sqlite_errorname", None)
        unusable = name.startswith(UNUSABLE_FILE_ERRORS) if name else type(exc) is sqlite3.DatabaseError
        if unusable:
            return self._corrupt(str(exc), exc)
        return ArchiveError(f"CCR archive {self.path}: {exc}")

    def _open(self, busy_timeout_s: float) -> sqlite3.Connection:
        if self.path.is_dir():
            raise self._corrupt("it is a directory, not a file")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab+") as probe:  # creates it if missing; never truncates
                probe.seek(0)
                header = probe.read(len(SQLITE_HEADER))
        except OSError as exc:
            raise self._corrupt(f"it cannot be opened for reading and writing ({exc})", exc) from exc
        if header and header != SQLITE_HEADER:
            raise self._corrupt("it is not an SQLite database")
        try:
            conn = sqlite3.connect(
                self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            if tables and app_id != APPLICATION_ID:
                raise self._corrupt("it is an SQLite database of another application")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            if not tables:  # a new file: an existing archive is never rewritten on open
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for statement in SCHEMA:
                        conn.execute(statement)
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
        except ArchiveError:
            conn.close()
            raise
        except sqlite3.Error as exc:
            conn.close()
            raise self._translate(exc) from exc
        return conn

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ArchiveError(f"CCR archive {self.path} is closed")
        return self._conn

    def _write(self, action: Callable[[sqlite3.Connection, float], _T]) -> _T:
        """Run ``action`` in one IMMEDIATE transaction; returns after COMMIT (durable)."""
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = action(conn, self._clock())
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise self._translate(exc) from exc
            return result

    def _read(self, sql: str, params: tuple[object, ...]) -> tuple[object, ...] | None:
        with self._lock:
            conn = self._connection()
            try:
                return conn.execute(sql, params).fetchone()
            except sqlite3.Error as exc:
                raise self._translate(exc) from exc

    def _expired(self, accessed: float, now: float) -> bool:
        return self.ttl_seconds is not None and float(accessed) < now - self.ttl_seconds

    def _evict_expired(self, conn: sqlite3.Connection, now: float) -> None:
        if self.ttl_seconds is not None:
            conn.execute("DELETE FROM entries WHERE accessed < ?", (now - self.ttl_seconds,))

    def _evict_lru(self, conn: sqlite3.Connection, *, keep: str) -> None:
        total = conn.execute("SELECT COALESCE(SUM(size), 0) FROM entries").fetchone()[0]
        if total <= self.max_bytes:
            return
        victims: list[tuple[str]] = []
        cursor = conn.execute("SELECT key, size FROM entries WHERE key != ? ORDER BY access_seq", (keep,))
        for key, size in cursor:
            if total <= self.max_bytes:
                break
            victims.append((key,))
            total -= size
        cursor.close()
        conn.executemany("DELETE FROM entries WHERE key = ?", victims)


def _next_seq(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT COALESCE(MAX(access_seq), 0) + 1 FROM entries").fetchone()[0]


def _is_key(key: object) -> bool:
    return isinstance(key, str) and MARKER_RE.fullmatch(f"<<ccr:{key}>>") is not None
