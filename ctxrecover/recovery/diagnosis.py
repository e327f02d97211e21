"""When the gateway model stops a turn: the typed errors, built from real sizes (SPEC §6.2, §11).

Pure functions of what the session measured — its history, the wire format, the
sizes involved — so the session only decides *when*; what is said lives here and in
:mod:`ctxrecover.recovery.notices`. Each error's message is the notice text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ctxrecover.classify import Failure
from ctxrecover.errors import ContentBlockedError, HeaderFaultError, PayloadFloorError
from ctxrecover.events import Notice
from ctxrecover.messages import Message
from ctxrecover.passes.truncate import CONTEXT_COMPACTED_NOTICE, leading_system_count
from ctxrecover.policy import Policy
from ctxrecover.recovery.escalation import CONTINUATION_TEXT
from ctxrecover.recovery.floor import diagnose_floor, smallest_request_diagnosis
from ctxrecover.recovery.notices import (
    CONTENT_BLOCK_NOTICE,
    HEADER_FAULT_NOTICE,
    PAYLOAD_LIMIT_NOTICE,
    ROLE_LABELS,
)
from ctxrecover.sizes import format_payload_size
from ctxrecover.summarize.prompt import SET_ASIDE_RE
from ctxrecover.wire import WireFormat, history_bytes

__all__ = [
    "LIBRARY_TEXTS",
    "content_block_error",
    "floor_error",
    "header_fault_error",
    "is_library_message",
    "least_history",
    "lowered_max_tokens",
    "newest_conversation_message",
]

UNKNOWN_HEADER_SIZE = "an unknown size"
#: Whole messages the library itself appends to a history: the payload notice (SPEC §6.6), the
#: "nothing survived" notice (§6.4) and the continuation request of an escalation (§8).
LIBRARY_TEXTS = frozenset({PAYLOAD_LIMIT_NOTICE, CONTEXT_COMPACTED_NOTICE, CONTINUATION_TEXT})


def is_library_message(msg: Message) -> bool:
    """Whether ``msg`` is the library's own: a notice it appended (:data:`LIBRARY_TEXTS`), a
    compaction product (summary, truncation notice, dropped-range note) or the stub of a message
    set aside — none of it can be what a gateway's content rule refuses."""
    if msg.is_summary or msg.content in LIBRARY_TEXTS:
        return True
    # A set-aside stub keeps its tool calls, which may carry the content: then it stays a suspect.
    return not msg.tool_calls and SET_ASIDE_RE.fullmatch(msg.content) is not None


def newest_conversation_message(history: Sequence[Message]) -> int:
    """Index of the newest message after the leading system messages that is not the library's
    own (:func:`is_library_message`), else of the newest message; -1 for an empty history."""
    for index in range(len(history) - 1, leading_system_count(history) - 1, -1):
        if not is_library_message(history[index]):
            return index
    return len(history) - 1


def content_block_error(
    history: Sequence[Message],
    wire_format: WireFormat,
    *,
    request_bytes: int,
    largest_accepted: int,
    failure: Failure | None,
    attempts: int,
) -> ContentBlockedError:
    """The refusal of a request no larger than one the gateway accepted: naming the newest message
    of the conversation in ``history`` (the usual trigger; the library's own notices and stubs are
    passed over, :func:`newest_conversation_message`), its role and its size on the wire."""
    index = newest_conversation_message(history)
    newest = history[index] if index >= 0 else Message.user("")
    newest_bytes = history_bytes([newest], wire_format)
    message = CONTENT_BLOCK_NOTICE % (
        format_payload_size(request_bytes),
        format_payload_size(largest_accepted),
        index,
        ROLE_LABELS[newest.role],
        format_payload_size(newest_bytes),
    )
    return ContentBlockedError(
        message,
        failure=failure,
        attempts=attempts,
        message_index=index,
        message_bytes=newest_bytes,
        request_bytes=request_bytes,
        largest_accepted=largest_accepted,
    )


def header_fault_error(header_bytes: object, body_bytes: int, failure: Failure) -> HeaderFaultError:
    """An HTTP 431: one diagnosis naming the header size (when the sender measured it) and the body's."""
    sent = header_bytes if isinstance(header_bytes, int) and not isinstance(header_bytes, bool) else None
    sent = sent if sent and sent > 0 else None
    headers_text = format_payload_size(sent) if sent else UNKNOWN_HEADER_SIZE
    message = HEADER_FAULT_NOTICE % (headers_text, format_payload_size(body_bytes))
    return HeaderFaultError(message, failure=failure, header_bytes=sent, request_bytes=body_bytes)


def lowered_max_tokens(failure: Failure, current: int | None) -> int | None:
    """The ``max_tokens`` to retry with after "max_tokens is too large": the limit the error states
    when it is lower, else half of ``current``; None when there is nothing to lower."""
    stated = failure.output_limit_tokens
    if stated and (current is None or stated < current):
        return stated
    return current // 2 if current and current > 1 else None


def least_history(history: Sequence[Message], policy: Policy) -> list[Message]:
    """The least any compaction leaves of ``history``: its system messages and its newest message,
    cut to ``policy.shrink_min_chars`` and without its images, which compaction can archive too
    (whole when verbatim) — a lower bound of the smallest request."""
    count = leading_system_count(history)
    kept = list(history[:count])
    if len(history) > count:
        newest = history[-1]
        if not newest.preserve_verbatim:
            newest = newest.replace(content=newest.content[: policy.shrink_min_chars], images=())
        kept.append(newest)
    return kept


def floor_error(
    *,
    system_bytes: int,
    tools_bytes: int,
    rejected_bytes: int,
    smallest: int | Callable[[], int],
    policy: Policy,
    failure: Failure | None,
    attempts: int,
    limit_bytes: int | None = None,
) -> tuple[PayloadFloorError | None, Notice | None]:
    """The floor diagnosis against the smallest rejected size: (error to raise, warning to show).

    What is over, in this order: the system prompt (SPEC §6.2's text), the system
    prompt with the tool definitions, or the smallest request compaction can produce
    (``smallest``: a size, or a function computing the lower bound only when needed),
    compared with ``limit_bytes`` — the size from which bodies are known to fail
    (:attr:`GatewayModel.hard_limit`, the rejected size less the model's resolution);
    ``rejected_bytes`` when not given. No error: the ``⚠`` warning when the system
    prompt is at ¾ of the rejected size.
    """
    limit = rejected_bytes if limit_bytes is None else min(limit_bytes, rejected_bytes)
    diagnosis = diagnose_floor(system_bytes, rejected_bytes, policy=policy, tools_bytes=tools_bytes)
    if not diagnosis.fail_fast:
        least = smallest() if callable(smallest) else smallest
        if least < limit:
            return None, diagnosis.notice
        diagnosis = smallest_request_diagnosis(
            least,
            rejected_bytes,
            system_bytes=system_bytes,
            tools_bytes=tools_bytes,
            resolution=1 - limit / rejected_bytes,
        )
    message = diagnosis.notice.message if diagnosis.notice is not None else ""
    error = PayloadFloorError(
        message,
        failure=failure,
        attempts=attempts,
        over=diagnosis.over or "",
        over_bytes=diagnosis.over_bytes,
        rejected_bytes=rejected_bytes,
    )
    return error, None
