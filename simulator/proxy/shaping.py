"""Shaping faults: the request goes through, its answer comes back late, slow or cut (toxiproxy's toxics).

Unlike a page or a dropped connection, every shaping fault that fires applies — a latency and a
bandwidth limit together shape one answer — and a later page or connection fault still decides:

==============  =============================================================================
kind            effect on the forwarded answer
==============  =============================================================================
``latency``     its head waits ``delay_s`` seconds (± ``jitter_s``, drawn from the seed)
``bandwidth``   its body flows at ``rate`` bytes per second
``cut-stream``  the connection closes after ``n_bytes`` of its body (a stream cut mid-answer)
==============  =============================================================================

Over loopback the server carries them out on the wire; in process (:class:`Middlebox` called
as a handler) :func:`shape_in_process` sleeps the same time and cuts the body the same way, so
the client sees ``httpx.RemoteProtocolError`` as it would over TCP.
"""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar

import httpx

from simulator.proxy.fault_base import ConnectionFault, Fault, Forward, Respond, positive

__all__ = ["CUT_MESSAGE", "Bandwidth", "CutStream", "Latency", "ShapingFault", "shape_in_process"]

CUT_MESSAGE = "peer closed connection without sending complete message body (received %d bytes, expected %d)"


@dataclass(frozen=True, slots=True)
class ShapingFault(Fault):
    """A fault that lets the request through and changes its answer (see :meth:`shape`)."""

    at_headers: ClassVar[bool] = True  # it needs only the declared size: it can fire at the head

    def action(self, request: httpx.Request, ids: Mapping[str, str]) -> Respond | ConnectionFault:
        raise TypeError(f"{self.kind} shapes a forwarded answer (shape()), it never answers itself")

    @abstractmethod
    def shape(self, forward: Forward, name: str, draw: Callable[[], float]) -> Forward:
        """``forward`` with this fault's effect added (``draw`` gives seeded numbers in [0, 1))."""


@dataclass(frozen=True, slots=True)
class Latency(ShapingFault):
    """The answer's head waits ``delay_s`` seconds, ± up to ``jitter_s`` (uniform, seeded)."""

    kind: ClassVar[str] = "latency"
    delay_s: float
    jitter_s: float = 0.0

    def _check(self) -> None:
        positive("delay_s", self.delay_s)
        if not 0.0 <= self.jitter_s <= self.delay_s:
            raise ValueError(f"jitter_s must be within [0, delay_s ({self.delay_s})], got {self.jitter_s}")

    def shape(self, forward: Forward, name: str, draw: Callable[[], float]) -> Forward:
        jitter = (2.0 * draw() - 1.0) * self.jitter_s if self.jitter_s else 0.0
        return dataclasses.replace(
            forward, latency_s=forward.latency_s + self.delay_s + jitter, applied=(*forward.applied, name)
        )


@dataclass(frozen=True, slots=True)
class Bandwidth(ShapingFault):
    """The answer's body flows at ``rate`` bytes per second (the slowest limit wins)."""

    kind: ClassVar[str] = "bandwidth"
    rate: int

    def _check(self) -> None:
        positive("rate", self.rate)

    def shape(self, forward: Forward, name: str, draw: Callable[[], float]) -> Forward:
        rate = self.rate if forward.rate_bps is None else min(forward.rate_bps, self.rate)
        return dataclasses.replace(forward, rate_bps=rate, applied=(*forward.applied, name))


@dataclass(frozen=True, slots=True)
class CutStream(ShapingFault):
    """The connection closes after ``n_bytes`` bytes of the answer's body (the first cut wins)."""

    kind: ClassVar[str] = "cut-stream"
    n_bytes: int

    def _check(self) -> None:
        if self.n_bytes < 0:
            raise ValueError(f"n_bytes must be >= 0, got {self.n_bytes}")

    def shape(self, forward: Forward, name: str, draw: Callable[[], float]) -> Forward:
        cut = self.n_bytes if forward.cut_after is None else min(forward.cut_after, self.n_bytes)
        return dataclasses.replace(forward, cut_after=cut, applied=(*forward.applied, name))


class _CutBody(httpx.SyncByteStream):
    """A body that ends after ``prefix`` the way a closed connection does (RemoteProtocolError)."""

    def __init__(self, prefix: bytes, expected: int, request: httpx.Request | None) -> None:
        self.prefix, self.expected, self.request = prefix, expected, request

    def __iter__(self) -> Iterator[bytes]:
        if self.prefix:
            yield self.prefix
        raise httpx.RemoteProtocolError(CUT_MESSAGE % (len(self.prefix), self.expected), request=self.request)


def shape_in_process(
    response: httpx.Response, forward: Forward, sleep: Callable[[float], object]
) -> httpx.Response:
    """``response`` as it arrives through ``forward``'s shaping: late, slow (slept) or cut."""
    if not forward.shaped:
        return response
    if forward.latency_s > 0:
        sleep(forward.latency_s)
    body = response.read()
    if forward.rate_bps is not None:
        sleep(len(body) / forward.rate_bps)
    if forward.cut_after is None or forward.cut_after >= len(body):
        return response
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() != "content-encoding"]
    try:
        request: httpx.Request | None = response.request
    except RuntimeError:  # a response built without a request
        request = None
    return httpx.Response(
        response.status_code,
        headers=headers,
        stream=_CutBody(body[: forward.cut_after], len(body), request),
        request=request,
    )
