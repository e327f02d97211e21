"""The network seam: senders that post a turn's request and return its answer, or raise.

A :class:`Sender` turns a :class:`ChatRequest` into a :class:`ChatResponse` or
raises; whatever it raises, :func:`ctxrecover.classify.classify` reads it. A
:class:`SendFailed` wrapper adds what classification needs most — the exact
size of the rejected body — and keeps the original error as ``__cause__``.

- :class:`HttpxSender` posts the real request body of any of the five wire
  formats to any base URL with httpx (a transport can be injected, e.g.
  ``httpx.MockTransport`` or respx).
- :class:`OpenAISDKSender` / :class:`AnthropicSDKSender` wrap an existing
  ``openai`` / ``anthropic`` client. Create those clients with
  ``max_retries=0``: SDK retries resend the very body a proxy just rejected.
"""

from ctxrecover.transport.base import ChatRequest, ChatResponse, Sender, SendFailed, header_bytes
from ctxrecover.transport.httpx_sender import HttpxSender
from ctxrecover.transport.sdk import AnthropicSDKSender, OpenAISDKSender

__all__ = [
    "AnthropicSDKSender",
    "ChatRequest",
    "ChatResponse",
    "HttpxSender",
    "OpenAISDKSender",
    "SendFailed",
    "Sender",
    "header_bytes",
]
