"""What happened with this exchange? One typed answer (SPEC §2).

``classify`` is the single place where foreign failures become data. It takes
whatever is known — status, body (text, bytes or parsed JSON), headers, the
exception (httpx/httpx2/httpcore errors, ``openai``/``anthropic`` SDK errors,
OS errors, read by duck typing through ``__cause__``/``__context__``), the size
of the rejected request and of the history — and returns a :class:`Failure`.
It never raises: anything unexpected while reading the inputs yields
``kind=other`` with the reason in ``evidence``.

Rules, first match wins (every phrase list is a table below)::

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
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from ctxrecover.sizes import format_payload_size

__all__ = ["Failure", "FailureKind", "classify"]

# -- tables -----------------------------------------------------------------------------------

RATE_LIMIT_STATUSES: tuple[int, ...] = (429, 529)
RATE_LIMIT_PHRASES: tuple[str, ...] = (
    "tokens per min", "tokens per day", "requests per min", "requests per day", "rate limit",
    "rate_limit", "ratelimit", "rate-limit", "throttl", "quota", "overloaded", "too many requests",
    "resource_exhausted", "resource has been exhausted",
)
RATE_LIMIT_WORDS: tuple[str, ...] = ("tpm", "rpm", "tpd", "rpd", "itpm", "otpm")

PAYLOAD_STATUSES: tuple[int, ...] = (413, 431)
# The reason phrases of 413/431 only restate the status (httpx puts them in every str(exc)).
PAYLOAD_REASON_PHRASES: tuple[str, ...] = (
    "payload too large", "request entity too large", "content too large", "request header fields too large",
)
PAYLOAD_PHRASES: tuple[str, ...] = (
    "body too large", "request body exceeded", "maximum request size", "request header or cookie too large",
    "request_too_large", "maximum allowed number of bytes",
    "request that was too large", "requestentitytoolarge", "payloadtoolarge",
    "larger than the configured limit", "request must be smaller than", "request exceeds the maximum size",
    "value at 'body' failed to satisfy constraint", "http content length exceeded",
)

WAF_GATE_PHRASES: tuple[str, ...] = ("forbidden",)
WAF_SIGNAL_PHRASES: tuple[str, ...] = (
    "firewall", "security policy", "security rule", "blocked by", "cloudflare", "cf-ray",
    "mod_security", "modsecurity", "akamai", "edgesuite", "proxy denied", "policy violation",
    "request blocked", "request rejected", "incapsula", "imperva", "sucuri", "fortiweb", "fortigate",
    "zscaler", "barracuda",
)
WAF_SIGNAL_WORDS: tuple[str, ...] = ("waf",)
WAF_SIGNAL_HEADERS: tuple[str, ...] = ("cf-mitigated", "x-amzn-waf-action")
HTML_AS_JSON_PHRASES: tuple[str, ...] = (
    "invalid character '<'", "deserialization failed", "failed to decode response body",
)
# Block pages so distinctive that they gate themselves (F5 ASM often answers 200).
WAF_BLOCK_PAGE_PHRASES: tuple[str, ...] = (
    "the requested url was rejected", "sorry, you have been blocked", "your support id is",
)

MALFORMED_HISTORY_PHRASES: tuple[str, ...] = (
    "ids were found without tool_result blocks", "unexpected tool_use_id found in tool_result",
    "must have a corresponding tool_use block", "must have a corresponding tool_result block",
    "tool_result block(s) provided when previous message", "roles must alternate",
    "must be followed by tool messages responding to each 'tool_call_id'",
    "did not have response messages", "must be a response to a preceeding message with 'tool_calls'",
    "must be a response to a preceding message with 'tool_calls'",
    "no tool output found for function call", "no tool call found for function call output",
    "function call turn comes immediately after", "function response turn comes immediately after",
    "number of function response parts is equal", "messages following tool_use blocks must begin with",
    "alternate between user and model", "must alternate between user and assistant",
    "exceeds the number of tooluse blocks", "expected toolresult blocks",
    "not the same number of function calls and responses", "unexpected role 'user' after role 'tool'",
)

CONTEXT_OVERFLOW_PHRASES: tuple[str, ...] = (
    "context length", "context window", "context_length_exceeded", "context-length-exceeded",
    "maximum context", "max context", "prompt is too long", "prompt too long", "input too long",
    "input is too long", "request too large", "too many tokens", "token limit", "input token count",
    "maximum prompt length", "maximum number of tokens", "exceeds the maximum", "exceeds model",
    "reduce the length", "reduce your prompt", "messages too long", "conversation too long",
    "too long", "available context size", "expected maxlength",
)
OVERFLOW_SUBJECT_WORDS: tuple[str, ...] = ("token", "context", "length", "prompt")
OVERFLOW_SUBJECT_WORDS_413: tuple[str, ...] = ("token", "context", "prompt")  # "length" may be bytes
OVERFLOW_EXCESS_WORDS: tuple[str, ...] = ("exceed", "too large", "too long", "limit", "maximum")
OVERFLOW_FALLBACK_STATUSES: tuple[int, ...] = (400, 413)
# A max_tokens over the model's *output* cap: compaction cannot help, so never overflow.
NOT_OVERFLOW_PHRASES: tuple[str, ...] = (
    "max_tokens is too large", "max_completion_tokens is too large",
    "maximum allowed number of output tokens", "max_tokens must be less than",
    "maximum tokens you requested exceeds",
)

AUTH_STATUSES: tuple[int, ...] = (401, 403, 407)
AUTH_PHRASES: tuple[str, ...] = (
    "invalid api key", "invalid_api_key", "incorrect api key", "api key not valid", "invalid x-api-key",
    "authentication_error", "authentication failed", "invalid authentication", "unauthorized",
    "permission denied", "permission_denied", "accessdeniedexception", "unrecognizedclientexception",
    "security token included in the request is invalid", "missing authentication token",
)

TIMEOUT_PHRASES: tuple[str, ...] = (
    "deadline exceeded", "timed out", "timeout", "time-out", "time out",
)
EOF_RESET_PHRASES: tuple[str, ...] = (
    "unexpected eof", "connection reset", "broken pipe", "stream error", "reset by peer",
    "server disconnected", "peer closed connection", "connection aborted", "incomplete chunked read",
    "remote end closed connection", "eof occurred in violation of protocol",
)
TRANSIENT_NETWORK_PHRASES: tuple[str, ...] = (
    "connection refused", "connection error", "network is unreachable", "no route to host",
    "name resolution", "name or service not known", "all connection attempts failed",
    "upstream connect error", "bad gateway", "service unavailable", "temporarily unavailable",
)
TRANSIENT_STATUSES: tuple[int, ...] = (408, 500, 502, 503, 504, 520, 521, 522, 523, 524)

# Exception classes, matched by name on the MRO when the class lives in a network module.
NETWORK_MODULE_ROOTS: tuple[str, ...] = (
    "httpx", "httpx2", "httpcore", "httpcore2", "builtins", "socket", "ssl", "http", "h11", "h2",
    "anyio", "urllib3", "requests", "aiohttp", "openai", "anthropic",
)
TIMEOUT_CLASSES: tuple[str, ...] = (
    "TimeoutException", "TimeoutError", "APITimeoutError", "ReadTimeout", "WriteTimeout",
    "ConnectTimeout", "PoolTimeout", "Timeout",
)
EOF_RESET_CLASSES: tuple[str, ...] = (
    "RemoteProtocolError", "ReadError", "WriteError", "ConnectionResetError", "BrokenPipeError",
    "ConnectionAbortedError", "RemoteDisconnected", "IncompleteRead", "SSLEOFError",
    "ServerDisconnectedError", "ChunkedEncodingError", "EndOfStream", "BrokenResourceError",
)
TRANSIENT_NETWORK_CLASSES: tuple[str, ...] = (
    "ConnectError", "NetworkError", "TransportError", "APIConnectionError", "ConnectionError",
    "gaierror", "ProxyError",
)
OUTPUT_TRUNCATED_CLASSES: tuple[str, ...] = ("LengthFinishReasonError",)

SUSPECTED_PAYLOAD_HISTORY_CHARS = 500_000

# §2.6: (wire format, path in the successful response, stop value meaning "cut at the cap").
# ``[]`` walks every item of a list. The first string found at any path is ``stop_reason``.
OUTPUT_TRUNCATION_STOP_REASONS: tuple[tuple[str, str, str], ...] = (
    ("openai-chat", "choices[].finish_reason", "length"),
    ("openai-responses", "incomplete_details.reason", "max_output_tokens"),
    ("anthropic", "stop_reason", "max_tokens"),
    ("anthropic", "stop_reason", "model_context_window_exceeded"),
    ("anthropic-stream", "delta.stop_reason", "max_tokens"),
    ("bedrock-converse", "stopReason", "max_tokens"),
    ("gemini", "candidates[].finishReason", "MAX_TOKENS"),
    ("ollama", "done_reason", "length"),
    ("llama.cpp", "stop_type", "limit"),
)
SUCCESS_WIRE_PROVIDERS: dict[str, str] = {
    "openai-responses": "openai", "anthropic": "anthropic", "anthropic-stream": "anthropic",
    "bedrock-converse": "bedrock", "gemini": "gemini", "ollama": "ollama", "llama.cpp": "llama.cpp",
}
SUCCESS_SHAPE_KEYS: tuple[str, ...] = (
    "choices", "candidates", "stop_reason", "stopReason", "output", "done_reason", "done",
    "incomplete_details", "usageMetadata",
)

# §2.5: reason label and text per recoverable-by-compaction kind.
REASONS: dict[str, tuple[str, str]] = {
    "payload_too_large": ("payload_413", "proxy/gateway payload limit (413/431)"),
    "waf_rejection": ("waf_403", "proxy/WAF rejection (403 + security signals)"),
    "suspected_payload": ("suspected_payload", "suspected payload limit (large history %s + network error)"),
    "context_overflow": ("ctx_too_long", "context too long"),
}
NOTICE_TEMPLATE = "⚠ Recoverable failure (%s) — compacting and retrying"

# Provider / middlebox identification, best effort, first match wins.
HOST_PROVIDERS: tuple[tuple[str, str], ...] = (
    ("openai.azure.com", "azure"), ("azure", "azure"), ("api.openai.com", "openai"),
    ("anthropic.com", "anthropic"), ("generativelanguage.googleapis.com", "gemini"),
    ("aiplatform.googleapis.com", "vertex"), ("bedrock", "bedrock"), ("api.x.ai", "xai"),
    ("mistral.ai", "mistral"), ("groq.com", "groq"), ("openrouter.ai", "openrouter"),
    (":11434", "ollama"),
)
TEXT_PROVIDERS: tuple[tuple[str, str], ...] = (
    ("openrouter", "openrouter"), ("azure", "azure"), ("bedrock", "bedrock"),
    ("validationexception", "bedrock"), ("throttlingexception", "bedrock"), ("groq", "groq"),
    ("exceed_context_size_error", "llama.cpp"), ("context shift", "llama.cpp"), ("llama.cpp", "llama.cpp"),
    ("ollama", "ollama"), ("vllm", "vllm"), ("mistral", "mistral"), ("maximum prompt length", "xai"),
    ("x.ai", "xai"), ("generativelanguage", "gemini"), ("gemini", "gemini"),
    ("invalid_argument", "gemini"), ("resource_exhausted", "gemini"), ("anthropic", "anthropic"),
    ("overloaded_error", "anthropic"), ("prompt is too long", "anthropic"), ("openai", "openai"),
)
HEADER_PROVIDERS: tuple[tuple[str, str], ...] = (
    ("openai-", "openai"), ("anthropic-", "anthropic"), ("x-amzn-bedrock-", "bedrock"),
    ("apim-request-id", "azure"), ("x-ms-region", "azure"), ("x-groq-", "groq"),
)
OPENAI_ERROR_KEYS: frozenset[str] = frozenset({"message", "type", "param", "code"})
MODULE_PROVIDERS: tuple[tuple[str, str], ...] = (
    ("openai", "openai"), ("anthropic", "anthropic"), ("google", "gemini"), ("botocore", "bedrock"),
    ("mistralai", "mistral"), ("groq", "groq"),
)
MIDDLEBOX_TEXT: tuple[tuple[str, str], ...] = (
    ("cloudflare", "cloudflare"), ("cf-ray", "cloudflare"), ("akamai", "akamai"),
    ("edgesuite", "akamai"), ("incapsula", "imperva"), ("imperva", "imperva"),
    ("mod_security", "modsecurity"), ("modsecurity", "modsecurity"),
    ("the requested url was rejected", "f5"), ("big-ip", "f5"), ("bigip", "f5"), ("cloudfront", "cloudfront"),
    ("aws waf", "aws-waf"), ("awselb", "aws-alb"), ("microsoft-azure-application-gateway", "azure-appgw"),
    ("envoy", "envoy"), ("fortigate", "fortinet"), ("fortiweb", "fortinet"), ("zscaler", "zscaler"),
    ("sucuri", "sucuri"), ("nginx", "nginx"), ("apache", "apache"),
)
MIDDLEBOX_HEADERS: tuple[tuple[str, str], ...] = (
    ("cf-ray", "cloudflare"), ("cf-mitigated", "cloudflare"), ("x-amzn-waf-action", "aws-waf"),
    ("x-iinfo", "imperva"), ("x-sucuri-id", "sucuri"),
)

# Reading limits: bounded work whatever the input.
MAX_CHAIN = 16
MAX_TEXT_CHARS = 200_000
MAX_JSON_ITEMS = 4000
MAX_JSON_DEPTH = 32
MAX_HEADERS = 200
MAX_SSE_LINES = 2000
REJECTED_BYTES_ATTRS: tuple[str, ...] = ("rejected_bytes", "request_bytes", "request_size", "body_bytes")


def _status_token_pattern(*codes: int) -> re.Pattern[str]:
    """A status code standing as a status (``HTTP 413``, ``413 Payload…``), never ``14130 tokens``."""
    alt = "|".join(str(c) for c in codes)
    return re.compile(
        rf"\b(?:https?(?:/[\d.]+)?|status(?:[ _-]?code)?|error(?:[ _-]?code)?|code)"
        rf"\s*[:=#]?\s*(?:{alt})(?!\d)"
        rf"|(?<![\w.,:=#/-])(?:{alt})\s*[:.-]?\s*(?:payload|request|content|entity|forbidden|too|header)\b"
        rf"|\(\s*(?:{alt})\s*\)"
    )


PAYLOAD_STATUS_TOKEN = _status_token_pattern(*PAYLOAD_STATUSES)
FORBIDDEN_STATUS_TOKEN = _status_token_pattern(403)
EOF_WORD = re.compile(r"\beof\b")
GO_EOF_SUFFIX = re.compile(r":\s*eof\s*$", re.MULTILINE)  # Go's `Post "https://…": EOF`


# -- public values -----------------------------------------------------------------------------

class FailureKind(StrEnum):
    """What an exchange ended in; ``ok`` is a successful, untruncated response."""

    CONTEXT_OVERFLOW = "context_overflow"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    WAF_REJECTION = "waf_rejection"
    SUSPECTED_PAYLOAD = "suspected_payload"
    MALFORMED_HISTORY = "malformed_history"
    OUTPUT_TRUNCATED = "output_truncated"
    AUTH = "auth"
    RATE_LIMIT = "rate_limit"
    TRANSIENT_NETWORK = "transient_network"
    OTHER = "other"
    OK = "ok"


# Overflow texts that state the model's real window, in tokens (the last group is the limit).
CONTEXT_LIMIT_PATTERNS: tuple[re.Pattern[str], ...] = tuple(re.compile(p) for p in (
    r"maximum context length is (\d+) tokens",                          # OpenAI chat, vLLM
    r"prompt is too long: \d+ tokens > (\d+) maximum",                   # Anthropic
    r"exceed context limit: \d+ \+ \d+ > (\d+)",                          # Anthropic, input + max_tokens
    r"maximum number of tokens allowed \((\d+)\)",                      # Gemini
    r"(\d+) maximum context length",                                     # "too large for model with N ..."
    r"context window of (\d+) tokens",                                   # generic
    r"exceeds the context window \((\d+)\)",
))


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
    ``context_limit_tokens`` is the context window an overflow error states, if any.
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


# -- reading the inputs ------------------------------------------------------------------------

@dataclass(slots=True)
class _Exchange:
    """Everything gathered from the arguments and the exception chain."""

    status: int | None = None
    texts: list[str] = field(default_factory=list)
    raw_bodies: list[str] = field(default_factory=list)
    body_docs: list[object] = field(default_factory=list)
    error_docs: list[object] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    classes: list[tuple[str, str]] = field(default_factory=list)  # (class name, module root)
    urls: list[str] = field(default_factory=list)
    rejected_bytes: int | None = None
    has_error: bool = False


def _attr(obj: object, name: str) -> object:
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def _str(obj: object) -> str:
    try:
        return str(obj)
    except Exception:
        return ""


def _http_status(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
        return value
    return None


def _positive_int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def _parse_json_documents(text: str) -> list[object]:
    """A JSON body, or the JSON ``data:`` lines of a server-sent-event stream."""
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            return [json.loads(stripped)]
        except Exception:
            return []
    docs: list[object] = []
    if "data:" in stripped:
        for line in stripped.splitlines()[:MAX_SSE_LINES]:
            payload = line.strip()
            if payload.startswith("data:") and payload[5:].strip()[:1] in ("{", "["):
                try:
                    docs.append(json.loads(payload[5:]))
                except Exception:
                    continue
    return docs


def _flatten_json(doc: object) -> str:
    """``key: value`` lines of a JSON-ish object (bounded depth and size, cycle-proof)."""
    lines: list[str] = []
    stack: list[tuple[str, object, int]] = [("", doc, 0)]
    while stack and len(lines) < MAX_JSON_ITEMS:
        key, value, depth = stack.pop()
        if isinstance(value, Mapping):
            if depth < MAX_JSON_DEPTH:
                items = list(value.items())[:MAX_JSON_ITEMS]
                stack.extend((_str(k), v, depth + 1) for k, v in reversed(items))
        elif isinstance(value, list | tuple):
            if depth < MAX_JSON_DEPTH:
                stack.extend((key, v, depth + 1) for v in reversed(value[:MAX_JSON_ITEMS]))
        else:
            text = value if isinstance(value, str) else _str(value)
            lines.append(f"{key}: {text[:MAX_TEXT_CHARS]}" if key else text[:MAX_TEXT_CHARS])
    return "\n".join(lines)


def _add_body(x: _Exchange, value: object, docs: list[object]) -> None:
    if value is None:
        return
    if isinstance(value, bytes | bytearray | memoryview):
        value = bytes(value).decode("utf-8", "replace")
    if isinstance(value, str):
        text = value[:MAX_TEXT_CHARS]  # matching reads a bounded prefix; JSON is parsed whole
        x.texts.append(text)
        x.raw_bodies.append(text)
        docs.extend(_parse_json_documents(value))
    elif isinstance(value, Mapping | list | tuple):
        docs.append(value)
        x.texts.append(_flatten_json(value))
    else:
        x.texts.append(_str(value)[:MAX_TEXT_CHARS])


def _add_headers(x: _Exchange, headers: object) -> None:
    if headers is None:
        return
    try:
        pairs = headers.items() if isinstance(headers, Mapping) or hasattr(headers, "items") else headers
        for n, pair in enumerate(pairs):  # type: ignore[union-attr]
            if n >= MAX_HEADERS:
                break
            name, value = pair
            if isinstance(name, bytes):
                name = name.decode("latin-1")
            if isinstance(value, bytes):
                value = value.decode("latin-1")
            x.headers.setdefault(_str(name).lower(), _str(value))
    except Exception:
        return


def _add_url(x: _Exchange, holder: object) -> None:
    url = _attr(holder, "url")
    if url is not None:
        x.urls.append(_str(url).lower())


def _add_exception(x: _Exchange, exc: object) -> None:
    x.has_error = True
    for cls in type(exc).__mro__:
        x.classes.append((cls.__name__, _str(cls.__module__).split(".")[0]))
    status = _http_status(_attr(exc, "status_code")) or _http_status(_attr(exc, "status"))
    status = status or _http_status(_attr(exc, "http_status")) or _http_status(_attr(exc, "code"))
    response = _attr(exc, "response")
    if isinstance(response, Mapping):  # botocore ClientError.response
        meta = response.get("ResponseMetadata")
        status = status or (_http_status(meta.get("HTTPStatusCode")) if isinstance(meta, Mapping) else None)
        _add_body(x, response, x.error_docs)
    elif response is not None:
        status = status or _http_status(_attr(response, "status_code"))
        _add_headers(x, _attr(response, "headers"))
        _add_body(x, _attr(response, "text"), x.error_docs)
        _add_url(x, response)
    if x.status is None and status is not None:
        x.status = status
    _add_body(x, _attr(exc, "body"), x.error_docs)
    message = _attr(exc, "message")
    if isinstance(message, str):
        x.texts.append(message[:MAX_TEXT_CHARS])
    x.texts.append(_str(exc)[:MAX_TEXT_CHARS])
    request = _attr(exc, "request")
    if request is not None:
        _add_url(x, request)
    for name in REJECTED_BYTES_ATTRS:
        x.rejected_bytes = x.rejected_bytes or _positive_int(_attr(exc, name))
    if x.rejected_bytes is None and request is not None:
        length = _attr(request, "headers")
        try:
            value = length.get("content-length") if length is not None else None  # type: ignore[union-attr]
            x.rejected_bytes = _positive_int(int(value)) if value is not None else None
        except Exception:
            x.rejected_bytes = None


def _exception_chain(error: object) -> list[object]:
    """The error, its causes and contexts (and group members), breadth first, each once."""
    chain: list[object] = []
    seen: set[int] = set()
    queue: list[object] = [error]
    while queue and len(chain) < MAX_CHAIN:
        exc = queue.pop(0)
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        chain.append(exc)
        for name in ("__cause__", "__context__"):
            linked = _attr(exc, name)
            if isinstance(linked, BaseException):
                queue.append(linked)
        group = _attr(exc, "exceptions")
        if isinstance(group, list | tuple):
            queue.extend(e for e in group[:MAX_CHAIN] if isinstance(e, BaseException))
    return chain


def _body_status(docs: list[object]) -> int | None:
    """An HTTP status written in an error body (``{"error": {"code": 413}}``, vLLM's ``code``)."""
    for doc in _mappings(docs):
        inner = doc.get("error")
        if isinstance(inner, Mapping) and _http_status(inner.get("code")):
            return _http_status(inner.get("code"))
        if _is_error_doc(doc) and _http_status(doc.get("code")):
            return _http_status(doc.get("code"))
    return None


def _gather(error: object, status: object, body: object, headers: object) -> _Exchange:
    x = _Exchange(status=_http_status(status))
    _add_body(x, body, x.body_docs)
    _add_headers(x, headers)
    if isinstance(error, BaseException):
        for exc in _exception_chain(error):
            _add_exception(x, exc)
    elif error is not None:
        x.has_error = True
        _add_body(x, error, x.error_docs)
    if x.status is None or x.status < 400:
        x.status = _body_status(x.body_docs + x.error_docs) or x.status
    return x


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


def _is_error_doc(doc: object) -> bool:
    if not isinstance(doc, Mapping):
        return False
    return bool(doc.get("error")) or doc.get("type") == "error" or doc.get("object") == "error" or (
        "__type" in doc or "detail" in doc
    )


def _mappings(docs: list[object]) -> list[Mapping[str, object]]:
    """The JSON objects among parsed documents (a top-level list is a stream of them)."""
    flat = [d for doc in docs for d in (doc if isinstance(doc, list) else [doc])]
    return [d for d in flat if isinstance(d, Mapping)]


def _success_outcome(docs: list[object]) -> Failure | None:
    """ok / output_truncated when the body is a provider's successful response."""
    mappings = _mappings(docs)
    if not mappings or any(_is_error_doc(d) for d in mappings):
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


def _class_hit(x: _Exchange, names: tuple[str, ...]) -> str | None:
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


def _is_html(x: _Exchange) -> bool:
    content_type = x.headers.get("content-type", "").lower()
    if "text/html" in content_type:
        return True
    return any(b.lstrip()[:1] == "<" and not b.lstrip()[:5].lower() == "<?xml" for b in x.raw_bodies)


def _network_kind(x: _Exchange, text: str, history_chars: int) -> tuple[FailureKind, str] | None:
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


def _decide(x: _Exchange, text: str, history_chars: int) -> tuple[FailureKind, str]:
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
    for doc in _mappings(docs):
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


def _identify(x: _Exchange, text: str) -> tuple[str | None, str | None]:
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
    x = _gather(error, status, body, headers)
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
        _positive_int(request_bytes) or x.rejected_bytes
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
        return Failure(FailureKind.OTHER, status=_http_status(status), evidence=evidence)
