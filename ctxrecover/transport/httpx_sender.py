"""Post a request body of any of the five wire formats with httpx: :class:`HttpxSender` and
:class:`AsyncHttpxSender`, streamed or not.

Both share everything but their I/O calls (``Client.stream`` / ``AsyncClient.stream``,
``iter_bytes`` / ``aiter_bytes``): the body, its headers and size come from
:class:`_HttpxSenderBase`, the meaning of the answer from
:class:`~ctxrecover.transport.answer.AnswerReader`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctxrecover.transport.answer import AnswerReader
from ctxrecover.transport.base import (
    STREAM_PATHS,
    ChatRequest,
    ChatResponse,
    DeltaCallback,
    SendFailed,
    header_bytes,
    stream_body_fields,
)
from ctxrecover.wire import BodyEncoder, WireFormat, encode_request, request_path

if TYPE_CHECKING:
    import httpx

__all__ = ["ANTHROPIC_VERSION", "DEFAULT_TIMEOUT_S", "AsyncHttpxSender", "HttpxSender"]

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_TIMEOUT_S = 600.0
# AsyncHttpxSender posts a body up to this size as one buffer: each chunk an async client writes costs
# a timeout scope and a protocol event (more than copying a few hundred KB), and a gateway-capped body
# is this small (bench/bench_async.py: 10 % less CPU for 256 sessions under a 128 KB cap).
ASYNC_JOIN_BELOW_BYTES = 512 * 1024


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


@dataclass(frozen=True, slots=True)
class _Post:
    """One request ready to post: its body chunks, their size and the headers."""

    chunks: list[bytes]
    size: int
    headers: dict[str, str]


class _AsyncChunks:
    """The body chunks as the async iterable ``httpx.AsyncClient`` streams (a list would be read as sync)."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


class _HttpxSenderBase:
    """What both httpx senders decide: the URL, headers and body of a request, and what a failure is."""

    def __init__(
        self,
        wire_format: WireFormat | str,
        *,
        base_url: str,
        model: str,
        api_key: str | None,
        headers: Mapping[str, str] | None,
        stream: bool,
        on_delta: DeltaCallback | None,
        cache_fragments: bool,
    ) -> None:
        self.wire_format = WireFormat(wire_format)
        self.model = model
        self.stream = stream
        self.on_delta = on_delta
        self.cache_fragments = cache_fragments
        streamed_path = STREAM_PATHS.get(self.wire_format) if stream else None
        path = streamed_path.format(model=model) if streamed_path else request_path(self.wire_format, model)
        self.url = base_url.rstrip("/") + path
        self._source = self.url.split("?", 1)[0]  # failure messages never carry a query string
        self._headers = {**_auth_headers(self.wire_format, api_key), **(headers or {})}
        self._encoder = BodyEncoder(self.wire_format) if cache_fragments else None

    def render(self, request: ChatRequest) -> bytes:
        """The exact bytes :meth:`send` posts for ``request``."""
        return b"".join(self.render_chunks(request))

    def render_chunks(self, request: ChatRequest) -> list[bytes]:
        """The body :meth:`send` posts for ``request``, as the chunks it hands to httpx in order."""
        extra = {**stream_body_fields(self.wire_format), **request.extra} if self.stream else request.extra
        options: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "tools": request.tools,
            "extra": extra or None,
        }
        if self._encoder is None:
            return [encode_request(request.messages, self.wire_format, cache=False, **options)]
        return self._encoder.encode(request.messages, **options)

    def _post(self, request: ChatRequest) -> _Post:
        chunks = self.render_chunks(request)
        size = sum(map(len, chunks))
        headers = {**_without_framing({**self._headers, **request.headers}), "content-length": str(size)}
        return _Post(chunks, size, headers)

    def _content(self, post: _Post, hooks: list[Any]) -> bytes | list[bytes]:
        """The body as the client takes it: request hooks may read ``request.content``, which httpx offers
        only for a body given as bytes, so they get the body joined."""
        return b"".join(post.chunks) if hooks else post.chunks

    def _reader(self, post: _Post, response: httpx.Response) -> AnswerReader:
        return AnswerReader(
            self.wire_format,
            source=self._source,
            request_bytes=post.size,
            status=response.status_code,
            headers=response.headers,
            header_bytes=header_bytes(response.request),
            on_delta=self.on_delta,
        )

    def _dropped(self, exc: Exception, post: _Post, reader: AnswerReader | None) -> SendFailed | None:
        """The failure of a transport error (before an answer or amid its stream, as for an answer read
        whole); None when the error came from ``on_delta``, which propagates as itself."""
        if reader is not None and reader.callback_failed:
            return None
        return SendFailed(f"{type(exc).__name__}: {exc}", request_bytes=post.size)


class HttpxSender(_HttpxSenderBase):
    """Post the real request body of ``wire_format`` to ``base_url`` with ``httpx.Client``.

    Bodies are assembled from each message's encoded JSON, cached on the
    message (:func:`~ctxrecover.wire.encode_request`), so a request encodes
    only the messages not sent before, and posted as the chunks of a
    :class:`~ctxrecover.wire.chunks.BodyEncoder` with their ``Content-Length``:
    a request that appends to the history joins only its last block of
    messages instead of copying the whole body (an injected ``client`` with
    request event hooks gets the body joined, so the hooks can read
    ``request.content``). That costs about two more copies of the history in
    memory; with ``cache_fragments=False`` nothing is stored and each request
    encodes its messages again into one buffer (the same bytes).

    With ``stream=True`` the request asks for a streamed answer as the real API
    does (``"stream": true`` — with ``stream_options.include_usage`` for OpenAI
    chat —, Gemini's ``:streamGenerateContent?alt=sse``, Bedrock's
    ``/converse-stream``); the events are read as they arrive and accumulated
    into the same :class:`ChatResponse` the answer gives unstreamed (``raw``
    included). ``on_delta`` is called with each piece of the answer's text as it
    arrives (an answer that did not stream: with its whole text once).

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
        stream: bool = False,
        on_delta: DeltaCallback | None = None,
    ) -> None:
        import httpx

        super().__init__(
            wire_format,
            base_url=base_url,
            model=model,
            api_key=api_key,
            headers=headers,
            stream=stream,
            on_delta=on_delta,
            cache_fragments=cache_fragments,
        )
        self._client = client or httpx.Client(transport=transport, timeout=timeout, trust_env=False)
        self._owns_client = client is None

    def send(self, request: ChatRequest) -> ChatResponse:
        """Post ``request``; its answer, or :class:`SendFailed` (anything else is not the provider's)."""
        import httpx

        post = self._post(request)
        content = self._content(post, self._client.event_hooks["request"])
        reader: AnswerReader | None = None
        try:
            with self._client.stream("POST", self.url, content=content, headers=post.headers) as response:
                reader = self._reader(post, response)
                if not reader.streamed:
                    response.read()
                    return reader.whole(response.text)
                for data in response.iter_bytes():
                    reader.feed(data)
        except httpx.HTTPError as exc:
            failure = self._dropped(exc, post, reader)
            if failure is None:
                raise
            raise failure from exc
        return reader.finish()

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> HttpxSender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncHttpxSender(_HttpxSenderBase):
    """:class:`HttpxSender` over ``httpx.AsyncClient``: ``await sender.send(request)``, the same bytes,
    answers and failures (``transport`` is an ``httpx.AsyncBaseTransport``; ``async with`` closes it)."""

    def __init__(
        self,
        wire_format: WireFormat | str,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        client: httpx.AsyncClient | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        cache_fragments: bool = True,
        stream: bool = False,
        on_delta: DeltaCallback | None = None,
    ) -> None:
        import httpx

        super().__init__(
            wire_format,
            base_url=base_url,
            model=model,
            api_key=api_key,
            headers=headers,
            stream=stream,
            on_delta=on_delta,
            cache_fragments=cache_fragments,
        )
        self._client = client or httpx.AsyncClient(transport=transport, timeout=timeout, trust_env=False)
        self._owns_client = client is None

    def _content(self, post: _Post, hooks: list[Any]) -> bytes | list[bytes]:
        """The body joined when request hooks read it or it is small (:data:`ASYNC_JOIN_BELOW_BYTES`),
        its chunks otherwise."""
        return b"".join(post.chunks) if hooks or post.size <= ASYNC_JOIN_BELOW_BYTES else post.chunks

    async def send(self, request: ChatRequest) -> ChatResponse:
        """Post ``request``; its answer, or :class:`SendFailed` (anything else is not the provider's)."""
        import httpx

        post = self._post(request)
        content = self._content(post, self._client.event_hooks["request"])
        body = content if isinstance(content, bytes) else _AsyncChunks(content)
        reader: AnswerReader | None = None
        try:
            async with self._client.stream("POST", self.url, content=body, headers=post.headers) as response:
                reader = self._reader(post, response)
                if not reader.streamed:
                    await response.aread()
                    return reader.whole(response.text)
                async for data in response.aiter_bytes():
                    reader.feed(data)
        except httpx.HTTPError as exc:
            failure = self._dropped(exc, post, reader)
            if failure is None:
                raise
            raise failure from exc
        return reader.finish()

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> AsyncHttpxSender:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
