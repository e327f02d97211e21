"""What happened with this exchange? One typed answer (SPEC §2).

``classify`` is the single place where foreign failures become data. It takes
whatever is known — status, body (text, bytes or parsed JSON), headers, the
exception (httpx/httpx2/httpcore errors, ``openai``/``anthropic`` SDK errors,
OS errors, read by duck typing through ``__cause__``/``__context__``), the size
of the rejected request and of the history — and returns a :class:`Failure`.
It never raises: anything unexpected while reading the inputs yields
``kind=other`` with the reason in ``evidence``.

Rules, first match wins (every phrase list is a table in :mod:`ctxrecover.classify.tables`)::

    successful body      -> ok | output_truncated   (stop-reason table, §2.6)
    429/529, rate words  -> rate_limit    (even if the text says "Request too large")
    body-size phrases    -> payload_too_large   (win over overflow phrases, §2.5)
    413/431 status, its reason phrase or a standalone "413" token
                         -> payload_too_large, unless the text names tokens/context/prompt
                            with an overflow phrase: then context_overflow (§2.1 row)
    403 gate + signal    -> waf_rejection (403 without a signal falls to auth)
    pairing phrases      -> malformed_history
    no 4xx status        -> timeouts: transient_network;
                            EOF/reset: suspected_payload (history >= 500 000 chars)
                                       else transient_network
    overflow phrases     -> context_overflow
    401/403/407, key words -> auth
    408/5xx              -> transient_network
    2xx                  -> ok, else other

Header *values* are never searched for WAF signals (OpenAI's own responses carry
``cf-ray``); headers give the content type, WAF marker headers and identities.
Backticks are dropped before matching, so ``tool_use`` and `` `tool_use` `` match alike.

>>> classify(status=413, body="<html>413 Request Entity Too Large</html>").reason
'payload_413'
>>> classify(status=429, body="Request too large for gpt-4o on tokens per min (TPM)").kind
<FailureKind.RATE_LIMIT: 'rate_limit'>
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from ctxrecover.classify.evidence import (
    Exchange,
    gather,
    http_status,
    is_error_doc,
    json_objects,
    positive_int,
)
from ctxrecover.classify.tables import (
    AUTH_PHRASES,
    AUTH_STATUSES,
    CONTEXT_LIMIT_PATTERNS,
    CONTEXT_OVERFLOW_PHRASES,
    EOF_RESET_CLASSES,
    EOF_RESET_PHRASES,
    EOF_WORD,
    FORBIDDEN_STATUS_TOKEN,
    GO_EOF_SUFFIX,
    HEADER_PROVIDERS,
    HOST_PROVIDERS,
    HTML_AS_JSON_PHRASES,
    MALFORMED_HISTORY_PHRASES,
    MIDDLEBOX_HEADERS,
    MIDDLEBOX_TEXT,
    MODULE_PROVIDERS,
    NETWORK_MODULE_ROOTS,
    NOT_OVERFLOW_PHRASES,
    NOTICE_TEMPLATE,
    OPENAI_ERROR_KEYS,
    OUTPUT_TRUNCATED_CLASSES,
    OUTPUT_TRUNCATION_STOP_REASONS,
    OVERFLOW_EXCESS_WORDS,
    OVERFLOW_FALLBACK_STATUSES,
    OVERFLOW_SUBJECT_WORDS,
    OVERFLOW_SUBJECT_WORDS_413,
    PAYLOAD_PHRASES,
    PAYLOAD_REASON_PHRASES,
    PAYLOAD_STATUS_TOKEN,
    PAYLOAD_STATUSES,
    RATE_LIMIT_PHRASES,
    RATE_LIMIT_STATUSES,
    RATE_LIMIT_WORDS,
    REASONS,
    SUCCESS_SHAPE_KEYS,
    SUCCESS_WIRE_PROVIDERS,
    SUSPECTED_PAYLOAD_HISTORY_CHARS,
    TEXT_PROVIDERS,
    TIMEOUT_CLASSES,
    TIMEOUT_PHRASES,
    TRANSIENT_NETWORK_CLASSES,
    TRANSIENT_NETWORK_PHRASES,
    TRANSIENT_STATUSES,
    WAF_BLOCK_PAGE_PHRASES,
    WAF_GATE_PHRASES,
    WAF_SIGNAL_HEADERS,
    WAF_SIGNAL_PHRASES,
    WAF_SIGNAL_WORDS,
)
from ctxrecover.sizes import format_payload_size

__all__ = ["Failure", "FailureKind", "classify"]

# -- public values -----------------------------------------------------------------------------

class FailureKind(StrEnum):
    """What an exchange ended in; ``ok`` is a successful, untruncated response."""

    CONTEXT_OVERFLOW = "context_overflow"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    WAF_REJECTION = "waf_rejection"
    SUSPECTED_PAYLOAD = "suspected_payload"
    MALFORMED_HISTORY = "malformed_history"
    OUTPUT_TRUNCATED = "output_truncated"
    OUTPUT_LIMIT = "output_limit"  # a parameter over the model's limit (max_tokens): lower it, never compact
    BILLING = "billing"  # out of credits, quota or a spend limit: never compact, never retry
    AUTH = "auth"
    RATE_LIMIT = "rate_limit"
    TRANSIENT_NETWORK = "transient_network"
    OTHER = "other"
    OK = "ok"


RECOVERABLE_KINDS: frozenset[FailureKind] = frozenset({
    FailureKind.CONTEXT_OVERFLOW, FailureKind.PAYLOAD_TOO_LARGE, FailureKind.WAF_REJECTION,
    FailureKind.SUSPECTED_PAYLOAD, FailureKind.MALFORMED_HISTORY,
})
PAYLOAD_KINDS: frozenset[FailureKind] = frozenset({
    FailureKind.PAYLOAD_TOO_LARGE, FailureKind.WAF_REJECTION, FailureKind.SUSPECTED_PAYLOAD,
})


@dataclass(frozen=True, slots=True)
class Failure:
    """The classified outcome of one exchange.

    ``reason``/``reason_text`` are set for the kinds compaction recovers (§2.5);
    ``evidence`` is the phrase or signal that decided; ``stop_reason`` is the
    provider's stop/finish reason of a successful response;
    ``context_limit_tokens`` is the context window an overflow error states, if any;
    ``output_limit_tokens`` the output cap an ``output_limit`` error states, if any.
    """

    kind: FailureKind
    reason: str | None = None
    reason_text: str | None = None
    provider: str | None = None
    status: int | None = None
    rejected_bytes: int | None = None
    evidence: str = ""
    stop_reason: str | None = None
    context_limit_tokens: int | None = None
    output_limit_tokens: int | None = None

    @property
    def recoverable(self) -> bool:
        """True when the recovery ladder (§6) applies.

        ``malformed_history`` is recoverable by pairing repair; ``output_truncated``
        is not: it is handled by max-token escalation (§8), never by compaction.
        """
        return self.kind in RECOVERABLE_KINDS

    @property
    def is_payload(self) -> bool:
        """True for proxy/gateway body-size failures (413/431, WAF 403, suspected EOF)."""
        return self.kind in PAYLOAD_KINDS

    @property
    def notice(self) -> str | None:
        """``⚠ Recoverable failure (reason) — compacting and retrying``, or None without a reason."""
        return NOTICE_TEMPLATE % self.reason_text if self.reason_text else None


# -- successful responses (§2.6) ---------------------------------------------------------------

def _values_at(doc: object, path: str) -> list[object]:
    current: list[object] = [doc]
    for part in path.split("."):
        is_list = part.endswith("[]")
        key = part[:-2] if is_list else part
        nxt: list[object] = []
        for node in current:
            value = node.get(key) if isinstance(node, Mapping) else None
            if is_list and isinstance(value, list):
                nxt.extend(value)
            elif not is_list and value is not None:
                nxt.append(value)
        current = nxt
    return current


def _success_outcome(docs: list[object]) -> Failure | None:
    """ok / output_truncated when the body is a provider's successful response."""
    mappings = json_objects(docs)
    if not mappings or any(is_error_doc(d) for d in mappings):
        return None
    stop: tuple[str, str] | None = None  # (stop reason, wire)
    truncated: tuple[str, str, str] | None = None  # (stop reason, wire, evidence)
    for doc in mappings:
        for wire, path, value in OUTPUT_TRUNCATION_STOP_REASONS:
            for found in _values_at(doc, path):
                if isinstance(found, str):
                    stop = stop or (found, wire)
                    if found == value and truncated is None:
                        truncated = (found, wire, f"{wire} {path} = {found!r}")
    if truncated:
        return Failure(
            FailureKind.OUTPUT_TRUNCATED, provider=SUCCESS_WIRE_PROVIDERS.get(truncated[1]),
            evidence=truncated[2], stop_reason=truncated[0],
        )
    if stop is not None or any(k in d for d in mappings for k in SUCCESS_SHAPE_KEYS):
        return Failure(
            FailureKind.OK, provider=SUCCESS_WIRE_PROVIDERS.get(stop[1]) if stop else None,
            evidence="successful response", stop_reason=stop[0] if stop else None,
        )
    return None


# -- matching ----------------------------------------------------------------------------------

def _find(text: str, phrases: tuple[str, ...]) -> str | None:
    return next((p for p in phrases if p in text), None)


def _find_word(text: str, words: tuple[str, ...]) -> str | None:
    return next((w for w in words if re.search(rf"\b{re.escape(w)}\b", text)), None)


def _class_hit(x: Exchange, names: tuple[str, ...]) -> str | None:
    return next((n for n, root in x.classes if n in names and root in NETWORK_MODULE_ROOTS), None)


def _overflow_hit(text: str, status: int | None, subjects: tuple[str, ...]) -> str | None:
    if _find(text, NOT_OVERFLOW_PHRASES):
        return None
    hit = _find(text, CONTEXT_OVERFLOW_PHRASES)
    if hit:
        return hit
    if "max_tokens" in text and "exceed" in text:
        return "max_tokens + exceed"
    if status in OVERFLOW_FALLBACK_STATUSES and not _find(text, TIMEOUT_PHRASES):
        subject, excess = _find(text, subjects), _find(text, OVERFLOW_EXCESS_WORDS)
        if subject and excess:
            return f"status {status}: {subject} + {excess}"
    return None


def _is_html(x: Exchange) -> bool:
    content_type = x.headers.get("content-type", "").lower()
    if "text/html" in content_type:
        return True
    return any(b.lstrip()[:1] == "<" and not b.lstrip()[:5].lower() == "<?xml" for b in x.raw_bodies)


def _network_kind(x: Exchange, text: str, history_chars: int) -> tuple[FailureKind, str] | None:
    hit = _class_hit(x, TIMEOUT_CLASSES) or _find(text, TIMEOUT_PHRASES)
    if hit:
        return FailureKind.TRANSIENT_NETWORK, hit
    hit = _class_hit(x, EOF_RESET_CLASSES) or _find(text, EOF_RESET_PHRASES)
    if hit is None and EOF_WORD.search(text) and "request" not in text:
        hit = "eof"
    if hit is None and GO_EOF_SUFFIX.search(text):
        hit = ": eof"
    if hit:
        if history_chars >= SUSPECTED_PAYLOAD_HISTORY_CHARS:
            return FailureKind.SUSPECTED_PAYLOAD, f"{hit} + history {history_chars} chars"
        return FailureKind.TRANSIENT_NETWORK, hit
    hit = _class_hit(x, TRANSIENT_NETWORK_CLASSES) or _find(text, TRANSIENT_NETWORK_PHRASES)
    return (FailureKind.TRANSIENT_NETWORK, hit) if hit else None


def _decide(x: Exchange, text: str, history_chars: int) -> tuple[FailureKind, str]:
    status = x.status
    if status in RATE_LIMIT_STATUSES:
        return FailureKind.RATE_LIMIT, f"status {status}"
    rate = _find(text, RATE_LIMIT_PHRASES) or _find_word(text, RATE_LIMIT_WORDS)
    if rate and status not in AUTH_STATUSES:
        return FailureKind.RATE_LIMIT, rate
    if _class_hit(x, OUTPUT_TRUNCATED_CLASSES):
        return FailureKind.OUTPUT_TRUNCATED, "LengthFinishReasonError"

    payload = _find(text, PAYLOAD_PHRASES)
    if payload:
        return FailureKind.PAYLOAD_TOO_LARGE, payload
    status_level = f"status {status}" if status in PAYLOAD_STATUSES else _find(text, PAYLOAD_REASON_PHRASES)
    if status is None and status_level is None:
        token = PAYLOAD_STATUS_TOKEN.search(text)
        status_level = token.group(0) if token else None
    if status_level:
        # A 413 naming tokens/context/prompt is the model's window, not a byte cap.
        subject = _find(text, OVERFLOW_SUBJECT_WORDS_413)
        overflow = _overflow_hit(text, 413, OVERFLOW_SUBJECT_WORDS_413) if subject else None
        if overflow:
            return FailureKind.CONTEXT_OVERFLOW, overflow
        return FailureKind.PAYLOAD_TOO_LARGE, status_level

    forbidden = status is None and bool(FORBIDDEN_STATUS_TOKEN.search(text) or _find(text, WAF_GATE_PHRASES))
    if status == 403 or forbidden:
        signal = (
            _find(text, WAF_SIGNAL_PHRASES)
            or _find_word(text, WAF_SIGNAL_WORDS)
            or _find(text, HTML_AS_JSON_PHRASES)
            or next((h for h in WAF_SIGNAL_HEADERS if h in x.headers), None)
            or ("html body" if _is_html(x) else None)
        )
        if signal:
            return FailureKind.WAF_REJECTION, signal
    block_page = _find(text, WAF_BLOCK_PAGE_PHRASES)
    if block_page:
        return FailureKind.WAF_REJECTION, block_page

    malformed = _find(text, MALFORMED_HISTORY_PHRASES)
    if malformed:
        return FailureKind.MALFORMED_HISTORY, malformed
    if status is None or status < 400 or status in TRANSIENT_STATUSES:  # a 200 stream can still drop
        network = _network_kind(x, text, history_chars)
        if network:
            return network
    overflow = _overflow_hit(text, status, OVERFLOW_SUBJECT_WORDS)
    if overflow:
        return FailureKind.CONTEXT_OVERFLOW, overflow
    if status in AUTH_STATUSES:
        return FailureKind.AUTH, f"status {status}"
    if forbidden:
        return FailureKind.AUTH, "403 without WAF signals"
    auth = _find(text, AUTH_PHRASES)
    if auth:
        return FailureKind.AUTH, auth
    if status in TRANSIENT_STATUSES:
        return FailureKind.TRANSIENT_NETWORK, f"status {status}"
    if status is not None and status < 400:
        return FailureKind.OK, f"status {status}"
    if status is None and not x.has_error and not text.strip():
        return FailureKind.OTHER, "nothing to classify"
    return FailureKind.OTHER, f"status {status}" if status else "no known signal"


def _shape_provider(docs: list[object]) -> str | None:
    """The provider whose error-body shape this is (compatible servers copy OpenAI's)."""
    for doc in json_objects(docs):
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


def _identify(x: Exchange, text: str) -> tuple[str | None, str | None]:
    """(provider, middlebox), best effort."""
    provider = next((p for url in x.urls for host, p in HOST_PROVIDERS if host in url), None)
    hints = f"{text} {x.headers.get('x-amzn-errortype', '').lower()}"
    provider = provider or next((p for hint, p in TEXT_PROVIDERS if hint in hints), None)
    provider = provider or _shape_provider(x.body_docs + x.error_docs)
    provider = provider or next(
        (p for name in x.headers for prefix, p in HEADER_PROVIDERS if name.startswith(prefix)), None
    )
    provider = provider or next(
        (p for _, root in x.classes for module, p in MODULE_PROVIDERS if root == module), None
    )
    identity = " ".join((text, x.headers.get("server", "").lower(), x.headers.get("via", "").lower()))
    middlebox = next((m for name, m in MIDDLEBOX_HEADERS if name in x.headers), None)
    middlebox = next((m for hint, m in MIDDLEBOX_TEXT if hint in identity), None) or middlebox
    return provider, middlebox


def _chars(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return int(value) if math.isfinite(value) else 0


def _classify(
    error: object, status: object, body: object, headers: object, request_bytes: object, history_chars: object
) -> Failure:
    x = gather(error, status, body, headers)
    if not x.has_error and (x.status is None or x.status < 400):
        success = _success_outcome(x.body_docs)
        if success is not None:
            provider = success.provider or _identify(x, "")[0]
            return dataclasses.replace(success, provider=provider, status=x.status)
    history = _chars(history_chars)
    text = "\n".join(x.texts).lower().replace("`", "")
    kind, evidence = _decide(x, text, history)
    provider, middlebox = _identify(x, text)
    if kind in PAYLOAD_KINDS and middlebox:
        provider = middlebox
    reason, reason_text = REASONS.get(kind, (None, None))
    if kind is FailureKind.SUSPECTED_PAYLOAD and reason_text:
        reason_text = reason_text % format_payload_size(history)
    rejected = None if kind in (FailureKind.OK, FailureKind.OUTPUT_TRUNCATED) else (
        positive_int(request_bytes) or x.rejected_bytes
    )
    limit = _context_limit(text) if kind is FailureKind.CONTEXT_OVERFLOW else None
    return Failure(
        kind, reason=reason, reason_text=reason_text, provider=provider or middlebox, status=x.status,
        rejected_bytes=rejected, evidence=evidence, context_limit_tokens=limit,
    )


def _context_limit(text: str) -> int | None:
    """The window an overflow text states (the smallest, if several), in tokens."""
    found = [int(m.group(1)) for p in CONTEXT_LIMIT_PATTERNS for m in p.finditer(text)]
    found = [n for n in found if n > 0]
    return min(found) if found else None


def classify(
    error: BaseException | None = None,
    *,
    status: int | None = None,
    body: str | bytes | Mapping[str, object] | list[object] | None = None,
    headers: Mapping[str, str] | None = None,
    request_bytes: int | None = None,
    history_chars: int | None = None,
) -> Failure:
    """Classify one exchange (SPEC §2); never raises.

    ``body`` is text, bytes or parsed JSON; ``error`` any exception (its cause
    chain is read too). ``request_bytes`` is the size of the request that failed
    (becomes ``rejected_bytes``); ``history_chars`` decides whether an EOF/reset
    is a suspected payload limit (≥ 500 000) or a transient network failure.
    If reading the inputs fails, the result is ``kind=other`` naming the error.

    >>> classify(status=400, body={"error": {"code": "context_length_exceeded"}}).kind
    <FailureKind.CONTEXT_OVERFLOW: 'context_overflow'>
    """
    try:
        return _classify(error, status, body, headers, request_bytes, history_chars)
    except Exception as exc:  # the documented fallback: a classifier must never mask the real failure
        evidence = f"unclassifiable: {type(exc).__name__}"
        return Failure(FailureKind.OTHER, status=http_status(status), evidence=evidence)
