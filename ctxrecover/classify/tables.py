"""The tables :func:`ctxrecover.classify.classify` matches against (SPEC §2): data only.

Phrases, words, wording shapes (regex sources), statuses, exception class names,
stop reasons, reason texts and provider/middlebox hints. Phrases are lowercase
without backticks because the evidence text is lowercased and backtick-free; the
provider and middlebox tables are read in order, first match wins. Vendor block
pages live in :mod:`ctxrecover.classify.fingerprints`.

Sources: SPEC §2 for the phrases it lists; the provider error documentation and
public reports cited per table for the rest (each wording below has a labelled,
sourced sample in ``fixtures/errors/``).
"""

from __future__ import annotations

import re

__all__ = [
    "AUTH_PHRASES",
    "AUTH_STATUSES",
    "BILLING_PHRASES",
    "BILLING_STATUSES",
    "CONTEXT_LIMIT_PATTERNS",
    "CONTENT_POLICY_PHRASES",
    "CONTEXT_OVERFLOW_PHRASES",
    "EOF_RESET_CLASSES",
    "EOF_RESET_PHRASES",
    "EOF_WORD",
    "GO_EOF_SUFFIX",
    "HEADER_FAULT_PHRASES",
    "HEADER_PROVIDERS",
    "HEADER_REASON",
    "HEADER_STATUS",
    "HEDGE_PHRASES",
    "HOST_PROVIDERS",
    "HTML_AS_JSON_PHRASES",
    "INPUT_BUDGET_PATTERNS",
    "MALFORMED_HISTORY_PHRASES",
    "MIDDLEBOX_HEADERS",
    "MIDDLEBOX_TEXT",
    "MODULE_PROVIDERS",
    "NETWORK_MODULE_ROOTS",
    "NOT_FOUND_PHRASES",
    "NOT_FOUND_STATUS",
    "OPENAI_ERROR_KEYS",
    "OUTPUT_BUDGET_PATTERNS",
    "OUTPUT_LIMIT_SHAPES",
    "OUTPUT_LIMIT_VALUES",
    "OUTPUT_PARAMETER",
    "OUTPUT_SUM_FORM",
    "OUTPUT_TRUNCATED_CLASSES",
    "OUTPUT_TRUNCATED_PHRASES",
    "CONTENT_REFUSAL_STOP_REASONS",
    "OUTPUT_TRUNCATION_STOP_REASONS",
    "OVERFLOW_EXCESS",
    "OVERFLOW_SUBJECT",
    "OVERFLOW_SUBJECT_413",
    "PARAMETER_ERROR_SHAPES",
    "PAYLOAD_PHRASES",
    "PAYLOAD_REASON_PHRASES",
    "PAYLOAD_STATUSES",
    "PAYLOAD_SUBJECT",
    "PROXY_AUTH_PHRASES",
    "PROXY_AUTH_STATUS",
    "RATE_LIMIT_PHRASES",
    "RATE_LIMIT_STATUSES",
    "RATE_LIMIT_WORDS",
    "REASONS",
    "RETRY_CUE_PHRASES",
    "STATUS_TOKEN",
    "SERVER_FAULT_PHRASES",
    "SUCCESS_SHAPE_KEYS",
    "SUCCESS_WIRE_PROVIDERS",
    "SUSPECTED_PAYLOAD_HISTORY_CHARS",
    "TEXT_PROVIDERS",
    "TIMEOUT_CLASSES",
    "TIMEOUT_PHRASES",
    "TRANSIENT_NETWORK_CLASSES",
    "TRANSIENT_NETWORK_PHRASES",
    "TRANSIENT_STATUSES",
    "WAF_GATE_PHRASES",
    "WAF_SIGNAL_HEADERS",
    "WAF_SIGNAL_PHRASES",
    "WAF_SIGNAL_WORDS",
]

# Billing, credits, quota of an account or key (402): never compacted, never retried. Wordings of OpenAI
# (insufficient_quota), Anthropic ("credit balance is too low"), OpenRouter and DeepSeek (402), xAI,
# LiteLLM proxy budgets and Google ("billing to be enabled"): sourced samples in fixtures/errors/billing.json.
BILLING_STATUSES: tuple[int, ...] = (402,)
BILLING_PHRASES: tuple[str, ...] = (
    "insufficient_quota",
    "exceeded your current quota",
    "insufficient credit",
    "insufficient balance",
    "insufficient_balance",
    "insufficient funds",
    "insufficient account balance",
    "balance is insufficient",
    "credit balance is too low",
    "out of credits",
    "requires more credits",
    "not enough credits",
    "purchase credits",
    "buy credits",
    "add credits",
    "payment required",
    "payment_required",
    "spend limit",
    "spending limit",
    "budget has been exceeded",
    "budget exceeded",
    "exceeded budget",
    "exceeded your budget",
    "max budget",
    "billing is not enabled",
    "billing not enabled",
    "billing to be enabled",
    "enable billing",
    "billing account",
    "billing_not_active",
    "billing hard limit",
    "arrearage",
    "overdue-payment",
    "account is in good standing",
    "api usage limits",
    "credits have been exhausted",
    "run out of credits",
    "ran out of credits",
    "no credits",
    "credit limit",
    "exceeded the credit",
    "quota exceeded for your plan",
)
# Gemini words a per-minute limit like OpenAI's insufficient_quota but asks to come back in seconds:
# that is a rate limit.
RETRY_CUE_PHRASES: tuple[str, ...] = (
    "retry in",
    "try again in",
    "retrydelay",
    "retry_delay",
    "retry after",
    "per minute",
    "perminute",
)

RATE_LIMIT_STATUSES: tuple[int, ...] = (429, 529)
RATE_LIMIT_PHRASES: tuple[str, ...] = (
    "tokens per min",
    "tokens per day",
    "requests per min",
    "requests per day",
    "rate limit",
    "rate_limit",
    "ratelimit",
    "rate-limit",
    "throttl",
    "quota",
    "overloaded",
    "too many requests",
    "resource_exhausted",
    "resource has been exhausted",
    "per hour",
    "per month",
    "monthly",
    "daily limit",
    "usage limit",
    "concurrency limit",
    "too many concurrent",
    "capacity exceeded",
    "at capacity",
)
RATE_LIMIT_WORDS: tuple[str, ...] = ("tpm", "rpm", "tpd", "rpd", "itpm", "otpm")

PAYLOAD_STATUSES: tuple[int, ...] = (413, 431)
HEADER_STATUS = 431
# The reason phrases of 413/431 only restate the status (httpx puts them in every str(exc)).
PAYLOAD_REASON_PHRASES: tuple[str, ...] = (
    "payload too large",
    "request entity too large",
    "content too large",
)
PAYLOAD_PHRASES: tuple[str, ...] = (
    "body too large",
    "request body exceeded",
    "maximum request size",
    "request_too_large",
    "maximum allowed number of bytes",
    "request too long",
    "request that was too large",
    "requestentitytoolarge",
    "payloadtoolarge",
    "larger than the configured limit",
    "request must be smaller than",
    "request exceeds the maximum size",
    "value at 'body' failed to satisfy constraint",
    "http content length exceeded",
)
# A request whose *headers* are over a limit (431, nginx's 400 "Request Header Or Cookie Too Large", Apache's
# "Size of a request header field exceeds server limit"): reason header_431, never a body cap (SPEC §11).
HEADER_FAULT_PHRASES: tuple[str, ...] = (
    "request header fields too large",
    "request header or cookie too large",
    "header fields too large",
    "headers too large",
    "header too large",
    "request header field exceeds",
    "header field exceeds server limit",
    "size of a request header field exceeds",
    "header size exceeds",
    "cookie too large",
    "too many headers",
    "headers are too large",
    "header is too large",
)
# Wording shapes of a byte cap: a size subject and an excess in one clause, no token subject (regex sources).
PAYLOAD_SUBJECT = (
    r"(?<![\w/.=-])(?:bytes?|body|payload|request size|size of (?:the )?request|content[- ]length|"
    r"entity|upload(?:ed)?(?: file)?|file size|\d+(?:\.\d+)?\s*[kmg]i?b)(?![\w/=])"
)

WAF_GATE_PHRASES: tuple[str, ...] = ("forbidden",)
WAF_SIGNAL_PHRASES: tuple[str, ...] = (
    "firewall",
    "security policy",
    "security rule",
    "blocked by",
    "cloudflare",
    "cf-ray",
    "mod_security",
    "modsecurity",
    "akamai",
    "edgesuite",
    "proxy denied",
    "policy violation",
    "request blocked",
    "request rejected",
    "incapsula",
    "imperva",
    "sucuri",
    "fortiweb",
    "fortigate",
    "zscaler",
    "barracuda",
)
WAF_SIGNAL_WORDS: tuple[str, ...] = ("waf",)
WAF_SIGNAL_HEADERS: tuple[str, ...] = ("cf-mitigated", "x-amzn-waf-action")
HTML_AS_JSON_PHRASES: tuple[str, ...] = (
    "invalid character '<'",
    "deserialization failed",
    "failed to decode response body",
)
# A forward proxy asking for *its* credentials (squid ERR_CACHE_ACCESS_DENIED, 407) is auth, not a block.
PROXY_AUTH_PHRASES: tuple[str, ...] = (
    "proxy authentication required",
    "cache access denied",
    "until you have authenticated yourself",
    "proxy-authorization",
    "proxy authorization required",
)
PROXY_AUTH_STATUS = 407

MALFORMED_HISTORY_PHRASES: tuple[str, ...] = (
    "ids were found without tool_result blocks",
    "unexpected tool_use_id found in tool_result",
    "must have a corresponding tool_use block",
    "must have a corresponding tool_result block",
    "tool_result block(s) provided when previous message",
    "roles must alternate",
    "must be followed by tool messages responding to each 'tool_call_id'",
    "did not have response messages",
    "must be a response to a preceeding message with 'tool_calls'",
    "must be a response to a preceding message with 'tool_calls'",
    "no tool output found for function call",
    "no tool call found for function call output",
    "function call turn comes immediately after",
    "function response turn comes immediately after",
    "number of function response parts is equal",
    "messages following tool_use blocks must begin with",
    "alternate between user and model",
    "must alternate between user and assistant",
    "exceeds the number of tooluse blocks",
    "expected toolresult blocks",
    "not the same number of function calls and responses",
    "unexpected role 'user' after role 'tool'",
    "must end with a user message",
    "must start with a user message",
    "must begin with a user message",
    "does not support assistant message prefill",
)

# A response cut at its output cap, reported as an error text (SDK parse helpers, agent frameworks).
OUTPUT_TRUNCATED_PHRASES: tuple[str, ...] = (
    "length limit was reached",
    "max_tokens was reached",
    "max_tokens limit was reached",
    "max_output_tokens was reached",
    "model output limit was reached",
    "finish_reason='length'",
    "finish_reason: length",
    "finish_reason=length",
    "stop_reason: max_tokens",
    "stop_reason='max_tokens'",
    "hit the max_tokens limit",
    "reached max_tokens",
)

# An output parameter (max_tokens & co.) over the model's limit: lower it, never compact (SPEC §11).
# Sources: OpenAI "max_tokens is too large", Anthropic "max_tokens: N > M, which is the maximum allowed
# number of output tokens", Bedrock "The maximum tokens you requested exceeds the model limit", Groq
# "max_tokens must be less than or equal to", DeepSeek "the valid range of max_tokens is [1, 8192]",
# Gemini "maxOutputTokens value ... supported range", TGI "max_new_tokens must be <=",
# vLLM "'max_tokens' ... is too large".
OUTPUT_PARAMETER = (
    r"(?:max_(?:new_|completion_|output_)?tokens(?:_to_sample)?|maxoutputtokens|max_gen_len|num_predict|"
    r"maxtokens|max(?:imum)? (?:output|completion|new) tokens|maximum tokens you requested|"
    r"(?:output|completion) tokens? (?:limit|count))"
)
OUTPUT_LIMIT_SHAPES: tuple[str, ...] = (
    OUTPUT_PARAMETER + r"['\"]?(?:\s*(?:or|and|/)\s*['\"]?" + OUTPUT_PARAMETER + r"['\"]?)?"
    r"(?:[^.\n]|\.(?=\w)){0,60}?"
    r"(?:\bis too (?:large|big|high)|\btoo (?:large|big|high)|\bexceed"
    r"|\bmust be (?:less|smaller|lower|at most|<=|between|in\b)"
    r"|\bshould be (?:less|smaller|lower|at most|<=|between|in\b|\[)"
    r"|\bcannot (?:exceed|be (?:more|greater|larger))|\bgreater than|\blarger than|\babove\b"
    r"|\bout of range|\d\s*>\s*\d|:\s*\d+\s*>"
    r"|(?:supported|valid|allowed) range)",
    r"(?:range|maximum value) (?:of|for) " + OUTPUT_PARAMETER,
    r"(?:supports?|allows?) at most \d+ (?:output |completion |new )?tokens",
    r"maximum allowed number of output tokens",
)
# "input + max_tokens exceed the window" is the input's overflow, not an output limit.
OUTPUT_SUM_FORM = (
    r"(?:inputs?|prompt)(?: (?:length|tokens?))?\s*(?:\+|and|plus)\s*['\"]?max_\w*tokens"
    r"|max_\w*tokens['\"]?\s*(?:\+|and|plus)\s*(?:the\s+)?(?:inputs?|prompt)"
)
# Where an output-limit text states the cap: (pattern, how to read it). "value" = the group; "exclusive" =
# the group minus one; "difference" = group 2 minus group 3 (vLLM's "(max_tokens > window - input)").
OUTPUT_LIMIT_VALUES: tuple[tuple[str, str], ...] = (
    (r"\(\d+ > (\d+) - (\d+)\)", "difference"),
    (r"at most (\d+) (?:output |completion |new )?tokens", "value"),
    (r"> (\d+), which is the maximum", "value"),
    (r"model limit of (\d+)", "value"),
    (r"from \d+ \(inclusive\) to (\d+) \(exclusive\)", "exclusive"),
    (r"range (?:of [\w ]+ )?(?:is|should be)?:? ?\[\s*\d+\s*,\s*(\d+)\s*\]", "value"),
    (
        r"(?:less than or equal to|<=|at most|no more than|not exceed|maximum value (?:for \w+ )?is) ?(\d+)",
        "value",
    ),
)

CONTEXT_OVERFLOW_PHRASES: tuple[str, ...] = (
    "context length",
    "context window",
    "context_length_exceeded",
    "context-length-exceeded",
    "maximum context",
    "max context",
    "prompt is too long",
    "prompt too long",
    "input too long",
    "input is too long",
    "request too large",
    "too many tokens",
    "token limit",
    "input token count",
    "maximum prompt length",
    "maximum number of tokens",
    "exceeds the maximum",
    "exceeds model",
    "reduce the length",
    "reduce your prompt",
    "messages too long",
    "conversation too long",
    "too long",
    "available context size",
    "expected maxlength",
)
# The structure every provider and server words an overflow with: a subject (what is too big) and an excess
# (how) in one clause — "prompt token count of 93854 exceeds the limit", "inputs tokens + max_new_tokens must
# be <= 4096", "Range of input length should be [1, 30720]", "input is larger than the max context size",
# "request (4476 tokens) exceeds the available context size". Regex sources, matched per clause.
# A subject is a word of the sentence: never a path (/v1/messages), an identifier (max_length) or a JSON key
# ('message': ...).
OVERFLOW_SUBJECT = (
    r"(?<![\w/.=-])(?:tokens?|context|prompts?|inputs?|messages?|conversation|sequence|history|length)"
    r"(?![\w/=-])(?!['\"]?\s*:)"
)
# After a 413, "length" may be bytes: only tokens, context and prompt name the model's window.
OVERFLOW_SUBJECT_413 = r"(?<![\w/.=-])(?:tokens?|context|prompts?)(?![\w/=-])(?!['\"]?\s*:)"
OVERFLOW_EXCESS = (
    r"\bexceed\w*|\btoo (?:long|large|big|many)\b|\b(?:larger|greater|longer|more) than\b"
    r"|\b(?:over|above|beyond) (?:the |its |our )?(?:limit|max\w*|allowed)|\bmaximum\b|\bmax\b|\blimit\b"
    r"|\boverflow\w*|\bout of range\b|\bmust (?:be|have) (?:less|fewer|shorter|at most|no more|<=)"
    r"|\bshould be (?:less|fewer|shorter|at most|<=|\[)|\brange of\b|\d\s*(?:tokens?\s*)?>\s*\d"
    r"|\bnot enough\b"
)
# A text that lists possible causes ("this might be due to: ... large context ...") diagnoses nothing.
HEDGE_PHRASES: tuple[str, ...] = (
    "might be due to",
    "may be due to",
    "could be due to",
    "possible causes",
    "possible reasons",
    "one of the following reasons",
)
# Texts that name a size but are parameter errors: another field than the conversation (a tool's name, a URL),
# a pydantic validation of a scalar. Never overflow, never payload.
PARAMETER_ERROR_SHAPES: tuple[str, ...] = (
    r"invalid '(?!(?:messages|input|contents|prompt|system|instructions)\b)[\w.\[\]-]+'",
    r"\binput should be\b",
    r"\binput_value=",
    r"\[type=\w+",
    r"\b(?:request-?)?(?:uri|url|filename|file name|path|argument list) (?:is )?too long",
    r"\b(?:tools|functions)\b[^.\n]{0,40}\b(?:exceed\w*|too many|too long)",
)
AUTH_STATUSES: tuple[int, ...] = (401, 403, 407)
AUTH_PHRASES: tuple[str, ...] = (
    "invalid api key",
    "invalid_api_key",
    "incorrect api key",
    "api key not valid",
    "invalid x-api-key",
    "authentication_error",
    "authentication failed",
    "invalid authentication",
    "unauthorized",
    "permission denied",
    "permission_denied",
    "accessdeniedexception",
    "unrecognizedclientexception",
    "security token included in the request is invalid",
    "missing authentication token",
    "permission_error",
    "does not have permission",
    "do not have permission",
    "don't have access",
    "do not have access",
    "does not have access",
    "invalid subscription key",
    "not authorized to perform",
    "unauthenticated",
    "api key expired",
    "expired api key",
    "no api key",
    "api key is missing",
    "missing api key",
    "token has expired",
    "token is expired",
    "expiredtokenexception",
    "incorrect_api_key",
    "auth credentials",
    "invalid credentials",
    "missing credentials",
    "credentials not found",
)

# A provider's own content policy (moderation, safety system, usage policy): the request is refused for what
# it says, by the provider, not by a middlebox: "other" — never a WAF block, never auth, never retried.
# Sources: OpenAI content_policy_violation / invalid_prompt, Azure OpenAI content management policy, Gemini
# IMAGE_SAFETY, Anthropic "Output blocked by content filtering policy" (samples in fixtures/errors/).
CONTENT_POLICY_PHRASES: tuple[str, ...] = (
    "content policy",
    "content_policy",
    "safety system",
    "content moderation",
    "usage policy",
    "usage policies",
    "content management policy",
    "content filter",
    "content_filter",
    "safety policy",
    "responsible ai",
    "flagged as",
    "was flagged",
    "violate our policies",
    "violating our",
    "may violate",
    "image_safety",
    "unsafe_generation",
    "moderation",
)

# A model or route that does not exist (404): "other", read before the auth phrases, since OpenAI words it
# "does not exist or you do not have access to it".
NOT_FOUND_STATUS = 404
NOT_FOUND_PHRASES: tuple[str, ...] = (
    "does not exist",
    "model_not_found",
    "not_found_error",
    "no such model",
    "unknown model",
    "model not found",
    "was not found",
    "is not found",
    "could not find model",
    "not_found",
)

TIMEOUT_PHRASES: tuple[str, ...] = (
    "deadline exceeded",
    "timed out",
    "timeout",
    "time-out",
    "time out",
)
EOF_RESET_PHRASES: tuple[str, ...] = (
    "unexpected eof",
    "connection reset",
    "broken pipe",
    "stream error",
    "reset by peer",
    "server disconnected",
    "peer closed connection",
    "connection aborted",
    "incomplete chunked read",
    "remote end closed connection",
    "eof occurred in violation of protocol",
)
TRANSIENT_NETWORK_PHRASES: tuple[str, ...] = (
    "connection refused",
    "connection error",
    "network is unreachable",
    "no route to host",
    "name resolution",
    "name or service not known",
    "all connection attempts failed",
    "upstream connect error",
    "bad gateway",
    "service unavailable",
    "temporarily unavailable",
)
TRANSIENT_STATUSES: tuple[int, ...] = (408, 500, 502, 503, 504, 520, 521, 522, 523, 524)
# A server's own fault, said in words (OpenAI "server_error", Anthropic "api_error"/"Internal server error"):
# transient, but read last — llama.cpp answers an overflow with type "server_error" and status 500.
SERVER_FAULT_PHRASES: tuple[str, ...] = (
    "server had an error",
    "internal server error",
    "server_error",
    "api_error",
    "internal error",
    "an error occurred while processing your request",
    "backend error",
    "upstream error",
    "internal_server_error",
    "internalservererror",
    "serviceunavailable",
    "service_unavailable",
    "the server is currently unable",
    "please try again later",
)

# Exception classes, matched by name on the MRO when the class lives in a network module.
NETWORK_MODULE_ROOTS: tuple[str, ...] = (
    "httpx",
    "httpx2",
    "httpcore",
    "httpcore2",
    "builtins",
    "socket",
    "ssl",
    "http",
    "h11",
    "h2",
    "anyio",
    "urllib3",
    "requests",
    "aiohttp",
    "openai",
    "anthropic",
)
TIMEOUT_CLASSES: tuple[str, ...] = (
    "TimeoutException",
    "TimeoutError",
    "APITimeoutError",
    "ReadTimeout",
    "WriteTimeout",
    "ConnectTimeout",
    "PoolTimeout",
    "Timeout",
)
EOF_RESET_CLASSES: tuple[str, ...] = (
    "RemoteProtocolError",
    "ReadError",
    "WriteError",
    "ConnectionResetError",
    "BrokenPipeError",
    "ConnectionAbortedError",
    "RemoteDisconnected",
    "IncompleteRead",
    "SSLEOFError",
    "ServerDisconnectedError",
    "ChunkedEncodingError",
    "EndOfStream",
    "BrokenResourceError",
)
TRANSIENT_NETWORK_CLASSES: tuple[str, ...] = (
    "ConnectError",
    "NetworkError",
    "TransportError",
    "APIConnectionError",
    "ConnectionError",
    "gaierror",
    "ProxyError",
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
# SPEC §12: a provider's own refusal inside a successful (200) answer: (wire, path, values; empty = any
# string there). Sources: OpenAI chat finish_reason "content_filter" and Responses incomplete_details
# (platform.openai.com/docs/api-reference); Gemini promptFeedback.blockReason and finishReason SAFETY,
# PROHIBITED_CONTENT, BLOCKLIST (ai.google.dev/api/generate-content#FinishReason); Anthropic stop_reason
# "refusal" (docs.anthropic.com, handling stop reasons); Bedrock Converse stopReason
# "guardrail_intervened" / "content_filtered" (docs.aws.amazon.com, Converse API StopReason).
CONTENT_REFUSAL_STOP_REASONS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("openai-chat", "choices[].finish_reason", ("content_filter",)),
    ("openai-responses", "incomplete_details.reason", ("content_filter",)),
    ("gemini", "promptFeedback.blockReason", ()),
    ("gemini", "candidates[].finishReason", ("SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST")),
    ("anthropic", "stop_reason", ("refusal",)),
    ("bedrock-converse", "stopReason", ("guardrail_intervened", "content_filtered")),
)
SUCCESS_WIRE_PROVIDERS: dict[str, str] = {
    "openai-responses": "openai",
    "anthropic": "anthropic",
    "anthropic-stream": "anthropic",
    "bedrock-converse": "bedrock",
    "gemini": "gemini",
    "ollama": "ollama",
    "llama.cpp": "llama.cpp",
}
SUCCESS_SHAPE_KEYS: tuple[str, ...] = (
    "choices",
    "candidates",
    "stop_reason",
    "stopReason",
    "output",
    "done_reason",
    "done",
    "incomplete_details",
    "usageMetadata",
)

# §2.5: reason label and text per recoverable-by-compaction kind.
REASONS: dict[str, tuple[str, str]] = {
    "payload_too_large": ("payload_413", "proxy/gateway payload limit (413/431)"),
    "waf_rejection": ("waf_403", "proxy/WAF rejection (403 + security signals)"),
    "suspected_payload": ("suspected_payload", "suspected payload limit (large history %s + network error)"),
    "context_overflow": ("ctx_too_long", "context too long"),
}
# SPEC §11: a 431 (or any header-size fault) is payload_too_large with its own label; it teaches no body cap.
HEADER_REASON: tuple[str, str] = ("header_431", "request headers too large (431)")

# Provider / middlebox identification, best effort, first match wins.
HOST_PROVIDERS: tuple[tuple[str, str], ...] = (
    ("openai.azure.com", "azure"),
    ("azure", "azure"),
    ("api.openai.com", "openai"),
    ("anthropic.com", "anthropic"),
    ("generativelanguage.googleapis.com", "gemini"),
    ("aiplatform.googleapis.com", "vertex"),
    ("bedrock", "bedrock"),
    ("api.x.ai", "xai"),
    ("mistral.ai", "mistral"),
    ("groq.com", "groq"),
    ("openrouter.ai", "openrouter"),
    (":11434", "ollama"),
)
TEXT_PROVIDERS: tuple[tuple[str, str], ...] = (
    ("openrouter", "openrouter"),
    ("azure", "azure"),
    ("bedrock", "bedrock"),
    ("validationexception", "bedrock"),
    ("throttlingexception", "bedrock"),
    ("groq", "groq"),
    ("exceed_context_size_error", "llama.cpp"),
    ("context shift", "llama.cpp"),
    ("llama.cpp", "llama.cpp"),
    ("ollama", "ollama"),
    ("vllm", "vllm"),
    ("mistral", "mistral"),
    ("maximum prompt length", "xai"),
    ("x.ai", "xai"),
    ("generativelanguage", "gemini"),
    ("gemini", "gemini"),
    ("invalid_argument", "gemini"),
    ("resource_exhausted", "gemini"),
    ("anthropic", "anthropic"),
    ("overloaded_error", "anthropic"),
    ("prompt is too long", "anthropic"),
    ("openai", "openai"),
)
HEADER_PROVIDERS: tuple[tuple[str, str], ...] = (
    ("openai-", "openai"),
    ("anthropic-", "anthropic"),
    ("x-amzn-bedrock-", "bedrock"),
    ("apim-request-id", "azure"),
    ("x-ms-region", "azure"),
    ("x-groq-", "groq"),
)
OPENAI_ERROR_KEYS: frozenset[str] = frozenset({"message", "type", "param", "code"})
MODULE_PROVIDERS: tuple[tuple[str, str], ...] = (
    ("openai", "openai"),
    ("anthropic", "anthropic"),
    ("google", "gemini"),
    ("botocore", "bedrock"),
    ("mistralai", "mistral"),
    ("groq", "groq"),
)
MIDDLEBOX_TEXT: tuple[tuple[str, str], ...] = (
    ("cloudflare", "cloudflare"),
    ("cf-ray", "cloudflare"),
    ("akamai", "akamai"),
    ("edgesuite", "akamai"),
    ("incapsula", "imperva"),
    ("imperva", "imperva"),
    ("mod_security", "modsecurity"),
    ("modsecurity", "modsecurity"),
    ("the requested url was rejected", "f5"),
    ("big-ip", "f5"),
    ("bigip", "f5"),
    ("cloudfront", "cloudfront"),
    ("aws waf", "aws-waf"),
    ("awselb", "aws-alb"),
    ("microsoft-azure-application-gateway", "azure-appgw"),
    ("envoy", "envoy"),
    ("fortigate", "fortinet"),
    ("fortiweb", "fortinet"),
    ("zscaler", "zscaler"),
    ("sucuri", "sucuri"),
    ("nginx", "nginx"),
    ("apache", "apache"),
)
MIDDLEBOX_HEADERS: tuple[tuple[str, str], ...] = (
    ("cf-ray", "cloudflare"),
    ("cf-mitigated", "cloudflare"),
    ("x-amzn-waf-action", "aws-waf"),
    ("x-iinfo", "imperva"),
    ("x-sucuri-id", "sucuri"),
)


# A status code standing as a status: after HTTP/status/code/error (``HTTP/1.1 413``, ``StatusCode: 403``,
# ``Error code: 429``), before its reason phrase (``413 Payload Too Large``, ``502 Bad Gateway``) or alone in
# parentheses, or before the body it answers — never a number inside prose (``14130 tokens``,
# ``messages[413]``, ``line 431``). SPEC §2.2.
STATUS_TOKEN = re.compile(
    r"\b(?:https?(?:/[\d.]+)?|status(?:[ _-]?code)?|error(?:[ _-]?code)?|code|response code)\s*[:=#]?\s*"
    r"([45]\d\d)(?!\d)"
    r"|(?<![\w.,:=#/\[-])([45]\d\d)\s*[:.-]?\s*(?:payload|request|content|entity|forbidden|too|header|"
    r"unauthori[sz]ed|bad|not|service|gateway|internal|payment|proxy|precondition|unprocessable|method|"
    r"length|unsupported|insufficient|network|error|uri)\b"
    r"|\(\s*([45]\d\d)\s*\)"
    r"|(?<![\w.,:=#/\[-])([45]\d\d)\s*-?\s*(?=\{)"  # "401 {\"error\": ...}": a status before its body
)
EOF_WORD = re.compile(r"\beof\b")
GO_EOF_SUFFIX = re.compile(r":\s*eof\s*$", re.MULTILINE)  # Go's `Post "https://…": EOF`


# Overflow texts that state the model's real window, in tokens (the last group is the limit).
CONTEXT_LIMIT_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        r"maximum context length is (\d+) tokens",  # OpenAI chat, vLLM
        r"prompt is too long: \d+ tokens > (\d+) maximum",  # Anthropic
        r"exceed context limit: \d+ \+ \d+ > (\d+)",  # Anthropic, input + max_tokens
        r"maximum number of tokens allowed \((\d+)\)",  # Gemini
        r"(\d+) maximum context length",  # "too large for model with N ..."
        r"context window of (\d+) tokens",  # generic
        r"exceeds the context window \((\d+)\)",
        r"inputs tokens \+ max_new_tokens must be <= (\d+)",  # TGI, Together
        r"maximum supported sequence length is (?:just )?(\d+)",  # SambaNova
        r"available context size \((\d+) tokens\)",  # llama.cpp
    )
)
# The budget an overflow text breaks down: how many tokens the *input* takes (messages/prompt) and how many
# the *output* reserves (completion, max_new_tokens). With the window (CONTEXT_LIMIT_PATTERNS) they decide
# between the kinds: an input that fits while the output budget pushes the sum over is an output limit
# (lower max_tokens to window − input); an input over the window is an overflow (compact).
INPUT_BUDGET_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        # OpenAI, vLLM, OpenRouter
        r"\((\d+) (?:in|of|for) (?:the |your )?(?:messages?|prompt|text input|input)",
        r"your messages resulted in (\d+) tokens",  # OpenAI chat
        r"given: (\d+) inputs tokens",  # TGI, Together
        r"your request has (\d+) input tokens",  # vLLM >= 0.6
        r"context limit: (\d+) \+ \d+ >",  # Anthropic
        r"prompt is (\d+) tokens long",  # SambaNova
        r"prompt is too long: (\d+) tokens >",  # Anthropic, input alone
        r"input token count \((\d+)\) exceeds",  # Gemini
    )
)
OUTPUT_BUDGET_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        r"(\d+) (?:in|for) (?:the )?(?:completion|output)\)",
        r"(\d+) max_new_tokens",
        r"context limit: \d+ \+ (\d+) >",
        r"generating (\d+) tokens",
        r"is too large: (\d+)",
    )
)
