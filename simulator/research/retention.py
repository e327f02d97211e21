"""Retention probes, computed independently of the library's bookkeeping.

:func:`chars_lost` (and :func:`field_losses`, per field) counts the original
pieces — roles, contents, tool names, call ids, arguments, image bytes — whose
own occurrence neither the final history nor recall from its ``<<ccr:KEY>>``
markers (followed transitively) gives back: :class:`~simulator.research.ledger.LossLedger`,
occurrences not substrings. An archived entry that no marker reaches counts as
lost: the model could never recall it. :func:`fact_survival` asks a looser
question on purpose: is a tagged fact's text anywhere in the history or in
what recall can reach?

>>> from ctxrecover.archive import MemoryArchive, marker
>>> from ctxrecover.messages import Message
>>> store = MemoryArchive()
>>> original = [Message.user("go"), Message.assistant("a long answer")]
>>> final = [Message.user("go"), Message.assistant(f"[cut {marker(store.put('a long answer'))}]")]
>>> chars_lost(original, final, store), chars_lost(original, final[:1], store)
(0, 22)
>>> field_losses(original, final[:1], store).nonzero()
{'role': 9, 'content': 13}
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from ctxrecover.archive import extract_keys
from ctxrecover.passes.pairing import validate_pairing
from simulator.research.ledger import Losses, LossLedger

if TYPE_CHECKING:
    from ctxrecover.archive import Archive
    from ctxrecover.messages import Message

__all__ = [
    "chars_lost",
    "fact_survival",
    "field_losses",
    "recall_reachability",
    "summary_growth",
    "tool_pair_validity",
]


TEXT_SEPARATOR = "\x00"  # between texts of the haystack, so no fact matches across two of them


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


def field_losses(original: Sequence[Message], final: Sequence[Message], archive: Archive | None) -> Losses:
    """Chars of ``original`` lost per field: occurrences neither ``final`` nor recall from it give back.

    One-shot use of :class:`~simulator.research.ledger.LossLedger` (the replay's
    recorder keeps one incrementally, and counts archive writes too, which makes
    it exact when identical content is archived several times).
    """
    ledger = LossLedger(archive)
    ledger.add_originals(original)
    ledger.observe(final)
    return ledger.losses


def chars_lost(original: Sequence[Message], final: Sequence[Message], archive: Archive | None) -> int:
    """Chars of ``original`` that neither the final history nor recall can give back (all fields).

    Occurrences, not substrings: a dropped message quoted inside a kept one is
    lost, and so is one of two identical messages when only one occurrence
    survives. See :func:`field_losses` for the split per field.
    """
    return field_losses(original, final, archive).total


def recall_reachability(final: Sequence[Message], archive: Archive | None) -> float:
    """Share of the distinct markers in ``final`` whose key the archive resolves (1.0 with none)."""
    keys = list(dict.fromkeys(key for text in _texts(final) for key in extract_keys(text)))
    if not keys:
        return 1.0
    if archive is None:
        return 0.0
    return sum(archive.get(key) is not None for key in keys) / len(keys)


def fact_survival(facts: Iterable[_Fact], final: Sequence[Message], archive: Archive | None) -> float:
    """Share of ``facts`` whose ``.value`` is in ``final`` or recallable from it (1.0 with none).

    A fact survives when its text occurs anywhere in a final-history text or in an
    archive entry reachable from the final history's markers (a substring test: a
    fact is a detail inside a message, such as a path or a ticket id).
    """
    values = [fact.value for fact in facts]
    if not values:
        return 1.0
    final_texts = list(_texts(final))
    haystack = TEXT_SEPARATOR.join(final_texts + _reachable_entries(final_texts, archive))
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
