"""The exception tree of ctxrecover.

Provider failures are *data* (:class:`ctxrecover.classify.Failure`); these
exceptions are what the library itself raises::

    CtxRecoverError
    ├── ConfigError                 bad policy value or argument (also ValueError)
    │   └── ArgumentTypeError       an argument of the wrong type (also TypeError)
    ├── MessageError                a message built from bad values (also TypeError and ValueError)
    │   ├── UnencodableTextError    text holding a lone surrogate (no provider accepts it)
    │   └── NestingTooDeepError     tool-call arguments nested past MAX_ARGUMENT_DEPTH
    ├── ArchiveError                the CCR store cannot keep or return content
    │   ├── ArchiveCorruptError     the store file is unreadable, corrupt or not an archive
    │   │   └── ArchiveIntegrityError   an entry's content does not match its key
    │   ├── ArchiveFullError        storing would evict what a live history reaches (nothing was cut)
    │   └── ArchiveWriteError       the file cannot be written now (read-only, disk full); reads work
    ├── ResponseFormatError         a provider's 2xx answer is not its wire format's success (also ValueError)
    ├── SummarizerError             a summarizer failed or its answer was rejected
    ├── CompactionCancelled         a cancel token or deadline stopped compaction
    └── RecoveryError               a turn could not be completed (carries the failure)
        ├── RecoveryExhausted       every recovery attempt was spent
        ├── PayloadFloorError       what compaction cannot shrink is over the gateway's limit
        ├── ContentBlockedError     the gateway refused the content, not the size (SPEC §11, §12)
        │   └── ContentFloorError   what it refused is the system prompt or the tool definitions
        ├── PolicyBlockedError      the gateway refuses this route or client, whatever is sent (SPEC §12)
        ├── ContentRefusedError     the provider itself refused the content (a safety filter, SPEC §12)
        ├── HeaderFaultError        the gateway refused the request headers (HTTP 431)
        └── UnrecoverableFailure    the failure kind is not recoverable (auth, rate limit, …)
"""

from __future__ import annotations

from ctxrecover.failure import Failure

__all__ = [
    "ArchiveCorruptError",
    "ArchiveError",
    "ArchiveFullError",
    "ArchiveIntegrityError",
    "ArchiveWriteError",
    "ArgumentTypeError",
    "CompactionCancelled",
    "ConfigError",
    "ContentBlockedError",
    "ContentFloorError",
    "ContentRefusedError",
    "CtxRecoverError",
    "HeaderFaultError",
    "MessageError",
    "NestingTooDeepError",
    "PayloadFloorError",
    "PolicyBlockedError",
    "RecoveryError",
    "RecoveryExhausted",
    "ResponseFormatError",
    "SummarizerError",
    "UnencodableTextError",
    "UnrecoverableFailure",
]


class CtxRecoverError(Exception):
    """Root of every exception ctxrecover raises."""


class ConfigError(CtxRecoverError, ValueError):
    """A policy value or argument is invalid; the message says how to fix it."""


class ArgumentTypeError(ConfigError, TypeError):
    """An argument has the wrong type; the message names it and what was expected. Also a ``TypeError``."""


class MessageError(CtxRecoverError, TypeError, ValueError):
    """A message, tool call or image was given a bad value, or cannot enter a history.

    ``field`` names it (``content``, ``tool_calls[0].arguments``, …); ``index`` is
    the message's position in the history when known (``Session.add``), else
    ``None``. Also a ``TypeError`` and a ``ValueError``, so older handlers still
    catch it.
    """

    def __init__(self, message: str, *, field: str, index: int | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.index = index


class UnencodableTextError(MessageError):
    """Text holds a lone surrogate (``\\ud800``…) at char ``offset`` of ``field``.

    Refused where a message enters a session: no wire format can carry it
    (providers reject the JSON escape, e.g. Anthropic's ``no low surrogate in
    string``), so every later request would fail.
    """

    def __init__(self, message: str, *, field: str, offset: int, index: int | None = None) -> None:
        super().__init__(message, field=field, index=index)
        self.offset = offset


class NestingTooDeepError(MessageError):
    """Tool-call arguments nest JSON deeper than ``limit`` levels (``depth`` found)."""

    def __init__(self, message: str, *, field: str, depth: int, limit: int, index: int | None = None) -> None:
        super().__init__(message, field=field, index=index)
        self.depth = depth
        self.limit = limit


class ArchiveError(CtxRecoverError):
    """The CCR archive could not store or return content."""


class ArchiveCorruptError(ArchiveError):
    """The durable archive file is unreadable, corrupt, empty or not a ctxrecover archive.

    ``path`` names the file; nothing already archived is deleted.
    """

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class ArchiveIntegrityError(ArchiveCorruptError):
    """The content stored under ``key`` in ``path`` no longer hashes to ``key`` (a damaged entry).

    Raised instead of returning altered text as if it were the original.
    """

    def __init__(self, message: str, *, path: str, key: str) -> None:
        super().__init__(message, path=path)
        self.key = key


class ArchiveFullError(ArchiveError):
    """Content cannot be stored without evicting an entry a live history still reaches.

    Raised by ``put`` *before* anything is cut, so the history stays as it was.
    ``needed`` is the size of what was refused, ``max_bytes`` the cap, ``pinned_bytes``
    what live histories hold (all in bytes).
    """

    def __init__(self, message: str, *, path: str, needed: int, max_bytes: int, pinned_bytes: int) -> None:
        super().__init__(message)
        self.path = path
        self.needed = needed
        self.max_bytes = max_bytes
        self.pinned_bytes = pinned_bytes


class ArchiveWriteError(ArchiveError):
    """The archive file cannot be written now (read-only, disk full, I/O error); reads still work.

    ``path`` names the file; nothing was stored and nothing was cut.
    """

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class ResponseFormatError(CtxRecoverError, ValueError):
    """A provider's successful answer is not the response of its wire format: ``field`` names what is
    missing or mistyped (``choices.0.message``, …). Also a ``ValueError``."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


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


class ContentFloorError(ContentBlockedError):
    """What the gateway refused is content no compaction may touch: ``part`` is ``"system_prompt"`` or
    ``"tool_definitions"``. Failed fast: no retry can help until that part changes (or the gateway's
    administrators allow it)."""

    def __init__(self, message: str, *, part: str, failure: Failure | None = None, attempts: int = 0) -> None:
        super().__init__(message, failure=failure, attempts=attempts)
        self.part = part


class PolicyBlockedError(RecoveryError):
    """The gateway refused even a request carrying no conversation content (SPEC §12): it refuses this
    route or client, not this conversation. Nothing was compacted, no cap was learned; the session is
    usable again once the route is fixed."""


class ContentRefusedError(RecoveryError):
    """The provider refused the content itself (Gemini ``blockReason`` or a SAFETY finish, OpenAI
    ``content_filter``): ``reason`` is the provider's. Never compacted, never retried."""

    def __init__(self, message: str, *, reason: str, failure: Failure | None = None) -> None:
        super().__init__(message, failure=failure)
        self.reason = reason


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
