"""Fixtures shared by the library tests: a minimal provider per wire format over httpx.MockTransport."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from ctxrecover.transport import HttpxSender

WIRE_FORMATS = ("openai-chat", "openai-responses", "anthropic", "gemini", "bedrock-converse")


def success_body(fmt: str, text: str) -> dict[str, Any]:
    """The smallest success response of each wire format, answering ``text``."""
    if fmt == "openai-chat":
        return {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
    if fmt == "openai-responses":
        return {
            "status": "completed",
            "output": [
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
            ],
        }
    if fmt == "anthropic":
        return {"role": "assistant", "content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}
    if fmt == "gemini":
        return {
            "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}]
        }
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": "end_turn",
    }


@dataclass
class FakeProvider:
    """Answers every request of ``fmt`` with a short success; records each body it received.

    ``reject(body, n)`` may return an ``httpx.Response`` to send instead (n counts requests from 1).
    """

    fmt: str = "openai-chat"
    reject: Callable[[bytes, int], httpx.Response | None] | None = None
    bodies: list[bytes] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(request.content)
        json.loads(request.content)  # every body the library sends is valid JSON
        if self.reject is not None:
            refused = self.reject(request.content, len(self.bodies))
            if refused is not None:
                return refused
        return httpx.Response(200, json=success_body(self.fmt, f"answer {len(self.bodies)}"))

    def sender(self) -> HttpxSender:
        return HttpxSender(
            self.fmt,
            base_url="https://provider.test",
            model="test-model",
            transport=httpx.MockTransport(self),
        )


@pytest.fixture
def fake_provider() -> Callable[..., FakeProvider]:
    """``fake_provider(fmt="openai-chat", reject=None)`` → a :class:`FakeProvider` (``.sender()``)."""
    return FakeProvider
