"""What a gateway did with one request, observed on the wire — the same way for a real engine and a mock.

:func:`observe` sends a chat request of an exact size over a raw socket and reads the answer as a
client that keeps reading while it sends: the status, content type and page fingerprint (ids,
dates, versions, host and path removed), and the connection's behaviour — whether the answer
came **before the body ended** (the first ``early_after`` bytes are sent, then the client waits
for an answer before it sends the rest), whether the gateway **closed** the connection after
answering, and whether the client met a **reset** (a refused write or a reset read). The answer
of a dropped connection has no status.

Whether a write is refused is a race: a gateway that answers early and closes with the body unread
resets the connection, but a client whose kernel buffers took the rest of the body before that close
sees no refused write. The client's send buffer for the rest of a body held back is therefore fixed
and small (64 KiB), and after a complete answer on a closed connection the client reads once more
(up to 2 s for the close the answer announced): a reset there is the same reset, a clean end of
stream a gateway that read or discarded the body before it closed.

:func:`imitation_server` serves an engine's :meth:`~simulator.engines.base.Engine.imitation` in
front of the same upstream, so one request can be observed through both (:func:`compare`).
"""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields

import h11

from simulator.engines.base import Engine
from simulator.engines.capture import CHAT_PATH, chat_body
from simulator.proxy.journal import page_fingerprint
from simulator.resources import data_dir

__all__ = [
    "CONFORMANCE_HEADERS",
    "Observation",
    "agent_content_bodies",
    "compare",
    "imitation_server",
    "observe",
    "observe_body",
]

EARLY_WAIT_S = 1.5  # how long the client holds the rest of the body back, waiting for an early answer
READ_TIMEOUT_S = 20.0
CLOSE_WAIT_S = 0.3  # after a complete answer: does the gateway close the connection? (it does so at once)
RESET_WAIT_S = 2.0  # after an answer that says it closes: how long the client waits to see how it closes
SEND_CHUNK = 64 * 1024
# The client's send buffer for the rest of a body held back: fixed, so the kernel cannot take that rest off
# the client before the gateway reads it, and whether the client is still sending when the gateway closes
# does not depend on the machine's TCP settings.
SEND_BUFFER_BYTES = 64 * 1024
# The headers every observed request carries besides Host and Content-Length (what the rules see too).
CONFORMANCE_HEADERS = {"content-type": "application/json", "user-agent": "ctxsim-conformance"}


@dataclass(frozen=True, slots=True)
class Observation:
    """One exchange as the client saw it (``status`` None: no answer, the connection dropped)."""

    status: int | None
    content_type: str
    fingerprint: str
    body_bytes: int
    early: bool
    closed: bool
    reset: bool

    def differences(self, other: Observation, *, ignore: tuple[str, ...] = ()) -> list[str]:
        """``field: mine != theirs`` for each field that differs, but those in ``ignore`` and the body
        size (a page naming a port varies with it)."""
        return [
            f"{f.name}: {getattr(self, f.name)!r} != {getattr(other, f.name)!r}"
            for f in fields(self)
            if f.name not in ("body_bytes", *ignore) and getattr(self, f.name) != getattr(other, f.name)
        ]


def _readable(sock: socket.socket, timeout_s: float) -> bool:
    ready, _, _ = select.select([sock], [], [], timeout_s)
    return bool(ready)


def observe(url: str, size: int, *, early_after: int | None = None, path: str = CHAT_PATH) -> Observation:
    """Send a chat body of ``size`` bytes to ``url`` and observe the answer (see the module docstring).

    With ``early_after`` below ``size``, the client sends that many body bytes, then waits up to
    1.5 s for an answer before sending the rest: ``early`` says one came.
    """
    return observe_body(url, chat_body(size), early_after=early_after, path=path)


def agent_content_bodies() -> list[tuple[str, bytes]]:
    """The agent-content workload (``fixtures/waf/agent-content.json``: code, shell, SQL, paths, HTML,
    logs, configuration, tool calls) as chat request bodies: each sample is a tool result, or a tool
    call's arguments for a ``tool`` sample."""
    samples = json.loads((data_dir("waf") / "agent-content.json").read_text(encoding="utf-8"))
    bodies = []
    for sample in samples:
        messages: list[dict[str, object]] = [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Fix the bug."},
        ]
        call = {"id": "call_1", "type": "function", "function": {"name": "run", "arguments": "{}"}}
        if sample["kind"] == "tool":
            call["function"] = {"name": "run", "arguments": sample["text"]}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append(
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "content": "ok" if sample["kind"] == "tool" else sample["text"],
            }
        )
        bodies.append((sample["id"], json.dumps({"model": "gpt-4o", "messages": messages}).encode()))
    return bodies


def observe_body(
    url: str, body: bytes, *, early_after: int | None = None, path: str = CHAT_PATH, check_close: bool = True
) -> Observation:
    """:func:`observe` with a body of the caller's; without ``check_close``, ``closed`` is only what the
    answer's ``Connection`` header says (no wait for the gateway to close a kept-alive connection)."""
    host, _, port = url.removeprefix("http://").partition(":")
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {len(body)}\r\n"
        + "".join(f"{name}: {value}\r\n" for name, value in CONFORMANCE_HEADERS.items())
        + "\r\n"
    ).encode()
    client = h11.Connection(h11.CLIENT)
    early = reset = False
    received = bytearray()
    with socket.create_connection((host, int(port)), timeout=READ_TIMEOUT_S) as sock:
        first = len(body) if early_after is None else min(len(body), early_after)
        try:
            sock.sendall(head + body[:first])
            if first < len(body):
                early = _readable(sock, EARLY_WAIT_S)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
            for offset in range(first, len(body), SEND_CHUNK):
                sock.sendall(body[offset : offset + SEND_CHUNK])
        except (BrokenPipeError, ConnectionResetError):
            reset = True
        status, content_type, done, closed = None, "", False, False
        try:
            while not done:
                data = sock.recv(SEND_CHUNK)
                client.receive_data(data)
                while (event := client.next_event()) not in (h11.NEED_DATA, h11.PAUSED):
                    if isinstance(event, h11.Response):
                        status = event.status_code
                        content_type = dict(event.headers).get(b"content-type", b"").decode("latin-1")
                        closed = (b"connection", b"close") in [(k, v.lower()) for k, v in event.headers]
                    elif isinstance(event, h11.Data):
                        received += event.data
                    elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                        done = True
                        break
                if not data:
                    break
            if check_close and done and not closed and _readable(sock, CLOSE_WAIT_S):
                closed = sock.recv(1) == b""
            elif check_close and done and not reset and _readable(sock, RESET_WAIT_S):
                sock.recv(1)  # a gateway that closes with the body unread resets: the read says so
        except ConnectionResetError:
            reset = True
        except (h11.RemoteProtocolError, TimeoutError, OSError):
            pass
    if status is None:
        return Observation(None, "", "", 0, early, True, reset)
    fingerprint = page_fingerprint(bytes(received), host=host, path=path)
    return Observation(status, content_type, fingerprint, len(received), early, closed, reset)


@contextmanager
def imitation_server(engine: Engine, upstream_url: str) -> Iterator[str]:
    """A loopback middlebox with ``engine``'s imitation in front of ``upstream_url``; yields its URL."""
    from simulator.proxy.loopback import LoopbackServer
    from simulator.proxy.middlebox import Middlebox

    box = Middlebox(None, engine.imitation())
    with LoopbackServer(box, upstream=upstream_url, max_body_bytes=64 * 1024 * 1024) as server:
        yield server.base_url


def compare(real_url: str, mock_url: str, size: int, *, early_after: int | None = None) -> list[str]:
    """How the mock's observation of a request of ``size`` bytes differs from the real engine's."""
    real = observe(real_url, size, early_after=early_after)
    mock = observe(mock_url, size, early_after=early_after)
    return [f"{size:,} B: {difference} (real != mock)" for difference in real.differences(mock)]
