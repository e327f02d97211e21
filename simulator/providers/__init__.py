"""Mock LLM providers per wire format: windows, strict validation, real error bodies, usage, prices."""

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

__all__ = [
    "DEFAULT_PRICE",
    "FORMATS",
    "IMAGE_TOKENS",
    "PRICES",
    "MockProvider",
    "ParsedRequest",
    "Price",
    "ProviderCall",
    "Reply",
    "Script",
    "Usage",
    "cost",
    "estimate_tokens",
    "format_for_path",
    "price_for",
    "rate_limit_response",
]
