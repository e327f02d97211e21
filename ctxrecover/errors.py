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
        ├── PayloadFloorError       the system prompt alone is over the gateway's limit
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
    "CtxRecoverError",
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
    """The non-compactable base (system prompt) alone meets the size the gateway rejected."""


class UnrecoverableFailure(RecoveryError):
    """The failure is not recoverable by compaction (auth, rate limit, other)."""
