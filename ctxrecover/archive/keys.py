"""Content keys and ``<<ccr:KEY>>`` markers (SPEC §4).

A key is the first 16 hex chars of the sha256 of the content; the history
refers to an archived entry by its marker.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["KEY_LENGTH", "MARKER_RE", "archive_key", "extract_keys", "has_marker", "marker"]

KEY_LENGTH = 16
MARKER_RE = re.compile(r"<<ccr:([0-9a-f]{16})>>")


def archive_key(content: str) -> str:
    """The content address: first 16 hex chars of sha256(UTF-8 content)."""
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()[:KEY_LENGTH]


def marker(key: str) -> str:
    """The in-history reference to an archived entry: ``<<ccr:KEY>>``."""
    return f"<<ccr:{key}>>"


def has_marker(text: str) -> bool:
    """True when ``text`` already carries a ``<<ccr:KEY>>`` marker."""
    return "<<ccr:" in text and MARKER_RE.search(text) is not None


def extract_keys(text: str) -> list[str]:
    """Keys of every marker in ``text``, in order of first appearance, without repeats."""
    if "<<ccr:" not in text:
        return []
    return list(dict.fromkeys(MARKER_RE.findall(text)))
