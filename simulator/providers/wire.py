"""The contract of a mock wire format (:class:`Wire`) and the pieces the formats share.

A format's ``analyse`` validates a request the way the real API does and raises
:class:`Invalid` for what the API would refuse; :class:`~simulator.providers.mock.MockProvider`
turns it into that provider's own error response. :class:`Tally` counts chars and
images and also hashes content blocks, to find prompt-cache breakpoints.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx

from ctxrecover.messages import ToolCall
from simulator.providers.prices import Usage

__all__ = ["Invalid", "ReplyParts", "Tally", "Wire", "content_blocks", "json_response"]


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
    """Chars and images of a request, plus prompt-cache breakpoints (hash, chars, images)."""

    message_count: int = 0
    chars: int = 0
    images: int = 0
    breakpoints: list[tuple[str, int, int]] = field(default_factory=list)
    _digest: Any = field(default_factory=hashlib.sha256)

    def text(self, value: object) -> None:
        if isinstance(value, str):
            self.chars += len(value)

    def json(self, value: object) -> None:
        self.chars += _json_len(value)

    def block(self, block: object, *, breakpoint_after: bool = False) -> None:
        """Feed one content block to the prompt-cache hash; mark a breakpoint after it."""
        if isinstance(block, dict):
            block = {k: v for k, v in block.items() if k != "cache_control"}
        self._digest.update(json.dumps(block, sort_keys=True, ensure_ascii=False).encode())
        if breakpoint_after:
            self.breakpoints.append((self._digest.copy().hexdigest(), self.chars, self.images))


def _json_len(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


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
