"""What the loopback server remembers of each exchange, and the JSON lines it writes about them.

Every request ends as one :class:`ExchangeRecord` (sizes, outcome, the fault that fired,
timings; the path already redacted). ``--log-json FILE`` writes :func:`log_entry` of each
record, one JSON object per line; ``--record FILE`` writes :func:`record_entry`, which adds
the shape of the exchange from its :class:`ExchangeTrace`: headers without secrets, the
response page's content type, title and fingerprint, and (``--record-bodies``) the bodies.
:mod:`simulator.proxy.infer` reads those records back.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import queue
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, TextIO

__all__ = [
    "OUTCOMES",
    "RECORD_FORMAT",
    "ExchangeRecord",
    "BackgroundWriter",
    "ExchangeTrace",
    "JsonLines",
    "PendingExchange",
    "log_entry",
    "page_fingerprint",
    "page_title",
    "record_entry",
]

RECORD_FORMAT = "ctxsim-record/1"
PAGE_PREFIX_BYTES = 64 * 1024  # pages are small; the fingerprint looks at this much of an answer
# ExchangeRecord.outcome values; connection faults record their middlebox kind instead.
OUTCOMES: Mapping[str, str] = MappingProxyType(
    {
        "answered": "the handler (or the middlebox's upstream) answered",
        "forwarded": "relayed from the upstream URL",
        "responded": "the middlebox answered itself (413, 431, 403 page, 429, 504)",
        "reset-after": "TCP reset (SO_LINGER 0) after n_bytes of the body (mid-POST when declared longer)",
        "close-after-body": "closed after the body without a response",
        "slow-close": "silent, then closed without a response",
        "idle-timeout": "silent until the client gave up (or the server's max fault delay)",
        "cut-stream": "the answer was cut after n_bytes of its body (a shaping fault)",
        "body-too-large": "413 from the server's own max_body_bytes bound",
        "bad-request": "malformed HTTP or x-ctxsim-turn header",
        "busy": "503: every connection slot is serving a request, or the in-flight body budget is spent",
        "client-timeout": "408: the client missed its head deadline or its body's minimum rate",
        "handler-error": "500: the handler raised",
        "handler-timeout": "504: the handler ran past handler_timeout_s",
        "upstream-error": "502: the upstream URL could not be reached",
        "upstream-timeout": "504: the upstream URL did not answer within handler_timeout_s",
        "upstream-reset": "the upstream URL reset the connection: the client's connection is reset too",
        "upstream-closed": "the upstream URL closed without an answer: the client's connection is closed too",
        "upstream-cut": "the upstream URL's answer broke off mid-body: the client's connection is closed",
        "client-gone": "the client closed or reset before its body was complete",
    }
)
# A product and its version ("nginx/1.22.1", "Apache/2.4.71", "squid/5.7"): the page is the same product's
# whatever its version or server_tokens setting, so the version goes before the digit tokens do.
PRODUCT_VERSION_RE = re.compile(rb"\b([A-Za-z][A-Za-z_-]*)/v?[0-9][A-Za-z0-9_.+~-]*")
TOKEN_WITH_DIGIT_RE = re.compile(rb"[A-Za-z0-9_.=+/-]*[0-9][A-Za-z0-9_.=+/-]*")
# an HTTP date (RFC 9110 IMF-fixdate, as Squid and Apache stamp their pages): its day and month names too
HTTP_DATE_RE = re.compile(
    rb"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), [0-9]{2} (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
    rb"[0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT"
)
WHITESPACE_RE = re.compile(rb"\s+")
TITLE_RE = re.compile(rb"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True, slots=True)
class ExchangeRecord:
    """One request the loopback server received and what it did (``outcome``: see :data:`OUTCOMES`).

    ``body_bytes`` counts the body bytes the server consumed before it answered or
    dropped the connection; ``content_length`` is the size the client declared
    (None when chunked or absent). A decision taken at the head (a 413 by
    Content-Length, a reset after N bytes) leaves ``body_bytes`` below it. ``path``
    has its query values redacted. ``fault``/``fault_name`` name the middlebox fault
    that decided (shaping faults included); ``response_bytes`` counts the answer's body
    bytes written; ``elapsed_ms`` runs from the head's arrival to the last byte written,
    ``upstream_ms`` from the handler or upstream call to its answer's head.
    """

    turn: int
    method: str
    path: str
    body_bytes: int
    outcome: str
    status: int | None
    detail: str = ""
    content_length: int | None = None
    fault: str = ""
    fault_name: str = ""
    response_bytes: int = 0
    head_bytes: int = 0
    started_at: float = 0.0
    elapsed_ms: float = 0.0
    upstream_ms: float | None = None


@dataclass(slots=True)
class ExchangeTrace:
    """The shape of one exchange beyond its record: headers (redacted), the answer's first bytes, bodies.

    ``page_host`` and ``page_path`` are the host and path the answering gateway saw (a page
    that names them fingerprints the same whatever they are).
    """

    request_headers: list[tuple[str, str]] = field(default_factory=list)
    response_headers: list[tuple[str, str]] = field(default_factory=list)
    response_prefix: bytearray = field(default_factory=bytearray)
    keep_bodies: bool = False
    page_host: str = ""
    page_path: str = ""
    request_body: bytes | None = None
    response_body: bytearray | None = None
    ttfb_ms: float | None = None

    def answer(self, chunk: bytes) -> None:
        """Note a piece of the answer's body as it is written."""
        room = PAGE_PREFIX_BYTES - len(self.response_prefix)
        if room > 0:
            self.response_prefix += chunk[:room]
        if self.keep_bodies:
            if self.response_body is None:
                self.response_body = bytearray()
            self.response_body += chunk


@dataclass(slots=True)
class PendingExchange:
    """What is known of a request in progress; :meth:`record` makes its :class:`ExchangeRecord`."""

    method: str
    path: str
    content_length: int | None
    head_bytes: int
    started: float
    started_at: float
    trace: ExchangeTrace
    turn: int = 0
    body_bytes: int = 0
    response_bytes: int = 0
    fault: str = ""
    fault_name: str = ""
    upstream_ms: float | None = None
    reserved: int = 0
    detail: str = ""

    def record(self, outcome: str, status: int | None, detail: str = "") -> ExchangeRecord:
        """The record of this exchange as it ends with ``outcome``."""
        return ExchangeRecord(
            self.turn,
            self.method,
            self.path,
            self.body_bytes,
            outcome,
            status,
            detail,
            self.content_length,
            fault=self.fault,
            fault_name=self.fault_name,
            response_bytes=self.response_bytes,
            head_bytes=self.head_bytes,
            started_at=self.started_at,
            elapsed_ms=round((time.monotonic() - self.started) * 1000, 3),
            upstream_ms=None if self.upstream_ms is None else round(self.upstream_ms, 3),
        )


def page_fingerprint(body: bytes, *, host: str = "", path: str = "") -> str:
    """A hash of a page that ignores what changes per request: ids, numbers, the host and path it names.

    Product versions (``nginx/1.22.1`` reads ``nginx``), HTTP dates, tokens holding a digit (Ray
    IDs, references, dates, sizes, ports) and whitespace runs are normalised, and so are the ``host``
    and ``path`` the page was served for: two renderings of the same gateway page have the same
    fingerprint, whatever the engine's version; different pages almost never do.
    """
    page = body[:PAGE_PREFIX_BYTES]
    for known in (host, path):
        if len(known) >= 3:
            page = page.replace(known.encode(), b"#")
    page = PRODUCT_VERSION_RE.sub(rb"\1", HTTP_DATE_RE.sub(b"#", page))
    normalised = WHITESPACE_RE.sub(b" ", TOKEN_WITH_DIGIT_RE.sub(b"#", page)).strip()
    return hashlib.sha256(normalised).hexdigest()[:16]


def page_title(body: bytes) -> str:
    """The HTML ``<title>`` of a page, unescaped and on one line ("" when there is none)."""
    match = TITLE_RE.search(body[:PAGE_PREFIX_BYTES])
    if match is None:
        return ""
    return " ".join(html.unescape(match.group(1).decode("utf-8", "replace")).split())


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")


def log_entry(record: ExchangeRecord) -> dict[str, Any]:
    """One ``--log-json`` line: the record with an ISO time (``started_at`` → ``time``)."""
    entry = asdict(record)
    entry["time"] = _iso(entry.pop("started_at"))
    return entry


def _body(data: bytes | bytearray | None) -> dict[str, str] | None:
    if data is None:
        return None
    try:
        return {"text": bytes(data).decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(bytes(data)).decode("ascii")}


def _header(headers: list[tuple[str, str]], name: str) -> str:
    return next((value for key, value in headers if key.lower() == name), "")


def record_entry(record: ExchangeRecord, trace: ExchangeTrace) -> dict[str, Any]:
    """One ``--record`` line: the record plus headers, page title and fingerprint, bodies if kept."""
    prefix = bytes(trace.response_prefix)
    fingerprint = page_fingerprint(prefix, host=trace.page_host, path=trace.page_path)
    request: dict[str, Any] = {
        "head_bytes": record.head_bytes,
        "body_bytes": record.body_bytes,
        "content_length": record.content_length,
        "headers": [list(pair) for pair in trace.request_headers],
    }
    response: dict[str, Any] = {
        "body_bytes": record.response_bytes,
        "headers": [list(pair) for pair in trace.response_headers],
        "content_type": _header(trace.response_headers, "content-type"),
        "title": page_title(prefix),
        "fingerprint": fingerprint,
    }
    if trace.keep_bodies:
        request["body"] = _body(trace.request_body)
        # an empty page is a fact to record, not a body left out
        response["body"] = _body(trace.response_body if trace.response_body is not None else b"")
    return {
        "time": _iso(record.started_at),
        "turn": record.turn,
        "method": record.method,
        "path": record.path,
        "outcome": record.outcome,
        "status": record.status,
        "fault": record.fault,
        "fault_name": record.fault_name,
        "detail": record.detail,
        "request": request,
        "response": response,
        "timings": {
            "elapsed_ms": record.elapsed_ms,
            "upstream_ms": record.upstream_ms,
            "ttfb_ms": trace.ttfb_ms,
        },
    }


class JsonLines:
    """A JSON-lines file written one flushed line at a time, from any thread."""

    def __init__(self, path: Path, header: Mapping[str, Any] | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file: TextIO = path.open("w", encoding="utf-8")
        if header is not None:
            self.write(header)

    def write(self, entry: Mapping[str, Any]) -> None:
        """Append ``entry`` as one line."""
        line = json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


_Job = tuple[Callable[..., object], tuple[object, ...]]


class BackgroundWriter:
    """Runs writes (console lines, log and record entries) on its own thread: the server never waits on them.

    At most ``capacity`` writes wait; beyond that they are dropped and counted in ``dropped``
    (a stalled terminal or disk must not stall the proxy, nor grow its memory).
    """

    def __init__(self, capacity: int = 10_000) -> None:
        self.dropped = 0
        self.errors: list[str] = []
        self._queue: queue.Queue[_Job | None] = queue.Queue(capacity)
        self._thread = threading.Thread(target=self._run, name="ctxsim-writer", daemon=True)
        self._thread.start()

    def submit(self, write: Callable[..., object], *args: object) -> None:
        """Queue ``write(*args)``."""
        try:
            self._queue.put_nowait((write, args))
        except queue.Full:
            self.dropped += 1

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            write, args = job
            try:
                write(*args)
            except Exception as error:  # a full disk or a closed pipe: reported at the end
                self.errors.append(f"{type(error).__name__}: {error}")

    def close(self, timeout_s: float = 10.0) -> None:
        """Finish the queued writes, then stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout_s)
