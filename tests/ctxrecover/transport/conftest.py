"""One body of assertions, two drivers: the ``io`` fixture builds the sync or the async form of a sender.

Tests are ``async def`` and marked ``anyio``; ``await io.send(sender, request)`` calls a sync
sender directly and awaits an async one, so each test runs once per driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from ctxrecover.transport import (
    AnthropicSDKSender,
    AsyncAnthropicSDKSender,
    AsyncHttpxSender,
    AsyncOpenAISDKSender,
    AsyncSender,
    ChatRequest,
    ChatResponse,
    HttpxSender,
    OpenAISDKSender,
    Sender,
)

SDK_SENDERS: dict[tuple[str, bool], type[Any]] = {
    ("openai", False): OpenAISDKSender,
    ("openai", True): AsyncOpenAISDKSender,
    ("anthropic", False): AnthropicSDKSender,
    ("anthropic", True): AsyncAnthropicSDKSender,
}


@dataclass(frozen=True)
class Drive:
    """The sync (``is_async`` False) or async form of every sender, and how to call it."""

    is_async: bool

    def httpx(self, fmt: str, handler: Any = None, **kwargs: Any) -> HttpxSender | AsyncHttpxSender:
        """An httpx sender over ``httpx.MockTransport(handler)`` (or the given ``transport``/``client``)."""
        if handler is not None:
            kwargs["transport"] = httpx.MockTransport(handler)
        kwargs.setdefault("base_url", "http://provider.test")
        kwargs.setdefault("model", "m")
        sender = (AsyncHttpxSender if self.is_async else HttpxSender)(fmt, **kwargs)
        assert isinstance(sender, AsyncSender if self.is_async else Sender)
        return sender

    def client(self, sdk: str, **kwargs: Any) -> Any:
        """An ``openai`` / ``anthropic`` client (async for the async driver), ``max_retries=0``."""
        module = pytest.importorskip(sdk)
        name = {"openai": "OpenAI", "anthropic": "Anthropic"}[sdk]
        return getattr(module, f"Async{name}" if self.is_async else name)(max_retries=0, **kwargs)

    def sdk(self, sdk: str, client: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("model", "m")
        return SDK_SENDERS[sdk, self.is_async](client, **kwargs)

    async def send(self, sender: Any, request: ChatRequest) -> ChatResponse:
        if self.is_async:
            response: ChatResponse = await sender.send(request)
        else:
            response = sender.send(request)
        return response

    async def close(self, thing: Any) -> None:
        """Close a sender or an SDK client."""
        if self.is_async:
            await (thing.aclose() if hasattr(thing, "aclose") else thing.close())
        else:
            thing.close()


@pytest.fixture(params=[False, True], ids=["sync", "async"])
def io(request: pytest.FixtureRequest) -> Drive:
    return Drive(is_async=request.param)
