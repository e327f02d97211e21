"""How full a capped archive is of what live histories reach, who holds it, and what frees room.

A :class:`~ctxrecover.archive.DiskArchive` never evicts an entry a live history
reaches, so a session whose history reaches more than ``max_bytes`` can no longer
cut (:class:`~ctxrecover.errors.ArchiveFullError`). :meth:`DiskArchive.pressure`
reports the file as it is: the bytes each owner (one session, in one namespace)
reaches from its pins, directly or through other entries, the bytes only it reaches
(what releasing it frees), and the exact step that makes room —
:meth:`ArchivePressure.advice`. A :class:`~ctxrecover.archive.SessionArchive` hands the
report to its ``on_pressure`` callback once, when what live histories hold passes
:data:`PRESSURE_WARN_FRACTION` of ``max_bytes``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ctxrecover.sizes import MIB, format_payload_size

__all__ = ["PRESSURE_WARN_FRACTION", "ArchiveHolder", "ArchivePressure", "suggested_max_bytes"]

PRESSURE_WARN_FRACTION = 0.8  # warn once when live histories hold this share of max_bytes
MAX_HOLDERS_SHOWN = 5  # holders named in a message; the rest are counted
MAX_RELEASES_SHOWN = 3  # release steps named in a message


@dataclass(frozen=True, slots=True)
class ArchiveHolder:
    """One owner (a session) of an archive file: the bytes it reaches from its pins, and of those
    the bytes no other owner reaches (what :meth:`~ctxrecover.archive.DiskArchive.release` frees)."""

    namespace: str
    owner: str
    held_bytes: int
    only_here_bytes: int


def suggested_max_bytes(required: int, max_bytes: int) -> int:
    """A cap that holds ``required`` bytes below the warning line: whole MiB, above ``max_bytes``."""
    whole_mib = math.ceil(required / PRESSURE_WARN_FRACTION / MIB) * MIB
    return max(whole_mib, (max_bytes // MIB + 1) * MIB)


@dataclass(frozen=True, slots=True)
class ArchivePressure:
    """One archive file as its owners hold it (all namespaces: ``max_bytes`` bounds the file).

    ``owner`` and ``namespace`` name the session asking (``owner`` None: no session).
    ``held_bytes`` is what any owner reaches, ``session_bytes`` what the asking session
    reaches, ``others_bytes`` what other owners reach (an entry reached by several counted
    once in each); ``holders`` are sorted by the bytes they reach, largest first.

    >>> rows = [("default", "a1", "k1", 900_000), ("default", "b2", "k1", 900_000),
    ...         ("default", "b2", "k2", 40_000)]
    >>> report = ArchivePressure.from_reach(rows, path="ccr.sqlite", max_bytes=1 << 20,
    ...                                     total_bytes=990_000, owner="a1", namespace="default")
    >>> report.held_percent, report.session_bytes, report.others_bytes
    (89, 900000, 940000)
    >>> report.holders_text()
    "session 'b2' 918.0 KB, this session 878.9 KB"
    """

    path: str
    max_bytes: int
    total_bytes: int
    held_bytes: int
    session_bytes: int
    others_bytes: int
    owner: str | None
    namespace: str
    holders: tuple[ArchiveHolder, ...]

    @classmethod
    def from_reach(
        cls,
        reach: Iterable[tuple[str, str, str, int]],
        *,
        path: str,
        max_bytes: int,
        total_bytes: int,
        owner: str | None,
        namespace: str,
    ) -> ArchivePressure:
        """The report from ``(namespace, owner, key, size)`` rows: every entry each owner reaches."""
        owners_of: dict[tuple[str, str], set[tuple[str, str]]] = {}
        size_of: dict[tuple[str, str], int] = {}
        for ns, holder, key, size in reach:
            owners_of.setdefault((ns, key), set()).add((ns, holder))
            size_of[(ns, key)] = size
        held: dict[tuple[str, str], int] = {}
        only: dict[tuple[str, str], int] = {}
        for entry, owners in owners_of.items():
            for who in owners:
                held[who] = held.get(who, 0) + size_of[entry]
                if len(owners) == 1:
                    only[who] = only.get(who, 0) + size_of[entry]
        holders = sorted(
            (ArchiveHolder(ns, who, held[(ns, who)], only.get((ns, who), 0)) for ns, who in held),
            key=lambda h: (-h.held_bytes, h.namespace, h.owner),
        )
        asking = {(namespace, owner)} if owner is not None else set()
        mine = sum(size_of[entry] for entry, owners in owners_of.items() if owners & asking)
        others = sum(size_of[entry] for entry, owners in owners_of.items() if owners - asking)
        return cls(
            path,
            max_bytes,
            total_bytes,
            sum(size_of.values()),
            mine,
            others,
            owner,
            namespace,
            tuple(holders),
        )

    @property
    def held_percent(self) -> int:
        """What live histories hold, in whole percent of ``max_bytes`` (rounded down)."""
        return self.held_bytes * 100 // self.max_bytes

    def _is_asking(self, holder: ArchiveHolder) -> bool:
        return holder.owner == self.owner and holder.namespace == self.namespace

    def notice_fields(self) -> dict[str, object]:
        """The values a notice names (sizes formatted), for ``TEXT % report.notice_fields()``."""
        return {
            "path": self.path,
            "percent": self.held_percent,
            "held": format_payload_size(self.held_bytes),
            "max_bytes": format_payload_size(self.max_bytes),
            "session": format_payload_size(self.session_bytes),
            "others": format_payload_size(self.others_bytes),
            "holders": self.holders_text(),
            "advice": self.advice(),
        }

    def holders_text(self) -> str:
        """Who holds what: ``this session 1.0 MB, session 'b2' 40.0 KB (namespace 'bob')``."""
        if not self.holders:
            return "no session holds anything"
        parts = []
        for holder in self.holders[:MAX_HOLDERS_SHOWN]:
            who = "this session" if self._is_asking(holder) else f"session {holder.owner!r}"
            where = "" if holder.namespace == self.namespace else f" (namespace {holder.namespace!r})"
            parts.append(f"{who} {format_payload_size(holder.held_bytes)}{where}")
        rest = self.holders[MAX_HOLDERS_SHOWN:]
        if rest:
            parts.append(
                f"{len(rest)} more session(s) {format_payload_size(sum(h.held_bytes for h in rest))}"
            )
        return ", ".join(parts)

    def advice(self, needed: int = 0) -> str:
        """The exact steps that make room for ``needed`` more bytes: release other sessions, then a cap."""
        cap = suggested_max_bytes(self.held_bytes + needed, self.max_bytes)
        reopen = f"DiskArchive({self.path!r}, max_bytes={cap})"
        releases = []
        for holder in self.holders:
            if self._is_asking(holder) or not holder.only_here_bytes:
                continue
            handle = "store" if holder.namespace == self.namespace else f"store.view({holder.namespace!r})"
            releases.append(
                f"{handle}.release({holder.owner!r}) frees {format_payload_size(holder.only_here_bytes)}"
            )
        grow = f"open it with a larger max_bytes: {reopen} ({format_payload_size(cap)})"
        if not releases:
            return f"to make room, {grow} — no other session holds anything a release would free"
        shown = "; ".join(releases[:MAX_RELEASES_SHOWN])
        more = (
            f" (and {len(releases) - MAX_RELEASES_SHOWN} more)" if len(releases) > MAX_RELEASES_SHOWN else ""
        )
        return f"to make room, release sessions you will not resume — {shown}{more} — or {grow}"
