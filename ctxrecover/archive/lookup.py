"""Recall: turn markers, keys or a JSON request back into the archived originals (SPEC §4).

:func:`recall` is lenient about what it accepts and never raises for an
unknown or evicted key: it names it in the result.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from ctxrecover.archive.ranges import UNKNOWN_KEY_TEXT, expand_entry
from ctxrecover.archive.store import Archive
from ctxrecover.messages import MAX_ARGUMENT_DEPTH, json_depth

__all__ = ["RECALL_JSON_FIELDS", "RecallResult", "parse_recall_keys", "recall"]

_LOOSE_KEY_RE = re.compile(r"(?:<<)?(?:ccr:)?\b([0-9a-f]{16})\b(?:>>)?")
RECALL_JSON_FIELDS = ("key", "keys", "marker", "markers", "ccr", "id")


@dataclass(frozen=True, slots=True)
class RecallResult:
    """What :func:`recall` found: originals by key, and the keys it did not know."""

    found: dict[str, str]
    missing: tuple[str, ...]

    @property
    def text(self) -> str:
        """One text for the model: each original, or a clear unknown/evicted line."""
        parts = [self.found[k] for k in self.found]
        parts += [UNKNOWN_KEY_TEXT.format(key=k) for k in self.missing]
        return "\n\n".join(parts)


def _keys_from_json(value: object) -> Iterable[str]:
    """Keys in the recall fields of parsed JSON, depth first, without recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield from (m.group(1) for m in _LOOSE_KEY_RE.finditer(item.lower()))
        elif isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed([item[name] for name in RECALL_JSON_FIELDS if name in item]))


def parse_recall_keys(query: str) -> list[str]:
    """Keys in a lenient recall request, in order, without repeats.

    Accepts ``<<ccr:KEY>>``, ``ccr:KEY``, a bare 16-hex key, several of them,
    or JSON with ``key|keys|marker|markers|ccr|id`` (JSON without those
    fields is scanned like text). Never raises.
    """
    if not isinstance(query, str):
        return []
    stripped = query.strip()
    keys: list[str] = []
    if stripped[:1] in ("{", "[") and json_depth(stripped) <= MAX_ARGUMENT_DEPTH:
        try:
            keys = list(_keys_from_json(json.loads(stripped)))
        except ValueError:
            keys = []
    if not keys:  # plain text, broken JSON, or JSON whose fields we do not know: scan the text
        keys = [m.group(1) for m in _LOOSE_KEY_RE.finditer(stripped.lower())]
    return list(dict.fromkeys(keys))


def recall(store: Archive, query: str) -> RecallResult:
    """Look up every key in a lenient ``query``; unknown or evicted keys are reported, not raised.

    A range entry (:func:`archive_range`) comes back expanded into the full
    transcript of its messages; a member that is unknown or evicted is named in
    place and listed in ``missing``.
    """
    found: dict[str, str] = {}
    missing: dict[str, None] = {}
    for key in parse_recall_keys(query):
        content = store.get(key)
        if content is None:
            missing[key] = None
        else:
            found[key] = expand_entry(store, content, missing)
    return RecallResult(found=found, missing=tuple(missing))
