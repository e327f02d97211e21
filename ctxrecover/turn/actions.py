"""What a turn asks its driver to do, and how a driver tells a provider's failure from a bug.

A turn is a generator (:func:`~ctxrecover.turn.flow.turn_flow`) that never does I/O: it
yields an action and is sent the outcome —

- :class:`Send` → the sender's :class:`~ctxrecover.transport.ChatResponse`, or the
  exception the send raised, thrown into the flow at the ``yield``;
- :class:`Sleep` → ``None`` once the seconds have passed;
- :class:`~ctxrecover.summarize.SummarizeCall` → the summarizer's
  :class:`~ctxrecover.summarize.SummaryResult`, or its exception, thrown in.

``Session`` carries actions out blocking, ``AsyncSession`` awaiting; nothing else differs.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from ctxrecover.summarize import SummarizeCall
from ctxrecover.transport import ChatRequest, SendFailed

__all__ = ["PROVIDER_ERROR_MODULES", "Action", "Flow", "Send", "Sleep", "is_provider_failure"]

_T = TypeVar("_T")

#: Exceptions raised from these packages are a provider's or the network's answer, read by classify.
PROVIDER_ERROR_MODULES = frozenset(
    {"httpx", "httpx2", "httpcore", "httpcore2", "openai", "anthropic", "botocore", "h11", "anyio"}
)


@dataclass(frozen=True, slots=True)
class Send:
    """Send ``request`` through the session's sender."""

    request: ChatRequest


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait ``seconds`` (a back-off between plain retries) with the driver's injected sleep."""

    seconds: float


Action = Send | Sleep | SummarizeCall
#: A sans-IO computation that yields actions and returns a ``_T``.
Flow = Generator[Action, Any, _T]


def is_provider_failure(exc: BaseException) -> bool:
    """Whether a send's exception is the provider's or the network's answer (to classify), rather than
    a bug of the caller's or of ours (raised as itself).

    Senders wrap what they were answered in :class:`~ctxrecover.transport.SendFailed`;
    HTTP-client and SDK errors (read by their module, duck typing) and OS-level network
    errors (``OSError``, ``TimeoutError``) count too, so a hand-written sender that lets
    ``httpx.ReadError`` through is still recovered.
    """
    if isinstance(exc, SendFailed | OSError | TimeoutError):
        return True
    return type(exc).__module__.split(".", 1)[0] in PROVIDER_ERROR_MODULES
