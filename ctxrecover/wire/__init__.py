"""Wire formats: real request bodies, their exact and incremental byte sizes, and response parsing."""

from ctxrecover.wire.chunks import BodyEncoder
from ctxrecover.wire.formats import (
    DEFAULT_ANTHROPIC_MAX_TOKENS,
    HISTORY_KEYS,
    MAX_TOKENS_FIELDS,
    RAW_ARGUMENTS_KEY,
    WireFormat,
    encode_body,
)
from ctxrecover.wire.render import encode_request, render_request, request_path
from ctxrecover.wire.response import (
    TRUNCATION_STOP_REASONS,
    USAGE_FIELDS,
    ParsedResponse,
    Usage,
    parse_response,
)
from ctxrecover.wire.size import WireSizeTracker, history_bytes, request_size, system_bytes

__all__ = [
    "BodyEncoder",
    "DEFAULT_ANTHROPIC_MAX_TOKENS",
    "HISTORY_KEYS",
    "MAX_TOKENS_FIELDS",
    "RAW_ARGUMENTS_KEY",
    "TRUNCATION_STOP_REASONS",
    "USAGE_FIELDS",
    "ParsedResponse",
    "Usage",
    "WireFormat",
    "WireSizeTracker",
    "encode_body",
    "encode_request",
    "history_bytes",
    "parse_response",
    "render_request",
    "request_path",
    "request_size",
    "system_bytes",
]
