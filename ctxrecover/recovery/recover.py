"""One rewrite of the history after a rejected request (SPEC §6 steps 4–6).

:func:`recover` runs the ladder step for the attempt and adds the payload notice;
:func:`repair_malformed` is the pairing repair a ``malformed_history`` rejection
gets instead. Every dropped or cut message is archived first and reachable through
its ``<<ccr:KEY>>`` marker (the passes in :mod:`ctxrecover.passes` do it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from ctxrecover.archive import Archive
from ctxrecover.classify import Failure
from ctxrecover.messages import Message
from ctxrecover.passes.pairing import repair_pairing
from ctxrecover.passes.parts import archive_images
from ctxrecover.recovery.ladder import RecoveryContext, RecoveryLadder, StepReport
from ctxrecover.recovery.notices import PAYLOAD_LIMIT_MARKER, PAYLOAD_LIMIT_NOTICE
from ctxrecover.sizes import total_weight

__all__ = ["MALFORMED_HISTORY_ATTEMPTS", "RecoveryResult", "recover", "repair_malformed"]

#: A malformed-history rejection gets one pairing repair and one retry, never truncation.
MALFORMED_HISTORY_ATTEMPTS = 1


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    """The outcome of one :func:`recover` call.

    ``level`` is the 1-based ladder step that ran. ``tool_result_budget_chars`` /
    ``tool_result_max_chars`` are the limits the session keeps from now on.
    """

    history: list[Message]
    report: StepReport
    level: int
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
    payload_notice: bool = False,
    keep_images: bool = True,
) -> RecoveryResult:
    """One rewrite of the history for a rejected request (SPEC §6 steps 4–6): inline images outside
    the last ``policy.nuclear_keep_messages`` messages archived (every one at the ladder's last rung,
    or when ``keep_images`` is False: the kept messages' images alone would not fit; oldest first and
    only down to ``ctx.fill_chars`` when the retry fills the cap, SPEC §12),
    the ladder step for ``attempt`` (1-based; it archives what it drops), and the payload notice
    message when ``payload_notice`` is set (skipped when a message already carries
    :data:`PAYLOAD_LIMIT_MARKER`).

    What surrounds it — whether the failure is recoverable, the retry notice, the memory flush
    and undo snapshot, the ``PreCompact``/``PostCompact`` hooks — is the turn's
    (:mod:`ctxrecover.turn.rejection`), decided once there. The input history is never mutated.
    """
    # the last rung keeps no inline image: a window smaller than the kept images must still recover
    last_rung = ladder.level_for(attempt) == len(ladder)
    keep = 0 if last_rung or not keep_images else ctx.policy.nuclear_keep_messages
    shed = None if ctx.fill_chars is None or last_rung else max(0, total_weight(history) - ctx.fill_chars)
    imageless, images = archive_images(history, archive=ctx.archive, keep_recent=keep, shed_chars=shed)
    new_history, report = ladder(imageless, attempt, dataclasses.replace(ctx, failure=failure))
    if images.images_archived and not report.changed:
        report = dataclasses.replace(report, changed=True)
    added = False
    if payload_notice and not _has_payload_notice(history):
        new_history = [*new_history, Message.user(PAYLOAD_LIMIT_NOTICE)]
        added = True
    return RecoveryResult(
        new_history,
        report,
        ladder.level_for(attempt),
        report.tool_result_budget_chars or ctx.tool_result_budget_chars,
        report.tool_result_max_chars or ctx.tool_result_max_chars,
        payload_notice_added=added,
    )
