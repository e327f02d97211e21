"""Secrets never leave the proxy: query values and credential headers are redacted in logs and records.

Everything the proxy prints, logs (``--log-json``) or records (``--record``) goes through
these functions. Query strings keep their parameter names and lose every value (a
Gemini-style ``?key=…`` is a credential, and others may be); a header is a credential when
its name is in :data:`CREDENTIAL_HEADERS` or matches :data:`CREDENTIAL_NAME_RE` (so vendor
variants such as ``x-foo-api-key`` or ``x-amz-security-token`` are caught too).

>>> redact_target("/v1beta/models/gemini-2.5-pro:generateContent?key=AIza123&alt=sse")
'/v1beta/models/gemini-2.5-pro:generateContent?key=[redacted]&alt=[redacted]'
>>> redact_headers([("Authorization", "Bearer sk-1"), ("content-type", "application/json")])
[('Authorization', '[redacted]'), ('content-type', 'application/json')]
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

__all__ = [
    "CREDENTIAL_HEADERS",
    "CREDENTIAL_NAME_RE",
    "REDACTED",
    "is_credential",
    "redact_headers",
    "redact_target",
    "redact_text",
    "redact_url",
]

REDACTED = "[redacted]"
# Header names that carry credentials on the LLM APIs and the gateways in front of them.
CREDENTIAL_HEADERS = frozenset(
    {
        "authorization",  # Bearer keys (OpenAI, Gemini OAuth, Bedrock API keys), SigV4 signatures
        "proxy-authorization",  # credentials for a forward proxy
        "x-api-key",  # Anthropic
        "api-key",  # Azure OpenAI
        "x-goog-api-key",  # Gemini
        "cookie",
        "set-cookie",
        "x-amz-security-token",  # AWS session tokens (Bedrock)
        "x-amz-content-sha256",  # part of a SigV4 signature
        "openai-organization",  # not secret alone, but identifies the account
        "openai-project",
    }
)
CREDENTIAL_NAME_RE = re.compile(
    r"auth|cookie|api[-_]?key|secret|passw|session|credential|signature|(^|[-_])token$|[-_]token[-_]"
    r"|security[-_]token|access[-_]token|refresh[-_]token|id[-_]token|(^|[-_])key$",
    re.IGNORECASE,
)
QUERY_VALUE_RE = re.compile(r"([?&][^=&#\s]*=)[^&#\s\"'<>]*")
USERINFO_RE = re.compile(r"(//)[^/@\s]+@")
BEARER_RE = re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+", re.IGNORECASE)


@lru_cache(maxsize=4096)
def is_credential(name: str) -> bool:
    """Whether a header named ``name`` carries a credential."""
    lowered = name.lower()
    return lowered in CREDENTIAL_HEADERS or CREDENTIAL_NAME_RE.search(lowered) is not None


def redact_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The headers with every credential's value replaced by :data:`REDACTED`."""
    return [(name, REDACTED if is_credential(name) else value) for name, value in headers]


def redact_target(target: str) -> str:
    """A request target (path and query) with every query value redacted; names are kept."""
    path, sep, query = target.partition("?")
    if not sep:
        return path
    fragment = ""
    if "#" in query:
        query, _, fragment = query.partition("#")
        fragment = "#" + fragment
    pairs = [pair.partition("=") for pair in query.split("&")]
    return path + "?" + "&".join(name + (f"={REDACTED}" if eq else "") for name, eq, _ in pairs) + fragment


def redact_url(url: str) -> str:
    """A URL without user info (``user:pass@``) and with every query value redacted."""
    return QUERY_VALUE_RE.sub(rf"\g<1>{REDACTED}", USERINFO_RE.sub(rf"\g<1>{REDACTED}@", url))


def redact_text(text: str) -> str:
    """Free text (an error message) with URL query values, user info and bearer tokens redacted."""
    return BEARER_RE.sub(rf"\g<1> {REDACTED}", redact_url(text))
