"""Step one of classification: gather every input once into an immutable :class:`Evidence` value.

Status, body (text, bytes, JSON or an SSE stream), headers, the exception chain
(causes, contexts, group members), the request size and the history size are read
by duck typing — no HTTP client or SDK is imported — and every read is bounded by
the ``MAX_*`` limits, so a hostile or huge input costs bounded work. Attribute
access that raises is read as absent. The decision step (:mod:`.decide`) reads
only the returned value and never calls back here.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ctxrecover.classify.page import MARKUP, Page, reduce_html
from ctxrecover.classify.tables import STATUS_TOKEN

__all__ = ["Evidence", "gather", "http_status"]

# Reading limits: bounded work whatever the input.
MAX_CHAIN = 16
MAX_TEXT_CHARS = 200_000
MAX_JSON_ITEMS = 4000
MAX_JSON_DEPTH = 32
MAX_HEADERS = 200
MAX_SSE_LINES = 2000
MAX_EMBEDDED_CHARS = 20_000  # a JSON or Python-literal error body quoted inside a message
MAX_EMBEDDED_DEPTH = 40
REJECTED_BYTES_ATTRS: tuple[str, ...] = ("rejected_bytes", "request_bytes", "request_size", "body_bytes")


@dataclass(frozen=True, slots=True)
class Evidence:
    """Everything known about one exchange, read once; the decision reads nothing else.

    ``texts`` are the body and exception texts in reading order, a text holding
    HTML reduced to its title and visible text, and ``text`` their lowercased,
    backtick-free join (what phrases match; markup, scripts and attributes never
    reach it); ``pages`` are those HTML pages (title, headings, visible text,
    markers); ``stated_status`` is a status a text states in a status position
    (``HTTP 403``, ``Error code: 413``, ``502 Bad Gateway``), read only when no
    status is known; ``body_objects`` and
    ``error_objects`` are the JSON objects parsed from the body and from the error
    (frozen: mappings are read-only, lists are tuples); ``classes`` are the
    exception chain's ``(class name, module root)`` pairs; ``request_bytes`` is the
    size of the rejected request (argument first, then the error's attributes).
    """

    status: int | None = None
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    texts: tuple[str, ...] = ()
    text: str = ""
    pages: tuple[Page, ...] = ()
    stated_status: int | None = None
    is_html: bool = False
    body_objects: tuple[Mapping[str, object], ...] = ()
    error_objects: tuple[Mapping[str, object], ...] = ()
    classes: tuple[tuple[str, str], ...] = ()
    urls: tuple[str, ...] = ()
    request_bytes: int | None = None
    history_chars: int = 0
    has_error: bool = False

    @property
    def objects(self) -> tuple[Mapping[str, object], ...]:
        """Every parsed JSON object, the body's first."""
        return self.body_objects + self.error_objects

    @property
    def body_is_error(self) -> bool:
        """True when a JSON object of the body is shaped like an error."""
        return any(is_error_doc(d) for d in self.body_objects)


@dataclass(slots=True)
class _Reading:
    """The mutable notebook :func:`gather` fills before it freezes an :class:`Evidence`."""

    status: int | None = None
    texts: list[str] = field(default_factory=list)
    pages: list[Page] = field(default_factory=list)
    raw_bodies: list[str] = field(default_factory=list)
    body_docs: list[object] = field(default_factory=list)
    error_docs: list[object] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    classes: list[tuple[str, str]] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)
    rejected_bytes: int | None = None
    has_error: bool = False


def _attr(obj: object, name: str) -> object:
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def _str(obj: object) -> str:
    try:
        return str(obj)
    except Exception:
        return ""


def http_status(value: object) -> int | None:
    """``value`` when it is an HTTP status code (an int in 100-599), else None."""
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
        return value
    return None


def _positive_int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def _chars(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return int(value) if math.isfinite(value) else 0


def _add_text(x: _Reading, text: str) -> None:
    """Record one text; a text holding HTML is recorded as what its page shows."""
    if MARKUP.search(text):
        page = reduce_html(text)
        x.pages.append(page)
        text = f"{page.title}\n{page.text}" if page.title else page.text
    x.texts.append(text)


def _parse_json_documents(text: str) -> list[object]:
    """A JSON body, or the JSON ``data:`` lines of a server-sent-event stream."""
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            return [json.loads(stripped)]
        except Exception:
            return []
    docs: list[object] = []
    if "data:" in stripped:
        for line in stripped.splitlines()[:MAX_SSE_LINES]:
            payload = line.strip()
            if payload.startswith("data:") and payload[5:].strip()[:1] in ("{", "["):
                try:
                    docs.append(json.loads(payload[5:]))
                except Exception:
                    continue
    return docs


def _nesting(text: str) -> int:
    depth = deepest = 0
    for char in text:
        if char in "{[":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "}]":
            depth -= 1
    return deepest


def _embedded_document(text: str) -> object | None:
    """An error body quoted in a message (``API Error: 400 {"error": ...}``, ``Error code: 400 - {...}``).

    JSON first, then a Python literal (SDKs print the parsed body's ``repr``); bounded, never evaluated.
    """
    start, end = text.find("{"), text.rfind("}")
    if start <= 0 or end <= start or end - start > MAX_EMBEDDED_CHARS:
        return None
    quoted = text[start : end + 1]
    if _nesting(quoted) > MAX_EMBEDDED_DEPTH:
        return None
    for parse in (json.loads, ast.literal_eval):
        try:
            doc = parse(quoted)
        except Exception:  # not a document: the text stays a text
            continue
        return doc if isinstance(doc, Mapping) else None
    return None


def _flatten_json(doc: object) -> str:
    """``key: value`` lines of a JSON-ish object (bounded depth and size, cycle-proof)."""
    lines: list[str] = []
    stack: list[tuple[str, object, int]] = [("", doc, 0)]
    while stack and len(lines) < MAX_JSON_ITEMS:
        key, value, depth = stack.pop()
        if isinstance(value, Mapping):
            if depth < MAX_JSON_DEPTH:
                items = list(value.items())[:MAX_JSON_ITEMS]
                stack.extend((_str(k), v, depth + 1) for k, v in reversed(items))
        elif isinstance(value, list | tuple):
            if depth < MAX_JSON_DEPTH:
                stack.extend((key, v, depth + 1) for v in reversed(value[:MAX_JSON_ITEMS]))
        else:
            text = value if isinstance(value, str) else _str(value)
            lines.append(f"{key}: {text[:MAX_TEXT_CHARS]}" if key else text[:MAX_TEXT_CHARS])
    return "\n".join(lines)


def _add_body(x: _Reading, value: object, docs: list[object]) -> None:
    if value is None:
        return
    if isinstance(value, bytes | bytearray | memoryview):
        value = bytes(value).decode("utf-8", "replace")
    if isinstance(value, str):
        text = value[:MAX_TEXT_CHARS]  # matching reads a bounded prefix; JSON is parsed whole
        _add_text(x, text)
        x.raw_bodies.append(text)
        parsed = _parse_json_documents(value)
        docs.extend(parsed)
        embedded = None if parsed else _embedded_document(text)
        if embedded is not None:
            x.error_docs.append(embedded)
    elif isinstance(value, Mapping | list | tuple):
        docs.append(value)
        _add_text(x, _flatten_json(value))
    else:
        _add_text(x, _str(value)[:MAX_TEXT_CHARS])


def _add_headers(x: _Reading, headers: object) -> None:
    if headers is None:
        return
    try:
        pairs: Any = headers.items() if isinstance(headers, Mapping) or hasattr(headers, "items") else headers
        for n, pair in enumerate(pairs):
            if n >= MAX_HEADERS:
                break
            name, value = pair
            if isinstance(name, bytes):
                name = name.decode("latin-1")
            if isinstance(value, bytes):
                value = value.decode("latin-1")
            x.headers.setdefault(_str(name).lower(), _str(value))
    except Exception:
        return


def _add_url(x: _Reading, holder: object) -> None:
    url = _attr(holder, "url")
    if url is not None:
        x.urls.append(_str(url).lower())


def _add_exception(x: _Reading, exc: object) -> None:
    x.has_error = True
    for cls in type(exc).__mro__:
        x.classes.append((cls.__name__, _str(cls.__module__).split(".")[0]))
    status = http_status(_attr(exc, "status_code")) or http_status(_attr(exc, "status"))
    status = status or http_status(_attr(exc, "http_status")) or http_status(_attr(exc, "code"))
    response = _attr(exc, "response")
    if isinstance(response, Mapping):  # botocore ClientError.response
        meta = response.get("ResponseMetadata")
        status = status or (http_status(meta.get("HTTPStatusCode")) if isinstance(meta, Mapping) else None)
        _add_body(x, response, x.error_docs)
    elif response is not None:
        status = status or http_status(_attr(response, "status_code"))
        _add_headers(x, _attr(response, "headers"))
        _add_body(x, _attr(response, "text"), x.error_docs)
        _add_url(x, response)
    if x.status is None and status is not None:
        x.status = status
    _add_body(x, _attr(exc, "body"), x.error_docs)
    message = _attr(exc, "message")
    if isinstance(message, str):
        _add_text(x, message[:MAX_TEXT_CHARS])
    text = _str(exc)[:MAX_TEXT_CHARS]
    _add_text(x, text)
    embedded = _embedded_document(text)
    if embedded is not None:
        x.error_docs.append(embedded)
    request = _attr(exc, "request")
    if request is not None:
        _add_url(x, request)
    for name in REJECTED_BYTES_ATTRS:
        x.rejected_bytes = x.rejected_bytes or _positive_int(_attr(exc, name))
    if x.rejected_bytes is None and request is not None:
        length: Any = _attr(request, "headers")
        try:
            value = length.get("content-length") if length is not None else None
            x.rejected_bytes = _positive_int(int(value)) if value is not None else None
        except Exception:
            x.rejected_bytes = None


def _exception_chain(error: object) -> list[object]:
    """The error, its causes and contexts (and group members), breadth first, each once."""
    chain: list[object] = []
    seen: set[int] = set()
    queue: list[object] = [error]
    while queue and len(chain) < MAX_CHAIN:
        exc = queue.pop(0)
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        chain.append(exc)
        for name in ("__cause__", "__context__"):
            linked = _attr(exc, name)
            if isinstance(linked, BaseException):
                queue.append(linked)
        group = _attr(exc, "exceptions")
        if isinstance(group, list | tuple):
            queue.extend(e for e in group[:MAX_CHAIN] if isinstance(e, BaseException))
    return chain


def is_error_doc(doc: object) -> bool:
    """True for a JSON object shaped like an error body (``error``, ``type: error``, ``detail``...)."""
    if not isinstance(doc, Mapping):
        return False
    return (
        bool(doc.get("error"))
        or doc.get("type") == "error"
        or doc.get("object") == "error"
        or ("__type" in doc or "detail" in doc)
    )


def _json_objects(docs: list[object]) -> list[Mapping[str, object]]:
    """The JSON objects among parsed documents (a top-level list is a stream of them)."""
    flat = [d for doc in docs for d in (doc if isinstance(doc, list) else [doc])]
    return [d for d in flat if isinstance(d, Mapping)]


def _body_status(docs: list[object]) -> int | None:
    """An HTTP status written in an error body (``{"error": {"code": 413}}``, vLLM's ``code``)."""
    for doc in _json_objects(docs):
        inner = doc.get("error")
        if isinstance(inner, Mapping) and http_status(inner.get("code")):
            return http_status(inner.get("code"))
        if is_error_doc(doc) and http_status(doc.get("code")):
            return http_status(doc.get("code"))
    return None


def _freeze(doc: object, depth: int = 0) -> object:
    """A read-only copy of a parsed JSON document (mappings as proxies, lists as tuples), bounded."""
    if depth >= MAX_JSON_DEPTH:
        return None
    if isinstance(doc, Mapping):
        items = list(doc.items())[:MAX_JSON_ITEMS]
        return MappingProxyType({_str(k): _freeze(v, depth + 1) for k, v in items})
    if isinstance(doc, list | tuple):
        return tuple(_freeze(v, depth + 1) for v in doc[:MAX_JSON_ITEMS])
    return doc


def _frozen_objects(docs: list[object]) -> tuple[Mapping[str, object], ...]:
    return tuple(o for o in (_freeze(d) for d in _json_objects(docs)) if isinstance(o, Mapping))


def _stated_status(texts: list[str]) -> int | None:
    """The first 4xx/5xx status a text states in a status position (never a bare number in prose)."""
    for text in texts:
        match = STATUS_TOKEN.search(text.lower())
        if match:
            return int(next(g for g in match.groups() if g))
    return None


def _looks_like_html(x: _Reading) -> bool:
    content_type = x.headers.get("content-type", "").lower()
    if "text/html" in content_type:
        return True
    return any(b.lstrip()[:1] == "<" and not b.lstrip()[:5].lower() == "<?xml" for b in x.raw_bodies)


def gather(
    error: object = None,
    status: object = None,
    body: object = None,
    headers: object = None,
    request_bytes: object = None,
    history_chars: object = None,
) -> Evidence:
    """Read every input once into one frozen :class:`Evidence`.

    A status written in an error body replaces a missing or non-error (< 400) one.
    """
    x = _Reading(status=http_status(status))
    _add_body(x, body, x.body_docs)
    _add_headers(x, headers)
    if isinstance(error, BaseException):
        for exc in _exception_chain(error):
            _add_exception(x, exc)
    elif error is not None:
        x.has_error = True
        _add_body(x, error, x.error_docs)
    if x.status is None or x.status < 400:
        x.status = _body_status(x.body_docs + x.error_docs) or x.status
    return Evidence(
        status=x.status,
        headers=MappingProxyType(dict(x.headers)),
        texts=tuple(x.texts),
        text="\n".join(x.texts).lower().replace("`", ""),
        pages=tuple(x.pages),
        stated_status=None if x.status is not None else _stated_status(x.texts),
        is_html=bool(x.pages) or _looks_like_html(x),
        body_objects=_frozen_objects(x.body_docs),
        error_objects=_frozen_objects(x.error_docs),
        classes=tuple(x.classes),
        urls=tuple(x.urls),
        request_bytes=_positive_int(request_bytes) or x.rejected_bytes,
        history_chars=_chars(history_chars),
        has_error=x.has_error,
    )
