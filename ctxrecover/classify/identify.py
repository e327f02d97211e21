"""Who answered: the provider and the middlebox an exchange names, best effort (SPEC §2).

Read from the evidence only, first match wins, in this order: the request URL's
host, provider hints in the text, the error body's shape (compatible servers copy
OpenAI's), provider header prefixes, the exception's module. The middlebox comes
from marker headers, then server/via headers and the text. Every table is data
in :mod:`ctxrecover.classify.tables`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ctxrecover.classify.evidence import Evidence
from ctxrecover.classify.tables import (
    HEADER_PROVIDERS,
    HOST_PROVIDERS,
    MIDDLEBOX_HEADERS,
    MIDDLEBOX_TEXT,
    MODULE_PROVIDERS,
    OPENAI_ERROR_KEYS,
    TEXT_PROVIDERS,
)

__all__ = ["Identity", "identify"]


@dataclass(frozen=True, slots=True)
class Identity:
    """The ``provider`` and ``middlebox`` an exchange names (either may be None)."""

    provider: str | None = None
    middlebox: str | None = None


def _shape_provider(x: Evidence) -> str | None:
    """The provider whose error-body shape this is (compatible servers copy OpenAI's)."""
    for doc in x.objects:
        inner = doc.get("error")
        if doc.get("type") == "error" and isinstance(inner, Mapping) and "type" in inner:
            return "anthropic"
        if doc.get("object") == "error":
            return "vllm" if doc.get("type") == "BadRequestError" else "mistral"
        if isinstance(inner, Mapping) and isinstance(inner.get("status"), str) and "code" in inner:
            return "gemini"
        if isinstance(inner, Mapping) and OPENAI_ERROR_KEYS <= inner.keys():
            return "openai"
    return None


def identify(x: Evidence, text: str | None = None) -> Identity:
    """The provider and middlebox of ``x``; hints are read in ``text`` (default: the evidence text)."""
    text = x.text if text is None else text
    provider = next((p for url in x.urls for host, p in HOST_PROVIDERS if host in url), None)
    hints = f"{text} {x.headers.get('x-amzn-errortype', '').lower()}"
    provider = provider or next((p for hint, p in TEXT_PROVIDERS if hint in hints), None)
    provider = provider or _shape_provider(x)
    provider = provider or next(
        (p for name in x.headers for prefix, p in HEADER_PROVIDERS if name.startswith(prefix)), None
    )
    provider = provider or next(
        (p for _, root in x.classes for module, p in MODULE_PROVIDERS if root == module), None
    )
    identity = " ".join((text, x.headers.get("server", "").lower(), x.headers.get("via", "").lower()))
    middlebox = next((m for name, m in MIDDLEBOX_HEADERS if name in x.headers), None)
    middlebox = next((m for hint, m in MIDDLEBOX_TEXT if hint in identity), None) or middlebox
    return Identity(provider, middlebox)
