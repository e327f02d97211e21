"""Mock LLM providers per wire format: strict validation, real error bodies, usage, streaming (and streams
that fail mid-way), prices."""

from simulator.providers.mock import (
    DEFAULT_PRICE,
    FORMATS,
    IMAGE_TOKENS,
    PRICES,
    MockProvider,
    ParsedRequest,
    Price,
    ProviderCall,
    Reply,
    Script,
    Usage,
    cost,
    estimate_tokens,
    format_for_path,
    price_for,
    rate_limit_response,
)
from simulator.providers.service import HOSTS, MockService
from simulator.providers.stream_errors import error_event, failing_stream
from simulator.providers.streaming import StreamOptions, stream_response

__all__ = [
    "DEFAULT_PRICE",
    "FORMATS",
    "HOSTS",
    "IMAGE_TOKENS",
    "PRICES",
    "MockProvider",
    "MockService",
    "ParsedRequest",
    "Price",
    "ProviderCall",
    "Reply",
    "Script",
    "StreamOptions",
    "Usage",
    "cost",
    "error_event",
    "estimate_tokens",
    "failing_stream",
    "format_for_path",
    "price_for",
    "rate_limit_response",
    "stream_response",
]
