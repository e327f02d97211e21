"""What a middlebox decides for one request, and the base every fault builds on.

A decision is data: :class:`Forward` the request (possibly shaped: delayed, throttled, cut),
:class:`Respond` with a page, or drop the connection (a :class:`ConnectionFault`). A
:class:`Fault` gates itself by turn window, request size and a probability (toxiproxy's
*toxicity*); the concrete kinds live in :mod:`simulator.proxy.faults` and
:mod:`simulator.proxy.shaping`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar, NoReturn

import httpx

__all__ = ["FORWARD", "ConnectionFault", "Decision", "Fault", "Forward", "Respond", "choose", "positive"]


def choose(name: str, value: str, table: Mapping[str, object]) -> None:
    """Raise ValueError unless ``value`` is a key of ``table`` (listing the valid ones)."""
    if value not in table:
        raise ValueError(f"{name} must be one of {', '.join(sorted(table))}, got {value!r}")


def positive(name: str, value: int | float) -> None:
    """Raise ValueError unless ``value`` is a finite number > 0."""
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")


@dataclass(frozen=True, slots=True)
class Forward:
    """Decision: pass the request to the upstream, shaped by the shaping faults that fired.

    ``latency_s`` delays the answer's head; ``rate_bps`` throttles its body (bytes per
    second); ``cut_after`` closes the connection after that many body bytes (a cut
    stream). ``applied`` names the shaping faults that fired. ``Forward()`` forwards as is.
    """

    latency_s: float = 0.0
    rate_bps: int | None = None
    cut_after: int | None = None
    applied: tuple[str, ...] = ()

    @property
    def shaped(self) -> bool:
        """Whether anything changes the answer on its way back."""
        return bool(self.latency_s) or self.rate_bps is not None or self.cut_after is not None


@dataclass(frozen=True, slots=True)
class Respond:
    """Decision: the middlebox answers itself with this status, headers and body.

    ``delay_s`` is a silence before the answer (a gateway timeout's wait, or latency);
    ``applied`` names the fault that answered (then any shaping fault that fired). ``lingers``:
    over TCP, an unread body is drained before the connection closes (else it closes at once,
    and a client still sending meets a reset).
    """

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    delay_s: float = 0.0
    applied: tuple[str, ...] = ()
    lingers: bool = True

    @property
    def text(self) -> str:
        """The body decoded as UTF-8."""
        return self.body.decode("utf-8", "replace")

    def to_response(self, request: httpx.Request | None = None) -> httpx.Response:
        """This answer as an ``httpx.Response`` (bound to ``request`` when given)."""
        return httpx.Response(self.status, headers=list(self.headers), content=self.body, request=request)


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault(ABC):
    """Base of every fault: the shared conditions and the decision it takes.

    ``probability`` (seeded draw; ``toxicity`` in the admin API), ``from_turn``/``until_turn``
    (1-based, inclusive) and ``min_bytes`` (request body size) gate the fault.
    """

    kind: ClassVar[str] = ""
    # True when the trigger needs only the declared body size and the headers, so the
    # fault can act as soon as the request head is in (see Middlebox.decide_headers).
    at_headers: ClassVar[bool] = False
    probability: float = 1.0
    from_turn: int = 1
    until_turn: int | None = None
    min_bytes: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"probability must be within [0, 1], got {self.probability}")
        if self.from_turn < 1:
            raise ValueError(f"from_turn must be >= 1 (turns count from 1), got {self.from_turn}")
        if self.until_turn is not None and self.until_turn < self.from_turn:
            raise ValueError(f"until_turn must be >= from_turn ({self.from_turn}), got {self.until_turn}")
        if self.min_bytes < 0:
            raise ValueError(f"min_bytes must be >= 0, got {self.min_bytes}")
        self._check()

    def _check(self) -> None:  # noqa: B027 - an optional hook, not an abstract method
        """Validate the fault's own fields (subclasses override)."""

    def applies(self, request: httpx.Request, body_bytes: int, turn: int) -> bool:
        """Whether every condition except the probability draw holds."""
        return self.gated_in(body_bytes, turn) and self._triggered(request, body_bytes)

    def gated_in(self, body_bytes: int, turn: int) -> bool:
        """Whether the shared conditions (turn range, ``min_bytes``) hold; the trigger is not looked at."""
        return (
            turn >= self.from_turn
            and (self.until_turn is None or turn <= self.until_turn)
            and body_bytes >= self.min_bytes
        )

    def _triggered(self, request: httpx.Request, body_bytes: int) -> bool:
        return True

    @abstractmethod
    def action(self, request: httpx.Request, ids: Mapping[str, str]) -> Respond | ConnectionFault:
        """The decision this fault takes for ``request`` (``ids`` fill page placeholders)."""


@dataclass(frozen=True, slots=True)
class ConnectionFault(Fault):
    """A fault that drops the connection instead of answering; it is its own decision."""

    def action(self, request: httpx.Request, ids: Mapping[str, str]) -> Respond | ConnectionFault:
        return self

    @abstractmethod
    def raise_in_process(self, request: httpx.Request, sleep: Callable[[float], object]) -> NoReturn:
        """Raise the httpx transport error a client sees when this fault hits."""


Decision = Forward | Respond | ConnectionFault
FORWARD = Forward()
