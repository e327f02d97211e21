"""Retention probes, computed independently of the library's bookkeeping.

:func:`chars_lost` checks every character of the original transcript against the final
history plus the archive entries reachable from its ``<<ccr:KEY>>`` markers (followed
transitively). An archived entry that no marker reaches counts as lost: the model
could never recall it.

>>> from ctxrecover.archive import MemoryArchive, marker
>>> from ctxrecover.messages import Message
>>> store = MemoryArchive()
>>> original = [Message.user("go"), Message.assistant("a long answer")]
>>> final = [Message.user("go"), Message.assistant(f"[cut {marker(store.put('a long answer'))}]")]
>>> chars_lost(original, final, store), chars_lost(original, final[:1], store)
(0, 13)
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from ctxrecover.archive import extract_keys
from ctxrecover.passes.pairing import validate_pairing

if TYPE_CHECKING:

    from ctxrecover.archive import Archive
    from ctxrecover.messages import Message

__all__ = ["chars_lost", "fact_survival", "recall_reachability", "summary_growth", "tool_pair_validity"]


# -- retention probes ----------------------------------------------------------------------------
TEXT_SEPARATOR = "\x00"  # between texts of the haystack, so no match spans two of them
NEXT_MESSAGE_WINDOW = 4096  # chars past the previous hit where the next message is looked for first
PROOF_FILTER_MIN_CHARS = 1_000_000  # below this a full scan is cheaper than building hash sets


# -- retention probes ------------------------------------------------------------------------
class _Fact(Protocol):
    @property
    def value(self) -> str: ...


def _texts(messages: Iterable[Message]) -> Iterator[str]:
    """Every text a message carries: its content and each tool call's arguments."""
    for msg in messages:
        yield msg.content
        for call in msg.tool_calls:
            yield call.arguments


def _reachable_entries(final_texts: Sequence[str], archive: Archive | None) -> list[str]:
    """Archive entries reachable from the markers in ``final_texts``, following markers transitively."""
    if archive is None:
        return []
    queue = deque(dict.fromkeys(key for text in final_texts for key in extract_keys(text)))
    seen = set(queue)
    entries = []
    while queue:
        content = archive.get(queue.popleft())
        if content is None:
            continue
        entries.append(content)
        for key in extract_keys(content):
            if key not in seen:
                seen.add(key)
                queue.append(key)
    return entries


class _Haystack:
    """Substring search over the final history plus its reachable archive entries.

    Fast paths, cheapest first: exact text equality; the next message right after the
    previous hit (dropped ranges are archived in order); filters that prove absence
    (the interior lines and interior whitespace tokens of a substring are whole lines
    and tokens of the haystack; sets of their hashes, built on first need); then one
    scan of the joined haystack, starting at the previous hit.
    """

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.exact = set(texts)
        self.joined = TEXT_SEPARATOR.join(texts)
        self.starts: list[int] = []
        offset = 0
        for text in texts:
            self.starts.append(offset)
            offset += len(text) + len(TEXT_SEPARATOR)
        self.cursor = (0, 0)
        self._line_hashes: set[int] | None = None
        self._token_hashes: set[int] | None = None

    def __contains__(self, piece: str) -> bool:
        if not piece or piece in self.exact:
            return True
        index, position = self.cursor
        if index < len(self.texts):
            hit = self.texts[index].find(piece, position, position + len(piece) + NEXT_MESSAGE_WINDOW)
            if hit >= 0:
                self.cursor = (index, hit + len(piece))
                return True
        if len(self.joined) >= PROOF_FILTER_MIN_CHARS and self._provably_absent(piece):
            return False
        resume = self.starts[index] + position if index < len(self.texts) else 0
        hit = self.joined.find(piece, resume)
        if hit < 0:
            hit = self.joined.find(piece, 0, resume + len(piece))
        if hit < 0:
            return False
        index = bisect.bisect_right(self.starts, hit) - 1
        self.cursor = (index, hit - self.starts[index] + len(piece))
        return True

    def _provably_absent(self, piece: str) -> bool:
        lines = piece.split("\n")[1:-1]
        if lines:
            if self._line_hashes is None:
                self._line_hashes = {hash(line) for text in self.texts for line in text.split("\n")}
            if not self._line_hashes.issuperset(map(hash, lines)):
                return True
        tokens = piece.split()[1:-1]
        if tokens:
            if self._token_hashes is None:
                self._token_hashes = {hash(token) for text in self.texts for token in text.split()}
            if not self._token_hashes.issuperset(map(hash, tokens)):
                return True
        return False


def _haystack(final: Sequence[Message], archive: Archive | None) -> _Haystack:
    final_texts = list(_texts(final))
    return _Haystack(final_texts + _reachable_entries(final_texts, archive))


def chars_lost(original: Sequence[Message], final: Sequence[Message], archive: Archive | None) -> int:
    """Chars of ``original`` that neither the final history nor recall can give back.

    Each message content and tool-call argument text of ``original`` counts as kept
    when it appears as a substring of a final-history text or of an archive entry
    reachable from the final history's markers (transitively); otherwise all its chars
    count as lost. Entries no marker reaches count as lost. Independent of the
    library's own accounting; a 5 MB transcript takes well under a second.
    """
    haystack = _haystack(final, archive)
    return sum(len(piece) for piece in _texts(original) if piece not in haystack)


def recall_reachability(final: Sequence[Message], archive: Archive | None) -> float:
    """Share of the distinct markers in ``final`` whose key the archive resolves (1.0 with none)."""
    keys = list(dict.fromkeys(key for text in _texts(final) for key in extract_keys(text)))
    if not keys:
        return 1.0
    if archive is None:
        return 0.0
    return sum(archive.get(key) is not None for key in keys) / len(keys)


def fact_survival(facts: Iterable[_Fact], final: Sequence[Message], archive: Archive | None) -> float:
    """Share of ``facts`` whose ``.value`` is in ``final`` or recallable from it (1.0 with none)."""
    values = [fact.value for fact in facts]
    if not values:
        return 1.0
    haystack = _haystack(final, archive)
    return sum(value in haystack for value in values) / len(values)


def tool_pair_validity(history: Sequence[Message]) -> bool:
    """True when every tool call is answered exactly once, right after its assistant message."""
    return validate_pairing(list(history))


def summary_growth(summaries_chars: Sequence[int]) -> float:
    """Size of the last summary over the first: 1.0 is stable, above 1 summaries keep growing.

    Fewer than two summaries → 1.0.

    >>> summary_growth([1000, 1200, 1500])
    1.5
    """
    if any(size < 0 for size in summaries_chars):
        raise ValueError(f"summary sizes are char counts (>= 0), got {list(summaries_chars)}")
    if len(summaries_chars) < 2:
        return 1.0
    if summaries_chars[0] == 0:
        raise ValueError("the first summary is empty, so growth is undefined; pass non-empty summary sizes")
    return summaries_chars[-1] / summaries_chars[0]
