"""The tables :func:`ctxrecover.classify.classify` matches against (SPEC §2): data only.

Phrases, words, statuses, exception class names, stop reasons, reason texts and
provider/middlebox hints. Phrases are lowercase without backticks because
classify lowercases the text and drops backticks before matching; the provider
and middlebox tables are read in order, first match wins.
"""

from __future__ import annotations

import re

__all__ = [
    "AUTH_PHRASES",
    "AUTH_STATUSES",
    "CONTEXT_LIMIT_PATTERNS",
    "CONTEXT_OVERFLOW_PHRASES",
    "EOF_RESET_CLASSES",
    "EOF_RESET_PHRASES",
    "EOF_WORD",
    "FORBIDDEN_STATUS_TOKEN",
    "GO_EOF_SUFFIX",
    "HEADER_PROVIDERS",
    "HOST_PROVIDERS",
    "HTML_AS_JSON_PHRASES",
    "MALFORMED_HISTORY_PHRASES",
    "MIDDLEBOX_HEADERS",
    "MIDDLEBOX_TEXT",
    "MODULE_PROVIDERS",
    "NETWORK_MODULE_ROOTS",
    "NOTICE_TEMPLATE",
    "NOT_OVERFLOW_PHRASES",
    "OPENAI_ERROR_KEYS",
    "OUTPUT_TRUNCATED_CLASSES",
    "OUTPUT_TRUNCATION_STOP_REASONS",
    "OVERFLOW_EXCESS_WORDS",
    "OVERFLOW_FALLBACK_STATUSES",
    "OVERFLOW_SUBJECT_WORDS",
    "OVERFLOW_SUBJECT_WORDS_413",
    "PAYLOAD_PHRASES",
    "PAYLOAD_REASON_PHRASES",
    "PAYLOAD_STATUSES",
    "PAYLOAD_STATUS_TOKEN",
    "RATE_LIMIT_PHRASES",
    "RATE_LIMIT_STATUSES",
    "RATE_LIMIT_WORDS",
    "REASONS",
    "SUCCESS_SHAPE_KEYS",
    "SUCCESS_WIRE_PROVIDERS",
    "SUSPECTED_PAYLOAD_HISTORY_CHARS",
    "TEXT_PROVIDERS",
    "TIMEOUT_CLASSES",
    "TIMEOUT_PHRASES",
    "TRANSIENT_NETWORK_CLASSES",
    "TRANSIENT_NETWORK_PHRASES",
    "TRANSIENT_STATUSES",
    "WAF_BLOCK_PAGE_PHRASES",
    "WAF_GATE_PHRASES",
    "WAF_SIGNAL_HEADERS",
    "WAF_SIGNAL_PHRASES",
    "WAF_SIGNAL_WORDS",
]

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
