"""The network seam: senders, sync and async, that post a turn's request and return its answer, or raise.

A :class:`Sender` turns a :class:`ChatRequest` into a :class:`ChatResponse` or
raises; an :class:`AsyncSender` does the same with ``await sender.send(request)``.
Whatever they raise, :func:`ctxrecover.classify.classify` reads it. A
:class:`SendFailed` wrapper adds what classification needs most — the exact
size of the rejected body — and keeps the original error as ``__cause__``;
anything that is not the provider's answer or the network's failure (a
``TypeError``, a bug, the ``on_delta`` callback's own error) propagates as itself.

- :class:`HttpxSender` / :class:`AsyncHttpxSender` post the real request body of
  any of the five wire formats to any base URL with ``httpx.Client`` /
  ``httpx.AsyncClient`` (a transport can be injected, e.g. ``httpx.MockTransport``
  or respx).
- :class:`OpenAISDKSender` / :class:`AnthropicSDKSender` and their async forms
  :class:`AsyncOpenAISDKSender` / :class:`AsyncAnthropicSDKSender` wrap an existing
  ``openai`` / ``anthropic`` client. Create those clients with ``max_retries=0``:
  SDK retries resend the very body a proxy just rejected.

Every sender streams on request (``stream=True``): the answer's events are read as
they arrive, each piece of text goes to ``on_delta``, and the stream is accumulated
into the same :class:`ChatResponse` the answer gives unstreamed; an error inside the
stream is a :class:`SendFailed` classified as the same error unstreamed
(:mod:`ctxrecover.transport.answer`).
"""

from ctxrecover.transport.base import (
    AsyncSender,
    ChatRequest,
    ChatResponse,
    Sender,
    SendFailed,
    header_bytes,
)
from ctxrecover.transport.httpx_sender import AsyncHttpxSender, HttpxSender
from ctxrecover.transport.sdk import (
    AnthropicSDKSender,
    AsyncAnthropicSDKSender,
    AsyncOpenAISDKSender,
    OpenAISDKSender,
)

__all__ = [
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
]
