"""Handlers in process: an ``httpx.MockTransport`` or a respx router around ``handler(request) -> Response``.

A handler is a mock provider, a :class:`~simulator.proxy.middlebox.Middlebox` or any function;
the same one plugs into :func:`mount_inprocess` (fast, for sweeps), :func:`respx_router` (its side
effect is the handler — a respx side-effect *list* raises ``StopIteration`` when exhausted) or
:class:`~simulator.proxy.loopback.LoopbackServer` (real TCP).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    import respx

__all__ = ["DEFAULT_MOCK_BASE_URL", "Handler", "mount_inprocess", "respx_router"]


DEFAULT_MOCK_BASE_URL = "http://mock.local"
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
