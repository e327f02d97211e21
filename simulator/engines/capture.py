"""Capture the real engines' own pages into ``fixtures/pages/``, with where each came from.

``python -m simulator.engines.capture [DIR]`` starts each engine of :data:`CAPTURES` in front of
a mock provider (or of an upstream that resets, or of a closed port), sends the request that
makes it answer with its own page, and writes the page's body to ``DIR/<file>`` (the request's
path replaced by ``${path}``, a ``$`` doubled) and its provenance — engine, version, knobs, the
request, status and headers — to ``DIR/captured.json``. The page tables of
:mod:`simulator.proxy.pages` point at these files; the conformance tests check that the engines
installed still answer them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx

from simulator.engines.base import Engine
from simulator.engines.process import free_port
from simulator.engines.registry import engine_class

__all__ = ["CAPTURES", "CAPTURED_HEADERS", "Capture", "captured_pages", "main", "send"]

CAPTURED_HEADERS = ("content-type", "server", "x-squid-error", "cache-control", "connection")
CHAT_PATH = "/v1/chat/completions"
MANIFEST = "captured.json"


@dataclass(frozen=True, slots=True)
class Capture:
    """One page to capture: the engine and knobs, the upstream (``mock``, ``reset`` or ``closed``),
    the request's body size and path, and the file the page goes to."""

    file: str
    engine: str
    knobs: Mapping[str, Any] = field(default_factory=dict)
    upstream: str = "mock"
    body_bytes: int = 100
    path: str = CHAT_PATH
    header_bytes: int = 0


CAPTURES: tuple[Capture, ...] = (
    Capture("403-nginx.html", "nginx", MappingProxyType({"deny": ("/",)})),
    Capture(
        "400-nginx.html", "nginx-modsecurity", MappingProxyType({"body_cap": 131_072}), body_bytes=140_000
    ),
    Capture(
        "413-apache.html", "apache-modsecurity", MappingProxyType({"body_cap": 131_072}), body_bytes=140_000
    ),
    Capture("403-apache.html", "apache", MappingProxyType({"deny": ("/",)})),
    Capture("502-apache.html", "apache", upstream="reset"),
    Capture("503-apache.html", "apache", upstream="closed"),
    Capture("413-haproxy.html", "haproxy", MappingProxyType({"body_cap": 131_072}), body_bytes=140_000),
    Capture("403-haproxy.html", "haproxy", MappingProxyType({"deny": ("/",)})),
    Capture("503-haproxy.html", "haproxy", upstream="closed"),
    Capture("413-squid.html", "squid", MappingProxyType({"body_cap": 131_072}), body_bytes=140_000),
    Capture("403-squid.html", "squid", MappingProxyType({"deny": ("/",)})),
    Capture("502-squid.html", "squid", upstream="reset"),
    Capture("502-caddy.txt", "caddy", MappingProxyType({"body_cap": 131_072}), body_bytes=140_000),
)


def chat_body(size: int) -> bytes:
    """An OpenAI chat request body of exactly ``size`` bytes (at least the empty message's size)."""
    empty = b'{"model":"gpt-4o","messages":[{"role":"user","content":""}]}'
    return empty[:-4] + b"x" * max(0, size - len(empty)) + empty[-4:]


def send(url: str, size: int, *, path: str = CHAT_PATH, header_bytes: int = 0) -> httpx.Response:
    """POST a chat body of ``size`` bytes to ``url + path`` (with a pad header of ``header_bytes``)."""
    headers = {"content-type": "application/json"}
    if header_bytes:
        headers["x-ctxsim-pad"] = "p" * header_bytes
    with httpx.Client(trust_env=False, timeout=30) as client:
        return client.post(url + path, content=chat_body(size), headers=headers)


@contextmanager
def upstream_for(kind: str) -> Iterator[str]:
    """The URL of a mock provider, of an upstream that resets every request, or of a closed port."""
    from simulator.providers.service import MockService
    from simulator.proxy.faults import ResetAfter
    from simulator.proxy.loopback import LoopbackServer
    from simulator.proxy.middlebox import Middlebox

    if kind == "closed":
        yield f"http://127.0.0.1:{free_port()}"
        return
    service = MockService.for_host("openai", context_window=128_000, seed=0)
    app = Middlebox(service, [ResetAfter(n_bytes=0)]) if kind == "reset" else service
    with LoopbackServer(app, max_body_bytes=64 * 1024 * 1024) as server:
        yield server.base_url


def captured_pages(
    captures: Sequence[Capture] = CAPTURES,
) -> Iterator[tuple[Capture, Engine, httpx.Response]]:
    """Each capture's engine (running) and the response it gave."""
    for capture in captures:
        with ExitStack() as stack:
            upstream = stack.enter_context(upstream_for(capture.upstream))
            engine = stack.enter_context(engine_class(capture.engine)(upstream=upstream, **capture.knobs))
            response = send(
                engine.url, capture.body_bytes, path=capture.path, header_bytes=capture.header_bytes
            )
            yield capture, engine, response


def _template(body: bytes, path: str) -> bytes:
    return body.replace(b"$", b"$$").replace(path.encode(), b"${path}")


def main(argv: Sequence[str] | None = None) -> int:
    """Capture every page of :data:`CAPTURES` into DIR (default ``fixtures/pages``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    out = Path(args[0] if args else "fixtures/pages")
    manifest_path = out / MANIFEST
    manifest: dict[str, Any] = (
        json.loads(manifest_path.read_text(encoding="utf-8")) if manifest_path.is_file() else {}
    )
    for capture, engine, response in captured_pages():
        (out / capture.file).write_bytes(_template(response.content, capture.path))
        manifest[capture.file] = {
            "engine": engine.name,
            "version": engine.version(),
            "knobs": {k: list(v) if isinstance(v, tuple) else v for k, v in capture.knobs.items()},
            "upstream": capture.upstream,
            "request": {"method": "POST", "path": capture.path, "body_bytes": capture.body_bytes},
            "status": response.status_code,
            "headers": {
                name: response.headers[name] for name in CAPTURED_HEADERS if name in response.headers
            },
            "body_bytes": len(response.content),
            "captured": datetime.now(UTC).date().isoformat(),
            "by": "python -m simulator.engines.capture",
        }
        size = len(response.content)
        print(f"{capture.file}: {engine.name} {engine.version()} → {response.status_code}, {size} B")
    manifest_path.write_text(json.dumps(dict(sorted(manifest.items())), indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
