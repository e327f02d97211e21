"""A durable CCR archive in one SQLite file (SPEC §4), safe to share and to cap.

Guarantees:

- **Durable before a cut**: ``put`` returns only after its transaction committed
  (WAL, ``synchronous=FULL``).
- **Nothing a live history reaches is evicted.** A session tells the store which
  keys its history holds (:meth:`DiskArchive.pin`, done for you by
  :class:`~ctxrecover.archive.SessionArchive`); entries reached from them through
  other entries (a range's members, the transcript a summary points to) are held
  too. The size cap, LRU and TTL take only unheld entries. A put that cannot fit
  otherwise raises :class:`~ctxrecover.errors.ArchiveFullError` and stores
  nothing, before anything is cut; its message says which sessions hold what and
  the exact step that makes room (:meth:`DiskArchive.pressure` reports it any time).
- **Namespaces**: each handle reads and writes one namespace of the file
  (``namespace=``, :meth:`DiskArchive.view`). Entries are stored per namespace —
  never deduplicated across them — so one namespace can neither read another's
  content by key nor learn whether a guessed text is stored there;
  :meth:`DiskArchive.share` copies entries across explicitly.
- **Verified reads**: ``get`` re-hashes what it read; altered content raises
  :class:`~ctxrecover.errors.ArchiveIntegrityError` naming key and file.
- **Reads never write**: they work on a read-only file and on a full disk.

>>> import tempfile, pathlib
>>> with DiskArchive(pathlib.Path(tempfile.mkdtemp()) / "ccr.sqlite") as store:
...     key = store.put("a long tool result")
...     store.get(key)
'a long tool result'
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from ctxrecover.archive import entries
from ctxrecover.archive.entries import TEXT_ENCODING
from ctxrecover.archive.keys import MARKER_RE, archive_key, extract_keys, has_marker
from ctxrecover.archive.pressure import ArchivePressure, suggested_max_bytes
from ctxrecover.archive.sqlite_file import ArchiveFile, Transaction
from ctxrecover.archive.store import DEFAULT_NAMESPACE, check_namespace
from ctxrecover.errors import (
    ArchiveError,
    ArchiveFullError,
    ArchiveIntegrityError,
    ArgumentTypeError,
    ConfigError,
)
from ctxrecover.sizes import MIB, format_payload_size

__all__ = ["ArchiveStats", "DiskArchive"]

DEFAULT_MAX_BYTES = 256 * MIB
ENTRY_CAP_DIVISOR = 4  # per-entry cap = max_bytes // 4
DEFAULT_TTL_SECONDS = 168 * 3600.0
DEFAULT_BUSY_TIMEOUT_S = 30.0
MIN_MAX_BYTES = ENTRY_CAP_DIVISOR


class _Refused(Exception):
    """Inside a write transaction: ``needed`` bytes do not fit without evicting held entries (the
    transaction rolls back; the caller raises :class:`ArchiveFullError` with a fresh report)."""

    def __init__(self, needed: int) -> None:
        super().__init__(needed)
        self.needed = needed


@dataclass(frozen=True, slots=True)
class ArchiveStats:
    """Entries of one namespace and the bytes of their UTF-8 content; ``pinned_*`` are those held
    by a live history (directly or through another entry), which eviction never takes."""

    entries: int
    bytes: int
    pinned_entries: int = 0
    pinned_bytes: int = 0


class DiskArchive:
    """The :class:`~ctxrecover.archive.Archive` protocol on an SQLite file, in one namespace.

    ``clock`` (default :func:`time.time`) drives TTL and is injectable for tests;
    ``ttl_seconds=None`` disables expiry. ``read_only=True`` (automatic when the
    file cannot be written) opens it for recall only: writes raise
    :class:`~ctxrecover.errors.ArchiveWriteError`. A missing file becomes a new
    archive; an empty, corrupt, foreign or unreadable one raises
    :class:`~ctxrecover.errors.ArchiveCorruptError` naming it and is left untouched.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        namespace: str = DEFAULT_NAMESPACE,
        max_bytes: int = DEFAULT_MAX_BYTES,
        ttl_seconds: float | None = DEFAULT_TTL_SECONDS,
        clock: Callable[[], float] = time.time,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
        read_only: bool = False,
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
        check_namespace(namespace)
        file = ArchiveFile(
            Path(path),
            ttl_seconds=ttl_seconds,
            clock=clock,
            busy_timeout_s=busy_timeout_s,
            read_only=read_only,
        )
        self._attach(file, namespace, max_bytes)

    def _attach(self, file: ArchiveFile, namespace: str, max_bytes: int) -> None:
        self._file = file
        self._open = True
        self.path = file.path
        self.namespace = namespace
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_bytes // ENTRY_CAP_DIVISOR
        self.ttl_seconds = file.ttl_seconds

    @property
    def read_only(self) -> bool:
        """True when the file was opened for recall only."""
        return self._file.read_only

    # -- the Archive protocol -------------------------------------------------

    def put(self, content: str, *, owner: str | None = None) -> str:
        """Store ``content`` durably and return its key (idempotent; refreshes LRU and TTL).

        With ``owner``, the entry is held for that owner until its next
        :meth:`pin` (a cut in progress cannot lose what it just stored). Raises
        :class:`ArchiveFullError` when it cannot fit without evicting a held
        entry (or is over the per-entry cap), :class:`ArchiveWriteError` when the
        file cannot be written; nothing is stored then.
        """
        if not isinstance(content, str):
            raise ArgumentTypeError(f"DiskArchive.put needs a str, got {type(content).__name__}")
        key = archive_key(content)
        self._store([(key, content)], owner)
        return key

    def put_keyed(self, entries: Sequence[tuple[str, str]], *, owner: str | None = None) -> None:
        """Store ``(key, content)`` pairs whose keys are :func:`archive_key` of their content, in one
        durable transaction (all or nothing). ``get`` verifies every key when it reads."""
        self._store(list(dict(entries).items()), owner)

    def archive(self, content: str, *, owner: str | None = None) -> str | None:
        """Like :meth:`put`, but refuses (``None``) content that already carries a marker."""
        if has_marker(content):
            return None
        return self.put(content, owner=owner)

    def get(self, key: str) -> str | None:
        """The original content, or ``None`` when unknown, evicted or expired.

        Never writes (the LRU/TTL touch is written by the next write). Raises
        :class:`ArchiveIntegrityError` when the stored bytes do not hash to ``key``.
        """
        if not _is_key(key):
            return None
        row = self._use().read(
            lambda conn: conn.execute(
                "SELECT content, accessed, holds FROM entries WHERE ns = ? AND key = ?", (self.namespace, key)
            ).fetchone()
        )
        if row is None or self._expired(key, row[1], row[2]):
            return None
        text = self._verified(key, bytes(row[0]))
        self._file.touch(self.namespace, key)
        return text

    def __contains__(self, key: object) -> bool:
        if not _is_key(key):
            return False
        row = self._use().read(
            lambda conn: conn.execute(
                "SELECT accessed, holds FROM entries WHERE ns = ? AND key = ?", (self.namespace, key)
            ).fetchone()
        )
        return row is not None and not self._expired(str(key), row[0], row[1])

    # -- namespaces ---------------------------------------------------------------

    def view(self, namespace: str) -> DiskArchive:
        """A handle on the same file (and connection) in another namespace; close each handle."""
        check_namespace(namespace)
        with self._file.lock:
            self._use().connection()
            self._file.users += 1
        other = object.__new__(DiskArchive)
        other._attach(self._file, namespace, self.max_bytes)
        return other

    def share(self, keys: Iterable[str], namespace: str) -> tuple[str, ...]:
        """Copy the entries under ``keys`` — and every entry they reach — into ``namespace``.

        Returns the keys newly stored there. The copies belong to ``namespace``
        (held once its own history reaches them). Raises :class:`ArchiveError`
        when a key is not stored in this namespace.
        """
        check_namespace(namespace)
        roots = list(dict.fromkeys(keys))
        if not all(_is_key(key) for key in roots):
            raise ArchiveError(f"DiskArchive.share needs 16-hex keys, got {roots!r:.200}")

        def copy(t: Transaction) -> tuple[str, ...]:
            copied: list[str] = []
            needed = 0
            frontier, seen = list(reversed(roots)), set()
            while frontier:
                key = frontier.pop()
                if key in seen:
                    continue
                seen.add(key)
                row = t.conn.execute(
                    "SELECT content FROM entries WHERE ns = ? AND key = ?", (self.namespace, key)
                ).fetchone()
                if row is None:
                    if key in roots:
                        raise ArchiveError(
                            f"cannot share ccr:{key} from {self.path}: nothing is stored under it in "
                            f"namespace {self.namespace!r}"
                        )
                    continue
                kids = [
                    child
                    for (child,) in t.conn.execute(
                        "SELECT child FROM links WHERE ns = ? AND parent = ?", (self.namespace, key)
                    )
                ]
                data = bytes(row[0])
                if entries.insert(t, namespace, key, data, kids):
                    copied.append(key)
                    needed += len(data)
                frontier.extend(kids)
            self._evict_or_refuse(t, needed)
            return tuple(copied)

        try:
            return self._use().write(copy)
        except _Refused as refused:
            raise self._full_error(refused.needed, None) from None

    # -- what live histories hold ---------------------------------------------------------

    def pin(
        self, owner: str, added: Iterable[str] = (), removed: Iterable[str] = (), *, reset: bool = False
    ) -> None:
        """Change ``owner``'s live set (the keys its history holds) by ``added`` / ``removed``.

        ``reset=True`` makes ``added`` the whole live set (at a start or a resume).
        Either way ``owner``'s fresh holds end (see :meth:`put`). One transaction,
        O(keys changed); committed atomically but without a full sync: a lost pin
        change is safe, fresh holds are durable with their put. A read-only
        handle keeps no pins (it can evict nothing).
        """
        if self.read_only:
            return
        added, removed = list(added), list(removed)

        def apply(t: Transaction) -> None:
            if reset:
                entries.reset_owner(t, self.namespace, owner, added)
            else:
                entries.pin_live(t, self.namespace, owner, added, removed)

        self._use().write(apply, durable=False)

    def discard(self, keys: Iterable[str]) -> int:
        """Delete the entries of ``keys`` that nothing holds (no owner's pin, no other entry's link):
        what a cancelled turn stored and no history reaches. Returns how many were deleted.

        An entry a deleted one linked to loses that link's hold and is deleted too when it was
        among ``keys``; anything a live history reaches is held, so it is never taken.
        """
        if self.read_only:
            return 0
        wanted = {key for key in keys if _is_key(key)}

        def apply(t: Transaction) -> int:
            deleted = 0
            progress = True
            while progress and wanted:
                progress = False
                for key in sorted(wanted):
                    row = t.conn.execute(
                        "SELECT size, holds FROM entries WHERE ns = ? AND key = ?", (self.namespace, key)
                    ).fetchone()
                    if row is None:
                        wanted.discard(key)
                    elif row[1] == 0:
                        entries.delete(t, self.namespace, key, row[0])
                        wanted.discard(key)
                        deleted += 1
                        progress = True
            return deleted

        return self._use().write(apply, durable=False)

    def release(self, owner: str) -> None:
        """Drop every pin of ``owner`` (a session that will not be resumed): its entries become evictable."""
        self._use().write(lambda t: entries.reset_owner(t, self.namespace, owner, ()), durable=False)

    def pressure(self, owner: str | None = None) -> ArchivePressure:
        """What live histories hold in the whole file, by owner, and what frees room (``owner`` is the
        session asking, in this handle's namespace). Walks every held entry: for reports, not per turn."""
        reach, total = self._use().read(lambda conn: (entries.reach(conn), _total_bytes(conn)))
        return ArchivePressure.from_reach(
            reach,
            path=str(self.path),
            max_bytes=self.max_bytes,
            total_bytes=total,
            owner=owner,
            namespace=self.namespace,
        )

    # -- the rest ---------------------------------------------------------------

    def __len__(self) -> int:
        return self.stats().entries

    def stats(self) -> ArchiveStats:
        """Entries of this namespace, their content bytes, and how many of them are pinned."""
        row = self._use().read(
            lambda conn: conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(size), 0), COALESCE(SUM(holds > 0), 0),"
                " COALESCE(SUM(CASE WHEN holds > 0 THEN size ELSE 0 END), 0) FROM entries WHERE ns = ?",
                (self.namespace,),
            ).fetchone()
        )
        return ArchiveStats(entries=row[0], bytes=row[1], pinned_entries=row[2], pinned_bytes=row[3])

    @property
    def total_bytes(self) -> int:
        """Content bytes in the whole file (every namespace): what ``max_bytes`` bounds."""
        return self._use().read(_total_bytes)

    def verify(self) -> list[str]:
        """Every problem in the file (SQLite's integrity check, bookkeeping, entries not matching
        their key); empty when sound. Reads the whole file."""
        return self._use().read(entries.verify)

    def close(self) -> None:
        """Close this handle; further use raises :class:`ArchiveError`. Idempotent."""
        if self._open:
            self._open = False
            self._file.release()

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
        return f"DiskArchive({str(self.path)!r}, namespace={self.namespace!r}, max_bytes={self.max_bytes})"

    # -- internals ----------------------------------------------------------------

    def _use(self) -> ArchiveFile:
        """The file, unless this handle was closed."""
        if not self._open:
            raise ArchiveError(f"CCR archive {self.path} is closed")
        return self._file

    def _store(self, items: list[tuple[str, str]], owner: str | None) -> None:
        self._use()
        encoded = [(key, content, content.encode(*TEXT_ENCODING)) for key, content in items]
        for _, _, data in encoded:
            if len(data) > self.max_entry_bytes:
                cap = suggested_max_bytes(len(data) * ENTRY_CAP_DIVISOR, self.max_bytes)
                raise self._full(
                    len(data),
                    f"the per-entry cap is {format_payload_size(self.max_entry_bytes)} "
                    f"({self.max_entry_bytes} bytes, max_bytes // {ENTRY_CAP_DIVISOR}) — open the archive "
                    f"with a larger max_bytes: DiskArchive({str(self.path)!r}, max_bytes={cap}) "
                    f"({format_payload_size(cap)})",
                    pinned=0,
                )

        def store(t: Transaction) -> None:
            needed = 0
            for key, content, data in encoded:
                if entries.insert(t, self.namespace, key, data, extract_keys(content)):
                    needed += len(data)
            if owner is not None:
                entries.pin_fresh(t, self.namespace, owner, (key for key, _, _ in encoded))
            self._evict_or_refuse(t, needed)

        try:
            self._use().write(store)
        except _Refused as refused:
            raise self._full_error(refused.needed, owner) from None

    def _evict_or_refuse(self, t: Transaction, needed: int) -> None:
        if not entries.evict(t, self.max_bytes):
            raise _Refused(needed)

    def _full_error(self, needed: int, owner: str | None) -> ArchiveFullError:
        """The refusal of ``needed`` bytes, read after the rollback: who holds what, what frees room."""
        report = self.pressure(owner)
        return self._full(
            needed,
            f"it would not fit under max_bytes ({format_payload_size(self.max_bytes)}) without evicting "
            f"entries a live history still reaches ({format_payload_size(report.held_bytes)} held: "
            f"{report.holders_text()}) — nothing was stored and nothing was cut; {report.advice(needed)}",
            pinned=report.held_bytes,
        )

    def _full(self, needed: int, reason: str, *, pinned: int) -> ArchiveFullError:
        return ArchiveFullError(
            f"cannot archive an entry of {format_payload_size(needed)} ({needed} bytes) "
            f"in {self.path}: {reason}",
            path=str(self.path),
            needed=needed,
            max_bytes=self.max_bytes,
            pinned_bytes=pinned,
        )

    def _expired(self, key: str, accessed: float, holds: int) -> bool:
        if holds:
            return False  # a live history reaches it: never expires
        touched = self._file.last_touch(self.namespace, key)
        return self._file.expired(max(float(accessed), touched or 0.0))

    def _verified(self, key: str, data: bytes) -> str:
        try:
            text = data.decode(*TEXT_ENCODING)
        except UnicodeDecodeError:
            text = None
        if text is None or archive_key(text) != key:
            raise ArchiveIntegrityError(
                f"CCR archive {self.path}: the entry ccr:{key} (namespace {self.namespace!r}) is damaged — "
                f"its content no longer matches its key, so it is not returned; restore the file from a "
                f"backup or recall what else it holds (DiskArchive.verify lists every damaged entry)",
                path=str(self.path),
                key=key,
            )
        return text


def _total_bytes(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT value FROM meta WHERE name = 'bytes'").fetchone()[0])


def _is_key(key: object) -> bool:
    return isinstance(key, str) and MARKER_RE.fullmatch(f"<<ccr:{key}>>") is not None
