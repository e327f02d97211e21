"""The SQLite file behind :class:`~ctxrecover.archive.DiskArchive`: opening, creating, transactions.

A file is only ever used as an archive when it *is* one: a new archive is
written whole to a scratch file and linked into place, so an empty (0-byte)
or foreign file at the path is always an error naming it, never a fresh
archive. A file that cannot be written (permissions, a read-only mount) opens
read-only, so recall still works. Reads never take a write lock: the LRU
touch of a read is kept in memory and written by the next write transaction
(best effort), so reads keep working on a full disk and on a read-only copy.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ctxrecover.archive import entries
from ctxrecover.archive.entries import Transaction
from ctxrecover.errors import ArchiveCorruptError, ArchiveError, ArchiveWriteError

__all__ = ["ArchiveFile", "Transaction"]

_T = TypeVar("_T")

SQLITE_HEADER = b"SQLite format 3\x00"
APPLICATION_ID = 0x43435231  # "CCR1": marks a file as a ctxrecover archive
SCHEMA_VERSION = 2  # 1 (user_version 0): one namespace, no pins; 2: namespaces, pins, links
CORRUPT_ADVICE = (
    "move the file aside (nothing was deleted) to start a fresh archive, "
    "or fix its permissions if it should be readable"
)
# sqlite error names by what they mean for the caller (prefix match: SQLITE_IOERR_WRITE, …).
BUSY_ERRORS = ("SQLITE_BUSY", "SQLITE_LOCKED")
WRITE_ERRORS = ("SQLITE_FULL", "SQLITE_READONLY", "SQLITE_IOERR", "SQLITE_CANTOPEN", "SQLITE_PERM")
READ_ONLY_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)


class ArchiveFile:
    """One connection to an archive file, shared by the :class:`DiskArchive` views opened on it."""

    def __init__(
        self,
        path: Path,
        *,
        ttl_seconds: float | None,
        clock: Callable[[], float],
        busy_timeout_s: float,
        read_only: bool,
    ) -> None:
        self.path = path
        self.ttl_seconds = ttl_seconds
        self.clock = clock
        self.lock = threading.RLock()
        self.users = 1
        self.touched: dict[tuple[str, str], float] = {}  # LRU touches of reads, written by the next write
        self.read_only = read_only or not self._prepare(path, read_only=read_only)
        self.conn: sqlite3.Connection | None = self._connect(busy_timeout_s)
        try:
            self._check_schema()
            if not self.read_only:
                self._expire_on_open()
        except BaseException:
            self.close()
            raise

    def _expire_on_open(self) -> None:
        """Expire what outlived the TTL — best effort: a full disk or a busy writer must not stop reads."""
        try:
            self.write(lambda _t: None)
        except ArchiveCorruptError:
            raise
        except ArchiveError:
            pass  # the next write expires them

    # -- errors ---------------------------------------------------------------------
    def corrupt(self, reason: str, cause: BaseException | None = None) -> ArchiveCorruptError:
        error = ArchiveCorruptError(
            f"CCR archive {self.path} cannot be used: {reason} — {CORRUPT_ADVICE}", path=str(self.path)
        )
        error.__cause__ = cause
        return error

    def translate(self, exc: sqlite3.Error, *, writing: bool) -> ArchiveError:
        """An sqlite error as the typed error it means: busy, cannot write now, or an unusable file."""
        name = getattr(exc, "sqlite_errorname", None) or ""
        if name.startswith(BUSY_ERRORS):
            return ArchiveError(f"CCR archive {self.path} is busy (another writer holds it): {exc}")
        if writing and name.startswith(WRITE_ERRORS):
            return ArchiveWriteError(
                f"CCR archive {self.path} cannot be written ({exc}) — "
                f"nothing was stored and nothing was cut; "
                f"free disk space or fix the file's permissions (reads still work)",
                path=str(self.path),
            )
        if name or type(exc) is sqlite3.DatabaseError:
            return self.corrupt(str(exc), exc)
        return ArchiveError(f"CCR archive {self.path}: {exc}")

    def refuse_write(self) -> ArchiveWriteError:
        return ArchiveWriteError(
            f"CCR archive {self.path} is open read-only — nothing was stored and nothing was cut; "
            f"open a writable archive to compact",
            path=str(self.path),
        )

    # -- opening ----------------------------------------------------------------------
    def _prepare(self, path: Path, *, read_only: bool) -> bool:
        """Check the file is an SQLite file (creating a new archive when missing); True when writable."""
        if path.is_dir():
            raise self.corrupt("it is a directory, not a file")
        if not path.exists():
            if read_only:
                raise self.corrupt("it does not exist (a read-only archive must be an existing file)")
            self._create(path)
            return True
        try:
            with open(path, "rb") as probe:
                header = probe.read(len(SQLITE_HEADER))
        except OSError as exc:
            raise self.corrupt(f"it cannot be opened for reading ({exc})", exc) from exc
        if not header:
            raise self.corrupt("it is empty (0 bytes) — an archive file is never empty, so this is not one")
        if header != SQLITE_HEADER:
            raise self.corrupt("it is not an SQLite database")
        if read_only:
            return False
        try:
            os.close(os.open(path, os.O_RDWR))
        except OSError as exc:
            if exc.errno in READ_ONLY_ERRNOS:
                return False  # a read-only copy or mount: recall still works
            raise self.corrupt(f"it cannot be opened ({exc})", exc) from exc
        return True

    def _create(self, path: Path) -> None:
        """Write a complete empty archive to a scratch file, then link it into place (never 0 bytes)."""
        scratch = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.new")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(scratch, isolation_level=None)
            try:
                conn.execute("BEGIN IMMEDIATE")
                entries.create_schema(conn)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            finally:
                conn.close()
            try:
                os.link(scratch, path)  # fails when another process created it first: use theirs
            except FileExistsError:
                pass
            except OSError:  # no hard links on this file system
                if not path.exists():
                    os.replace(scratch, path)
            _fsync_directory(path.parent)
        except (OSError, sqlite3.Error) as exc:
            raise self.corrupt(f"it cannot be opened for reading and writing ({exc})", exc) from exc
        finally:
            try:
                scratch.unlink(missing_ok=True)
            except OSError:
                pass  # its directory could not even be created

    def _connect(self, busy_timeout_s: float) -> sqlite3.Connection:
        if self.read_only:
            uri = self.path.resolve().as_uri()
            try:
                conn = self._open_uri(f"{uri}?mode=ro", busy_timeout_s)
            except sqlite3.Error:  # a WAL file whose -shm cannot be created here: read it as immutable
                conn = self._open_uri(f"{uri}?mode=ro&immutable=1", busy_timeout_s)
            return conn
        try:
            conn = sqlite3.connect(
                self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        except sqlite3.Error as exc:
            raise self.translate(exc, writing=False) from exc
        return conn

    def _open_uri(self, uri: str, busy_timeout_s: float) -> sqlite3.Connection:
        conn = sqlite3.connect(
            uri, uri=True, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        except sqlite3.Error:
            conn.close()
            raise
        return conn

    def _check_schema(self) -> None:
        conn = self.connection()
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            if app_id != APPLICATION_ID:
                raise self.corrupt("it is an SQLite database of another application")
            version = conn.execute("PRAGMA user_version").fetchone()[0] or 1
            if version > SCHEMA_VERSION:
                raise self.corrupt(f"it was written by a newer ctxrecover (archive schema {version})")
            if not self.read_only:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = FULL")
            if version < SCHEMA_VERSION:
                if self.read_only:
                    raise self.corrupt(
                        "it was written by an older ctxrecover; open it writable once to upgrade it"
                    )
                self._migrate()
        except sqlite3.Error as exc:
            raise self.translate(exc, writing=False) from exc

    def _migrate(self) -> None:
        """Schema 1 → 2: every entry into the default namespace, links computed (one transaction)."""

        def upgrade(t: Transaction) -> None:
            entries.migrate_v1(t)
            t.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

        self.write(upgrade, upgrade=True)

    # -- transactions -------------------------------------------------------------------
    def connection(self) -> sqlite3.Connection:
        if self.conn is None:
            raise ArchiveError(f"CCR archive {self.path} is closed")
        return self.conn

    def write(
        self, action: Callable[[Transaction], _T], *, durable: bool = True, upgrade: bool = False
    ) -> _T:
        """Run ``action`` in one IMMEDIATE transaction and return after COMMIT.

        First the pending LRU touches are written and expired entries removed.
        ``durable=False`` commits with ``synchronous=NORMAL`` (atomic, may roll
        back on power loss) for bookkeeping whose loss is safe (pins).
        """
        with self.lock:
            conn = self.connection()
            if self.read_only:
                raise self.refuse_write()
            touched, self.touched = self.touched, {}
            try:
                if not durable:
                    conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute("BEGIN IMMEDIATE")
                try:
                    now = self.clock()
                    t = Transaction(conn, now, 0, 0) if upgrade else entries.begin(conn, now)
                    if not upgrade:
                        entries.apply_touches(t, touched)
                        if self.ttl_seconds is not None:
                            entries.expire(t, now - self.ttl_seconds)
                        t.seq_start = t.seq
                    result = action(t)
                    entries.finish(t)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                finally:
                    if not durable:
                        conn.execute("PRAGMA synchronous = FULL")
            except sqlite3.Error as exc:
                self._keep_touches(touched)
                raise self.translate(exc, writing=True) from exc
            except BaseException:
                self._keep_touches(touched)
                raise
            return result

    def read(self, action: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``action`` outside any write transaction (never takes the write lock)."""
        with self.lock:
            conn = self.connection()
            try:
                return action(conn)
            except sqlite3.Error as exc:
                raise self.translate(exc, writing=False) from exc

    def touch(self, ns: str, key: str) -> None:
        """Record a read for LRU and TTL; written by the next write transaction."""
        if not self.read_only:
            with self.lock:
                self.touched.pop((ns, key), None)  # re-insert: dict order is the access order
                self.touched[(ns, key)] = self.clock()

    def last_touch(self, ns: str, key: str) -> float | None:
        return self.touched.get((ns, key))

    def _keep_touches(self, touched: dict[tuple[str, str], float]) -> None:
        for item, when in touched.items():
            self.touched.setdefault(item, when)

    def expired(self, accessed: float) -> bool:
        return self.ttl_seconds is not None and accessed < self.clock() - self.ttl_seconds

    def release(self) -> None:
        """One view is done with the file; the last one closes it (pending touches written best-effort)."""
        with self.lock:
            self.users -= 1
            if self.users <= 0:
                self.close()

    def close(self) -> None:
        with self.lock:
            if self.conn is None:
                return
            if self.touched and not self.read_only:
                try:
                    self.write(lambda _t: None, durable=False)
                except ArchiveError:
                    pass  # best effort: a touch is an LRU hint, never content
            self.conn.close()
            self.conn = None


def _fsync_directory(directory: Path) -> None:
    try:
        handle = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)
