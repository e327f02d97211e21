"""The exception tree of ctxrecover.

Provider failures are *data* (:class:`ctxrecover.classify.Failure`); these
exceptions are what the library itself raises::

    CtxRecoverError
    ├── ConfigError                 bad policy value or argument (also ValueError)
    ├── ArchiveError                the CCR store cannot keep or return content
    │   └── ArchiveCorruptError     the store file is unreadable or corrupt
    ├── SummarizerError             a summarizer failed or its answer was rejected
    ├── CompactionCancelled         a cancel token or deadline stopped compaction
    └── RecoveryError               a turn could not be completed (carries the failure)
        ├── RecoveryExhausted       every recovery attempt was spent
        ├── PayloadFloorError       what compaction cannot shrink is over the gateway's limit
        ├── ContentBlockedError     the gateway refused the content, not the size (SPEC §11)
        ├── HeaderFaultError        the gateway refused the request headers (HTTP 431)
        └── UnrecoverableFailure    the failure kind is not recoverable (auth, rate limit, …)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxrecover.classify import Failure

__all__ = [
    "ArchiveCorruptError",
    "ArchiveError",
    "CompactionCancelled",
    "ConfigError",
    "ContentBlockedError",
    "CtxRecoverError",
    "HeaderFaultError",
    "PayloadFloorError",
    "RecoveryError",
    "RecoveryExhausted",
    "SummarizerError",
    "UnrecoverableFailure",
]


class CtxRecoverError(Exception):
    """Root of every exception ctxrecover raises."""


class ConfigError(CtxRecoverError, ValueError):
    """A policy value or argument is invalid; the message says how to fix it."""


class ArchiveError(CtxRecoverError):
    """The CCR archive could not store or return content."""


class ArchiveCorruptError(ArchiveError):
    """The durable archive file is unreadable or corrupt.

    ``path`` names the file; nothing already archived is deleted.
    """

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class SummarizerError(CtxRecoverError):
    """A summarizer call failed, timed out, overflowed or was rejected by the quality gate."""


class CompactionCancelled(CtxRecoverError):
    """Compaction was cancelled; the caller's history is untouched."""


class RecoveryError(CtxRecoverError):
    """A turn could not be completed; ``failure`` says why.

    The session's history is left intact and recoverable.
    """

    def __init__(self, message: str, *, failure: Failure | None = None, attempts: int = 0) -> None:
        super().__init__(message)
        self.failure = failure
        self.attempts = attempts


class RecoveryExhausted(RecoveryError):
    """Every recovery attempt was spent and the provider still rejected the request."""


class PayloadFloorError(RecoveryError):
    """What compaction cannot shrink meets the size the gateway rejected; no request was wasted on it.

    ``over`` names it — ``"system_prompt"``, ``"tool_definitions"`` (system prompt + tool
    definitions) or ``"smallest_request"`` (the smallest request compaction produced) —
    ``over_bytes`` is its real size and ``rejected_bytes`` the smallest size the gateway
    rejected. The session's history is left as it was before the failed turn's recovery.
    """

    def __init__(
        self,
        message: str,
        *,
        failure: Failure | None = None,
        attempts: int = 0,
        over: str = "system_prompt",
        over_bytes: int = 0,
        rejected_bytes: int = 0,
    ) -> None:
        super().__init__(message, failure=failure, attempts=attempts)
        self.over = over
        self.over_bytes = over_bytes
        self.rejected_bytes = rejected_bytes


class ContentBlockedError(RecoveryError):
    """The gateway refused a request no larger than one it had accepted: its content, not its size.

    Nothing was compacted for it and the learned cap is unchanged. ``message_index`` is
    the newest message of ``session.history`` (the usual trigger) and ``message_bytes``
    its size on the wire; ``request_bytes`` the refused request, ``largest_accepted`` the
    largest request the gateway accepted. ``Session.set_aside(message_index)`` archives
    that message behind a recall marker so the conversation can go on.
    """

    def __init__(
        self,
        message: str,
        *,
        failure: Failure | None = None,
        attempts: int = 0,
        message_index: int = -1,
        message_bytes: int = 0,
        request_bytes: int = 0,
        largest_accepted: int = 0,
    ) -> None:
        super().__init__(message, failure=failure, attempts=attempts)
        self.message_index = message_index
        self.message_bytes = message_bytes
        self.request_bytes = request_bytes
        self.largest_accepted = largest_accepted


class HeaderFaultError(RecoveryError):
    """The gateway refused the request headers (HTTP 431): compaction cannot help, none was tried.

    ``header_bytes`` is the size of the headers sent (``None`` when the sender could not
    tell), ``request_bytes`` the body's.
    """

    def __init__(
        self,
        message: str,
        *,
        failure: Failure | None = None,
        header_bytes: int | None = None,
        request_bytes: int = 0,
    ) -> None:
        super().__init__(message, failure=failure, attempts=0)
        self.header_bytes = header_bytes
        self.request_bytes = request_bytes


class UnrecoverableFailure(RecoveryError):
    """The failure is not recoverable by compaction (auth, rate limit, other)."""
