"""The contract of a mock wire format (:class:`Wire`) and the pieces the formats share.

A format's ``analyse`` validates a request the way the real API does and raises
:class:`Invalid` for what the API would refuse; :class:`~simulator.providers.mock.MockProvider`
turns it into that provider's own error response. :class:`Tally` counts input tokens (text
and images) and also hashes content blocks, to find prompt-cache breakpoints.
"""

from __future__ import annotations

import hashlib
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx

from ctxrecover.image_tokens import IMAGE_MIN_TOKENS, estimate_image_tokens
from ctxrecover.messages import IMAGE_DETAILS, Image, ToolCall
from simulator.providers.prices import Usage
from simulator.providers.tokens import TokenCounter

__all__ = ["Invalid", "ReplyParts", "Tally", "Wire", "content_blocks", "image_of", "json_response"]


class Invalid(Exception):
    """A request the real API would refuse (raised by the format validators)."""

    def __init__(
        self,
        message: str,
        *,
        outcome: str = "invalid_request",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.outcome = outcome
        self.param = param
        self.code = code


@dataclass(slots=True)
class Tally:
    """The input tokens of a request as the mock counts them, plus prompt-cache breakpoints (hash, tokens).

    Text goes through a :class:`~simulator.providers.tokens.TokenCounter` (English at
    ``chars_per_token``, token-dense text as tokenizers count it); each image costs what its
    provider's published rule says (``price``, by default SPEC §1.2's estimate).
    """

    chars_per_token: float = 4.0
    price: Callable[[Image], int] = estimate_image_tokens
    message_count: int = 0
    image_tokens: int = 0
    counter: TokenCounter = field(init=False)
    breakpoints: list[tuple[str, int]] = field(default_factory=list)
    _digest: Any = field(default_factory=hashlib.sha256)

    def __post_init__(self) -> None:
        self.counter = TokenCounter(self.chars_per_token)

    @property
    def tokens(self) -> int:
        """Input tokens so far: text and images."""
        return self.counter.tokens + self.image_tokens

    def text(self, value: object) -> None:
        if isinstance(value, str):
            self.counter.add(value)

    def json(self, value: object) -> None:
        self.counter.add(json.dumps(value, ensure_ascii=False, separators=(",", ":")))

    def image(self, image: Image | None) -> None:
        """Count one image block (``None``: a block whose image cannot be read, at SPEC §1.2's 85)."""
        self.image_tokens += self.price(image) if image is not None else IMAGE_MIN_TOKENS

    def block(self, block: object, *, breakpoint_after: bool = False) -> None:
        """Feed one content block to the prompt-cache hash; mark a breakpoint after it."""
        if isinstance(block, dict):
            block = {k: v for k, v in block.items() if k != "cache_control"}
        self._digest.update(json.dumps(block, sort_keys=True, ensure_ascii=False).encode())
        if breakpoint_after:
            self.breakpoints.append((self._digest.copy().hexdigest(), self.tokens))


DATA_URL_RE = re.compile(r"data:(?P<media_type>[^;,]*);base64,(?P<data>.*)", re.DOTALL)


def image_of(
    data: object = None, *, url: object = None, media_type: object = None, detail: object = None
) -> Image | None:
    """The :class:`Image` an image block sends (inline base64 ``data`` or a ``url``, a ``data:`` URL read as
    data), or None when it holds neither."""
    kind = media_type if isinstance(media_type, str) else "image/png"
    level = detail if detail in IMAGE_DETAILS else None
    if isinstance(url, str):
        found = DATA_URL_RE.fullmatch(url)
        if found is not None:
            return Image(data=found["data"], media_type=found["media_type"] or kind, detail=level)
        return Image(url=url, media_type=kind, detail=level)
    if isinstance(data, str):
        return Image(data=data, media_type=kind, detail=level)
    return None


def content_blocks(content: object) -> list[Any]:
    """Content as a list of blocks (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content) if isinstance(content, list) else []


def json_response(status: int, payload: object, headers: Mapping[str, str] | None = None) -> httpx.Response:
    """A JSON response with ``content-type: application/json`` plus ``headers``."""
    body = json.dumps(payload, ensure_ascii=False).encode()
    all_headers = {"content-type": "application/json", **(headers or {})}
    return httpx.Response(status, headers=all_headers, content=body)


@dataclass(frozen=True, slots=True)
class ReplyParts:
    """A reply ready to render: ids minted, truncation applied, usage known."""

    model: str
    text: str
    tool_calls: tuple[ToolCall, ...]
    truncated: bool
    usage: Usage
    response_id: str
    call_index: int


class Wire(ABC):
    """How one provider parses, validates, errs and replies."""

    fmt: ClassVar[str]
    tool_id_prefix: ClassVar[str] = "call_"

    def model(self, body: Mapping[str, Any], path_model: str | None) -> str:
        return str(body.get("model") or "")

    @abstractmethod
    def max_tokens(self, body: Mapping[str, Any]) -> tuple[str, int | None]:
        raise NotImplementedError

    @abstractmethod
    def analyse(self, body: Mapping[str, Any], tally: Tally) -> None:
        raise NotImplementedError

    @abstractmethod
    def error(
        self, message: str, *, status: int = 400, param: str | None = None, code: str | None = None
    ) -> httpx.Response:
        raise NotImplementedError

    @abstractmethod
    def invalid_json(self, raw: bytes) -> httpx.Response:
        raise NotImplementedError

    @abstractmethod
    def overflow(self, input_tokens: int, window: int, max_tokens: int | None) -> httpx.Response | None:
        raise NotImplementedError

    @abstractmethod
    def output_cap(self, param: str, requested: int, cap: int, model: str) -> httpx.Response:
        raise NotImplementedError

    @abstractmethod
    def rate_limited(self, model: str, retry_after: int, input_tokens: int) -> httpx.Response:
        raise NotImplementedError

    @abstractmethod
    def reply_payload(self, parts: ReplyParts) -> dict[str, Any]:
        """The JSON document of a successful (non-streamed) answer."""
        raise NotImplementedError

    def reply_headers(self, parts: ReplyParts) -> dict[str, str]:
        """Extra headers of a successful answer (streamed or not)."""
        return {}

    def reply(self, parts: ReplyParts) -> httpx.Response:
        """A successful answer: :meth:`reply_payload` as JSON with :meth:`reply_headers`."""
        return json_response(200, self.reply_payload(parts), self.reply_headers(parts))
