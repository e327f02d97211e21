"""The transport wing's public names: a sorted ``__all__`` that changes only on purpose."""

from __future__ import annotations

import ctxrecover.transport as transport

EXPECTED = {
    "AnthropicSDKSender",
    "AsyncAnthropicSDKSender",
    "AsyncHttpxSender",
    "AsyncOpenAISDKSender",
    "AsyncSender",
    "ChatRequest",
    "ChatResponse",
    "HttpxSender",
    "OpenAISDKSender",
    "SendFailed",
    "Sender",
    "header_bytes",
}


def test_the_transport_namespace_exports_the_senders_sync_and_async_in_sorted_order() -> None:
    assert transport.__all__ == sorted(transport.__all__)
    assert set(transport.__all__) == EXPECTED
    assert all(getattr(transport, name) is not None for name in transport.__all__)
