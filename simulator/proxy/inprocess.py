"""Handlers in process: a client, an ``httpx.MockTransport`` or a respx router around
``handler(request) -> Response``.

A handler is a mock provider, a :class:`~simulator.proxy.middlebox.Middlebox` or any function;
the same one plugs into :class:`InProcessClient` (fastest, for replays and sweeps),
:func:`mount_inprocess` (an ``httpx.MockTransport``: the whole httpx client stack in front of it),
:func:`respx_router` (its side effect is the handler — a respx side-effect *list* raises
``StopIteration`` when exhausted) or :class:`~simulator.proxy.loopback.LoopbackServer` (real TCP).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    import respx

__all__ = ["DEFAULT_MOCK_BASE_URL", "Handler", "InProcessClient", "mount_inprocess", "respx_router"]


DEFAULT_MOCK_BASE_URL = "http://mock.local"
_SETS_COOKIES = frozenset({"set-cookie", "set-cookie2"})  # what http.cookiejar reads of a response
Handler = Callable[[httpx.Request], httpx.Response]


def _mounted(handler: Handler, base_url: str) -> Handler:
    base = httpx.URL(base_url)
    prefix = base.raw_path.rstrip(b"/")

    def serve(request: httpx.Request) -> httpx.Response:
        url = request.url
        if (url.scheme, url.host, url.port) != (base.scheme, base.host, base.port) or not (
            url.raw_path == prefix or url.raw_path.startswith(prefix + b"/") or not prefix
        ):
            message = f"nothing is mounted at {url}; this mock serves {base_url}"
            raise httpx.ConnectError(message, request=request)
        response = handler(request)
        if not isinstance(response, httpx.Response):
            kind = type(response).__name__
            raise TypeError(f"handler {handler!r} returned {kind}; it must return httpx.Response")
        return response

    return serve


def mount_inprocess(handler: Handler, *, base_url: str = DEFAULT_MOCK_BASE_URL) -> httpx.MockTransport:
    """An ``httpx.MockTransport`` serving ``handler`` under ``base_url``.

    Requests elsewhere raise ``httpx.ConnectError``; transport errors the
    handler raises (a middlebox's reset) reach the client unchanged.

    >>> transport = mount_inprocess(lambda request: httpx.Response(204))
    >>> httpx.Client(transport=transport).get("http://mock.local/v1/models").status_code
    204
    """
    return httpx.MockTransport(_mounted(handler, base_url))


class InProcessClient(httpx.Client):
    """An ``httpx.Client`` that hands each request straight to ``handler`` under ``base_url``.

    Requests are built as any client builds them (its headers, cookies and request event hooks;
    ``Content-Length`` from the body), and the handler's answer is the response, with the cookies
    it sets kept for the next request and the response hooks run: what the client stack in front
    of :func:`mount_inprocess` makes of the same handler, without its per-request machinery
    (transport and stream wrappers, auth and redirect flows, timeouts, a log line each). A
    handler does not redirect, so nothing is followed. Requests elsewhere raise
    ``httpx.ConnectError``; transport errors the handler raises reach the caller unchanged.

    >>> client = InProcessClient(lambda request: httpx.Response(200, json={"path": request.url.path}))
    >>> client.post("http://mock.local/v1/chat/completions", json={}).json()
    {'path': '/v1/chat/completions'}
    """

    def __init__(self, handler: Handler, *, base_url: str = DEFAULT_MOCK_BASE_URL, **options: Any) -> None:
        super().__init__(transport=mount_inprocess(handler, base_url=base_url), **options)
        self._serve = _mounted(handler, base_url)
        self._urls: dict[str, httpx.URL] = {}  # a sender posts to one URL: parsed once (URLs are immutable)

    def build_request(self, method: str, url: httpx.URL | str, **options: Any) -> httpx.Request:
        """``httpx.Client.build_request``, with each URL string parsed once."""
        if isinstance(url, str):
            parsed = self._urls.get(url)
            if parsed is None:
                parsed = self._urls[url] = httpx.URL(url)
            url = parsed
        return super().build_request(method, url, **options)

    def send(self, request: httpx.Request, *, stream: bool = False, **_flow: Any) -> httpx.Response:
        """The handler's response to ``request`` (read unless ``stream``); ``auth`` and
        ``follow_redirects`` are accepted and have nothing to do here."""
        if self.is_closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        for hook in self.event_hooks["request"]:
            hook(request)
        request.read()  # as httpx.MockTransport does before calling its handler
        response = self._serve(request)
        response.request = request
        if _SETS_COOKIES.intersection(name.lower() for name in response.headers):
            self.cookies.extract_cookies(response)  # cookielib's walk, only for an answer that sets one
        for hook in self.event_hooks["response"]:
            hook(response)
        if not stream:
            response.read()
        return response


def respx_router(handler: Handler, base_url: str = DEFAULT_MOCK_BASE_URL) -> respx.MockRouter:
    """A respx router with one route under ``base_url`` whose side effect is ``handler``.

    Use it as a context manager (patches httpx globally) or as
    ``httpx.MockTransport(router.handler)``; ``router.calls`` records every call.
    """
    import respx

    router = respx.MockRouter(base_url=base_url, assert_all_called=False)
    serve = _mounted(handler, base_url)

    def side_effect(request: httpx.Request) -> httpx.Response:
        return serve(request)

    router.route().mock(side_effect=side_effect)
    return router
