"""Post a request body of any of the five wire formats with httpx (:class:`HttpxSender`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ctxrecover.transport.base import ChatRequest, ChatResponse, SendFailed, header_bytes
from ctxrecover.wire import BodyEncoder, WireFormat, encode_request, parse_response, request_path

if TYPE_CHECKING:
    import httpx

__all__ = ["ANTHROPIC_VERSION", "DEFAULT_TIMEOUT_S", "HttpxSender"]

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_TIMEOUT_S = 600.0


def _auth_headers(fmt: WireFormat, api_key: str | None) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    if fmt is WireFormat.ANTHROPIC:
        headers["anthropic-version"] = ANTHROPIC_VERSION
        if api_key:
            headers["x-api-key"] = api_key
    elif fmt is WireFormat.GEMINI:
        if api_key:
            headers["x-goog-api-key"] = api_key
    elif api_key:
        headers["authorization"] = f"Bearer {api_key}"
    return headers


def _without_framing(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` without Content-Length or Transfer-Encoding: the sender frames the body it posts."""
    return {k: v for k, v in headers.items() if k.lower() not in ("content-length", "transfer-encoding")}


class HttpxSender:
    """Post the real request body of ``wire_format`` to ``base_url`` with httpx.

    Bodies are assembled from each message's encoded JSON, cached on the
    message (:func:`~ctxrecover.wire.encode_request`), so a request encodes
    only the messages not sent before, and posted as the chunks of a
    :class:`~ctxrecover.wire.chunks.BodyEncoder` with their ``Content-Length``:
    a request that appends to the history joins only its last block of
    messages instead of copying the whole body (an injected ``client`` with
    request event hooks gets the body joined, so the hooks can read
    ``request.content``). That costs about two more
    copies of the history in memory; with ``cache_fragments=False`` nothing is
    stored and each request encodes its messages again into one buffer (the
    same bytes).

    >>> import httpx
    >>> from ctxrecover.messages import Message
    >>> def provider(request):
    ...     return httpx.Response(200, json={"choices": [{"message": {"role": "assistant",
    ...         "content": "hi"}, "finish_reason": "stop"}], "usage": {}})
    >>> sender = HttpxSender("openai-chat", base_url="http://mock", model="m",
    ...                      transport=httpx.MockTransport(provider))
    >>> sender.send(ChatRequest((Message.user("hello"),))).message.content
    'hi'
    """

    def __init__(
        self,
        wire_format: WireFormat | str,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        client: httpx.Client | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        cache_fragments: bool = True,
    ) -> None:
        import httpx

        self.wire_format = WireFormat(wire_format)
        self.model = model
        self.cache_fragments = cache_fragments
        self.url = base_url.rstrip("/") + request_path(self.wire_format, model)
        self._headers = {**_auth_headers(self.wire_format, api_key), **(headers or {})}
        self._client = client or httpx.Client(transport=transport, timeout=timeout, trust_env=False)
        self._owns_client = client is None
        self._encoder = BodyEncoder(self.wire_format) if cache_fragments else None

    def render(self, request: ChatRequest) -> bytes:
        """The exact bytes :meth:`send` posts for ``request``."""
        return b"".join(self.render_chunks(request))

    def render_chunks(self, request: ChatRequest) -> list[bytes]:
        """The body :meth:`send` posts for ``request``, as the chunks it hands to httpx in order."""
        options: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "tools": request.tools,
            "extra": request.extra or None,
        }
        if self._encoder is None:
            return [encode_request(request.messages, self.wire_format, cache=False, **options)]
        return self._encoder.encode(request.messages, **options)

    def send(self, request: ChatRequest) -> ChatResponse:
        import httpx

        chunks = self.render_chunks(request)
        size = sum(map(len, chunks))
        headers = {**_without_framing({**self._headers, **request.headers}), "content-length": str(size)}
        # A client's request hooks may read ``request.content``, which httpx offers only for a body
        # given as bytes: they get the body joined.
        content = b"".join(chunks) if self._client.event_hooks["request"] else chunks
        try:
            response = self._client.post(self.url, content=content, headers=headers)
            text = response.text
        except httpx.HTTPError as exc:
            raise SendFailed(f"{type(exc).__name__}: {exc}", request_bytes=size) from exc
        if response.status_code >= 400:
            raise SendFailed(
                f"HTTP {response.status_code} from {self.url}",
                request_bytes=size,
                status=response.status_code,
                body=text,
                headers=response.headers,
                header_bytes=header_bytes(response.request),
            )
        try:
            raw = json.loads(text)
            parsed = parse_response(self.wire_format, raw)
        except ValueError as exc:
            # A 2xx that is not the provider's JSON (an HTML interstitial, a truncated body).
            raise SendFailed(
                f"unparseable {response.status_code} response from {self.url}: {exc}",
                request_bytes=size,
                status=response.status_code,
                body=text,
                headers=response.headers,
            ) from exc
        return ChatResponse.from_parsed(parsed, request_bytes=size, raw=raw)

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> HttpxSender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
