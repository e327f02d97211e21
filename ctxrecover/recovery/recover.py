"""One recovery attempt after a rejected request (SPEC §6 steps 1–7, without the retry).

:func:`recover` learns the cap, diagnoses the floor, runs the ladder step for
the attempt and adds the payload notice. Every dropped or cut message is
archived first and reachable through its ``<<ccr:KEY>>`` marker (the passes in
:mod:`ctxrecover.passes` do it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctxrecover.archive import Archive
from ctxrecover.classify import Failure, FailureKind
from ctxrecover.errors import RecoveryExhausted, UnrecoverableFailure
from ctxrecover.events import EventBus, Notice, PostCompact, PreCompact
from ctxrecover.messages import Message
from ctxrecover.passes.pairing import repair_pairing
from ctxrecover.passes.parts import archive_images
from ctxrecover.recovery.ladder import RecoveryContext, RecoveryLadder, StepReport, content_chars
from ctxrecover.recovery.notices import PAYLOAD_LIMIT_MARKER, PAYLOAD_LIMIT_NOTICE, RECOVERABLE_FAILURE_CODE

__all__ = ["MALFORMED_HISTORY_ATTEMPTS", "RecoveryResult", "recover", "repair_malformed"]

#: A malformed-history rejection gets one pairing repair and one retry, never truncation.
MALFORMED_HISTORY_ATTEMPTS = 1


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    """The outcome of one :func:`recover` call.

    ``level`` is the 1-based ladder step that ran (0 for a malformed-history
    pairing repair). ``tool_result_budget_chars`` / ``tool_result_max_chars``
    are the limits the session keeps from now on. ``notices`` were also
    emitted on the event bus, in this order.
    """

    history: list[Message]
    report: StepReport
    level: int
    notices: tuple[Notice, ...]
    tool_result_budget_chars: int
    tool_result_max_chars: int
    payload_notice_added: bool = False

    @property
    def changed(self) -> bool:
        """True when the history differs from the one given to :func:`recover`."""
        return self.report.changed or self.payload_notice_added


def repair_malformed(history: list[Message], archive: Archive) -> tuple[list[Message], bool]:
    """Recovery for ``malformed_history``: pairing repair only, never truncation.

    Returns the repaired history (the input itself when it was valid) and
    whether anything changed. Removed orphans are archived first.
    """
    repaired, report = repair_pairing(history, archive=archive)
    return repaired, report.changed


def _has_payload_notice(history: Sequence[Message]) -> bool:
    return any(PAYLOAD_LIMIT_MARKER in m.content for m in history)


def recover(
    history: list[Message],
    failure: Failure,
    attempt: int,
    *,
    ladder: RecoveryLadder,
    ctx: RecoveryContext,
    events: EventBus,
    before_rewrite: Callable[[list[Message]], object] | None = None,
    payload_notice: bool = False,
    announce: bool = True,
) -> RecoveryResult:
    """One recovery attempt for a rejected request (SPEC §6 steps 3–7, without the retry).

    In order: emit ``failure.notice`` (``⚠ Recoverable failure (…) — compacting
    and retrying``; ``announce=False`` when the caller already said it, before
    what the gateway model concluded); ``before_rewrite(history)`` — the caller's memory flush and
    undo snapshot —, ``PreCompact("recovery")``, inline images outside the last
    ``policy.nuclear_keep_messages`` messages archived, the ladder step for
    ``attempt`` (1-based; it archives what it drops), the payload notice message
    when ``payload_notice`` is set (skipped when any message already carries
    :data:`PAYLOAD_LIMIT_MARKER`), and ``PostCompact("recovery", applied|skipped)``.
    When ``result.changed`` is False the caller should pop the undo snapshot.

    ``malformed_history``: pairing repair only, no hooks; a second attempt
    raises :class:`RecoveryExhausted`. :class:`UnrecoverableFailure` for a kind
    compaction cannot help. The input history is never mutated.
    """
    if not failure.recoverable:
        raise UnrecoverableFailure(
            f"{failure.kind.value} failures are not recoverable by compaction",
            failure=failure,
            attempts=attempt - 1,
        )
    level = ladder.level_for(attempt)
    notices: list[Notice] = []
    if failure.notice and announce:
        notice = Notice(RECOVERABLE_FAILURE_CODE, failure.notice)
        notices.append(notice)
        events.emit(notice)
    limits = (ctx.tool_result_budget_chars, ctx.tool_result_max_chars)

    if failure.kind is FailureKind.MALFORMED_HISTORY:
        if attempt > MALFORMED_HISTORY_ATTEMPTS:
            raise RecoveryExhausted(
                "the provider still rejects the history as malformed after pairing repair",
                failure=failure,
                attempts=attempt - 1,
            )
        repaired, changed = repair_malformed(history, ctx.archive)
        report = StepReport(
            step="pairing",
            changed=changed,
            messages_before=len(history),
            messages_after=len(repaired),
            chars_before=content_chars(history),
            chars_after=content_chars(repaired),
        )
        return RecoveryResult(repaired, report, 0, tuple(notices), *limits)

    if before_rewrite is not None:
        before_rewrite(history)
    events.emit(PreCompact("recovery"))
    keep = ctx.policy.nuclear_keep_messages
    imageless, images = archive_images(history, archive=ctx.archive, keep_recent=keep)
    new_history, report = ladder(imageless, attempt, dataclasses.replace(ctx, failure=failure))
    if images.images_archived and not report.changed:
        report = dataclasses.replace(report, changed=True)

    added = False
    if payload_notice and not _has_payload_notice(history):
        new_history = [*new_history, Message.user(PAYLOAD_LIMIT_NOTICE)]
        added = True

    events.emit(PostCompact("recovery", "applied" if report.changed or added else "skipped"))
    return RecoveryResult(
        new_history,
        report,
        level,
        tuple(notices),
        report.tool_result_budget_chars or limits[0],
        report.tool_result_max_chars or limits[1],
        payload_notice_added=added,
    )
