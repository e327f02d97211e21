"""Recovery after a rejected request (SPEC §6) and the pre-flight check (SPEC §7).

Three pieces, each usable alone:

- :class:`PayloadCapState` — what one session learned about its gateway's body
  cap (learned cap, notice flags). Session state, never a module global and
  never ``os.environ``: two sessions in one process never see each other's cap.
- The **ladder** (:mod:`ctxrecover.ladder`, re-exported here): composable steps
  indexed by attempt number, in the shape of tenacity's ``wait_chain``.
  :class:`Level1` halves the tool-result limits and cuts long assistant messages,
  :class:`Level2` keeps the last 10 messages, :class:`Level3` the last 4 capped at
  4000 chars. Steps compose with ``+``::

      ladder = RecoveryLadder(Level1(), Level1() + Level2(keep=6), Level3())

- :func:`recover` — one recovery attempt, SPEC §6 steps 1–7 except the retry:
  learn the cap, diagnose the floor, run the ladder step, add the payload notice.

Every dropped or cut message is archived first and reachable through its
``<<ccr:KEY>>`` marker (the passes in :mod:`ctxrecover.passes` do it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctxrecover.archive import Archive
from ctxrecover.classify import Failure, FailureKind
from ctxrecover.errors import ConfigError, PayloadFloorError, RecoveryExhausted, UnrecoverableFailure
from ctxrecover.events import EventBus, Notice, PostCompact, PreCompact
from ctxrecover.ladder import (
    ComposedStep,
    Level1,
    Level2,
    Level3,
    RecoveryContext,
    RecoveryLadder,
    RecoveryStep,
    StepBase,
    StepReport,
    content_chars,
)
from ctxrecover.messages import Message
from ctxrecover.passes.pairing import repair_pairing
from ctxrecover.policy import Policy
from ctxrecover.sizes import MIB, format_payload_size

__all__ = [
    "ASSUMED_CAP_NOTICE",
    "ComposedStep",
    "FLOOR_FAIL_NOTICE",
    "FLOOR_WARNING_NOTICE",
    "FloorDiagnosis",
    "LEARNED_CAP_NOTICE",
    "Level1",
    "Level2",
    "Level3",
    "MALFORMED_HISTORY_ATTEMPTS",
    "PAYLOAD_LIMIT_MARKER",
    "PAYLOAD_LIMIT_NOTICE",
    "PREFLIGHT_NOTICE",
    "PayloadCapState",
    "PreflightResult",
    "RecoveryContext",
    "RecoveryLadder",
    "RecoveryResult",
    "RecoveryStep",
    "StepBase",
    "StepReport",
    "UNCAPPED_HISTORY_NOTICE",
    "diagnose_floor",
    "preflight",
    "recover",
    "repair_malformed",
]

# -- user-visible texts (SPEC §6, §7), byte for byte ----------------------------------------

LEARNED_CAP_NOTICE = (
    "ℹ Gateway rejected a %s request — payload cap set to %s for this session "
    "(export CHATCLI_MAX_PAYLOAD to override)"
)
ASSUMED_CAP_NOTICE = "ℹ Assuming %s payload cap — export CHATCLI_MAX_PAYLOAD (e.g. 5MB, 512KB) to adjust"
FLOOR_FAIL_NOTICE = (
    "✖ The non-compactable request base (system prompt: %s — personas, skills, MCP tool docs) "
    "meets or exceeds the size the gateway rejected (%s). History compaction cannot help — reduce "
    "MCP servers, skills or personas, or raise the proxy/WAF body-size limit"
)
FLOOR_WARNING_NOTICE = (
    "⚠ System prompt alone is %s — close to the gateway's rejection threshold; "
    "consider reducing MCP servers, skills or personas"
)
PAYLOAD_LIMIT_MARKER = "[SYSTEM NOTICE — PAYLOAD LIMIT HIT]"
PAYLOAD_LIMIT_NOTICE = (
    PAYLOAD_LIMIT_MARKER + " A proxy/gateway rejected the previous request due to body size. "
    "History was compacted to recover. Going forward: (1) When reading files, prefer targeted reads "
    "with line ranges (e.g. sed -n '100,200p' file, or read_file with offset+limit) instead of "
    "reading entire files. (2) Prefer grep/ripgrep with specific patterns over full-file reads. "
    "(3) If you previously read a large file, its full content is persisted at the path shown in the "
    "tool-result preview — re-read specific ranges from that file rather than repeating the original "
    "read. (4) Summarize findings incrementally rather than accumulating raw tool output."
)
PREFLIGHT_NOTICE = "ℹ pre-flight: history %s ≈ %d%% of configured cap (%s) — compacting"
UNCAPPED_HISTORY_NOTICE = (
    "ℹ history %s — if you are behind a proxy/gateway, export CHATCLI_MAX_PAYLOAD=5MB "
    "(adjust to the proxy limit)"
)

# Notice codes, for filtering events.
RECOVERABLE_FAILURE_CODE = "recoverable_failure"
LEARNED_CAP_CODE = "learned_cap"
ASSUMED_CAP_CODE = "assumed_cap"
FLOOR_FAIL_CODE = "payload_floor"
FLOOR_WARNING_CODE = "payload_floor_warning"
PREFLIGHT_CODE = "preflight"
UNCAPPED_HISTORY_CODE = "uncapped_history"

#: A malformed-history rejection gets one pairing repair and one retry, never truncation.
MALFORMED_HISTORY_ATTEMPTS = 1


# -- learned payload cap (SPEC §6 step 1) ----------------------------------------------------


def _size_text(n: int) -> str:
    """``4 MB`` for a whole number of MiB (the SPEC's wording), else :func:`format_payload_size`."""
    return f"{n // MIB} MB" if n >= MIB and n % MIB == 0 else format_payload_size(n)


@dataclass(slots=True)
class PayloadCapState:
    """What one session knows about its gateway's body cap; mutable, one per session.

    ``configured_cap`` is the user's cap (``policy.payload_cap``, 0 = none);
    ``learned_cap`` is what rejections taught this session. ``notice_sent`` is
    the once-per-session flag of the payload notice message, and
    ``uncapped_warning_sent`` that of the pre-flight "behind a proxy?" warning.

    >>> state = PayloadCapState()
    >>> failure = Failure(FailureKind.PAYLOAD_TOO_LARGE, rejected_bytes=129_434)
    >>> state.learn(failure, policy=Policy())[0].code
    'learned_cap'
    >>> state.effective_cap
    97075
    """

    configured_cap: int = 0
    learned_cap: int | None = None
    notice_sent: bool = False
    uncapped_warning_sent: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.configured_cap, bool) or not isinstance(self.configured_cap, int):
            raise ConfigError(
                f"PayloadCapState.configured_cap must be an int of bytes (got {self.configured_cap!r})"
            )
        if self.configured_cap < 0:
            raise ConfigError(
                "PayloadCapState.configured_cap must be >= 0 bytes, 0 meaning no cap "
                f"(got {self.configured_cap})"
            )

    @classmethod
    def from_policy(cls, policy: Policy) -> PayloadCapState:
        """A fresh state whose configured cap is ``policy.payload_cap``."""
        return cls(configured_cap=policy.payload_cap)

    @property
    def effective_cap(self) -> int:
        """The tighter of the configured and learned caps, in bytes; 0 when neither is set."""
        caps = [c for c in (self.configured_cap, self.learned_cap) if c]
        return min(caps) if caps else 0

    def observe_accepted(self, request_bytes: int) -> None:
        """A request of ``request_bytes`` went through. The ¾ rule ignores it;
        other cap-learning strategies (e.g. bisection) override this."""

    def learn(self, failure: Failure, *, policy: Policy) -> list[Notice]:
        """Learn from a payload failure; return the notices to show (none for other kinds).

        Rejected size known: ``learned = rejected × policy.learned_cap_factor``
        (¾), adopted only when no cap is in force or it is tighter than the cap
        in force — caps only tighten. When the cap in force (configured or
        learned) is already at or below it, nothing changes and nothing is said:
        the tighter cap keeps ruling the budget. Size unknown and no cap:
        ``policy.assumed_payload_cap`` (4 MB) is assumed, which happens at most
        once since a cap is in force afterwards.
        """
        if not failure.is_payload:
            return []
        current = self.effective_cap
        rejected = failure.rejected_bytes
        if rejected:
            learned = int(rejected * policy.learned_cap_factor)
            if learned < 1 or (current and learned >= current):
                return []
            self.learned_cap = learned
            message = LEARNED_CAP_NOTICE % (format_payload_size(rejected), format_payload_size(learned))
            return [Notice(LEARNED_CAP_CODE, message)]
        if current:
            return []
        self.learned_cap = policy.assumed_payload_cap
        return [Notice(ASSUMED_CAP_CODE, ASSUMED_CAP_NOTICE % _size_text(policy.assumed_payload_cap))]


# -- floor diagnosis (SPEC §6 step 2) --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FloorDiagnosis:
    """Whether the system prompt alone dooms compaction (``fail_fast``), and what to say."""

    fail_fast: bool = False
    notice: Notice | None = None


def diagnose_floor(
    system_bytes: int, rejected_bytes: int | None, *, policy: Policy, floor_bytes: int | None = None
) -> FloorDiagnosis:
    """Compare the non-compactable base with the rejected request size, real bytes with real bytes.

    ``system_bytes`` is what the leading system messages add to the request
    body (:func:`ctxrecover.wire.system_bytes`); it is the size the notices
    name. ``floor_bytes``, when given, is the smallest request compaction could
    still produce (the most aggressive ladder step applied to the history): a
    gateway that rejected a request no larger than that cannot be satisfied by
    compacting. At or above the rejected size → fail fast (``✖ …``); system
    part at or above ``policy.floor_warning_fraction`` (¾) of it → a warning
    (``⚠ …``); unknown size → nothing to say.
    """
    if system_bytes < 0:
        raise ConfigError(f"diagnose_floor needs system_bytes >= 0 (got {system_bytes})")
    if not rejected_bytes or rejected_bytes <= 0:
        return FloorDiagnosis()
    system_text = format_payload_size(system_bytes)
    if max(system_bytes, floor_bytes or 0) >= rejected_bytes:
        message = FLOOR_FAIL_NOTICE % (system_text, format_payload_size(rejected_bytes))
        return FloorDiagnosis(fail_fast=True, notice=Notice(FLOOR_FAIL_CODE, message))
    if system_bytes >= policy.floor_warning_fraction * rejected_bytes:
        return FloorDiagnosis(notice=Notice(FLOOR_WARNING_CODE, FLOOR_WARNING_NOTICE % system_text))
    return FloorDiagnosis()


# -- one recovery attempt (SPEC §6) ----------------------------------------------------------


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
    cap_state: PayloadCapState,
    system_bytes: int,
    events: EventBus,
    before_rewrite: Callable[[list[Message]], object] | None = None,
    floor_bytes: int | None = None,
) -> RecoveryResult:
    """One recovery attempt for a rejected request (SPEC §6 steps 1–7, without the retry).

    In order: emit ``failure.notice`` (``⚠ Recoverable failure (…) — compacting
    and retrying``); payload failures learn the cap (``cap_state``) and, when
    the rejected size is known, diagnose the floor against ``system_bytes``
    (the rendered system part, :func:`ctxrecover.wire.system_bytes`) and
    ``floor_bytes`` (the smallest request compaction could produce, if known); then
    ``before_rewrite(history)`` — the caller's memory flush and undo snapshot —,
    ``PreCompact("recovery")``, the ladder step for ``attempt`` (1-based; it
    archives what it drops), the payload notice message (payload failures, once
    per session, skipped when any message already carries
    :data:`PAYLOAD_LIMIT_MARKER`), and ``PostCompact("recovery", applied|skipped)``.
    When ``result.changed`` is False the caller should pop the undo snapshot.

    ``malformed_history``: pairing repair only, no hooks; a second attempt
    raises :class:`RecoveryExhausted`.

    Raises :class:`PayloadFloorError` (its message is the ``✖ …`` text) when
    the system prompt alone meets the rejected size: that attempt is not
    spent — the caller must not count it. :class:`UnrecoverableFailure` for a
    kind compaction cannot help. The input history is never mutated.
    """
    if not failure.recoverable:
        raise UnrecoverableFailure(
            f"{failure.kind.value} failures are not recoverable by compaction",
            failure=failure,
            attempts=attempt - 1,
        )
    level = ladder.level_for(attempt)
    notices: list[Notice] = []

    def say(notice: Notice) -> None:
        notices.append(notice)
        events.emit(notice)

    if failure.notice:
        say(Notice(RECOVERABLE_FAILURE_CODE, failure.notice))
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

    if failure.is_payload:
        for notice in cap_state.learn(failure, policy=ctx.policy):
            say(notice)
        diagnosis = diagnose_floor(
            system_bytes, failure.rejected_bytes, policy=ctx.policy, floor_bytes=floor_bytes
        )
        if diagnosis.fail_fast and diagnosis.notice is not None:
            raise PayloadFloorError(diagnosis.notice.message, failure=failure, attempts=attempt - 1)
        if diagnosis.notice is not None:
            say(diagnosis.notice)

    if before_rewrite is not None:
        before_rewrite(history)
    events.emit(PreCompact("recovery"))
    new_history, report = ladder(history, attempt, dataclasses.replace(ctx, failure=failure))

    added = False
    if failure.is_payload and not cap_state.notice_sent:
        if not _has_payload_notice(history):
            new_history = [*new_history, Message.user(PAYLOAD_LIMIT_NOTICE)]
            added = True
        cap_state.notice_sent = True

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


# -- pre-flight (SPEC §7) --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PreflightResult:
    """``budget_ratio_override`` (0.40) when the history is near the cap; the notice to show, if any."""

    budget_ratio_override: float | None = None
    notice: Notice | None = None


def preflight(history_bytes: int, cap_state: PayloadCapState, policy: Policy) -> PreflightResult:
    """The per-turn payload check (SPEC §7), on real history bytes.

    With a cap in force (configured or learned): history over
    ``policy.preflight_cap_fraction`` (85%) of it → force
    ``policy.preflight_budget_ratio`` (0.40) and say so. Without a cap: history
    over ``policy.uncapped_warning_bytes`` (2.5 MB) → one warning per session
    (sets ``cap_state.uncapped_warning_sent``).
    """
    if history_bytes < 0:
        raise ConfigError(f"preflight needs history_bytes >= 0 (got {history_bytes})")
    cap = cap_state.effective_cap
    if cap:
        if history_bytes <= policy.preflight_cap_fraction * cap:
            return PreflightResult()
        message = PREFLIGHT_NOTICE % (
            format_payload_size(history_bytes),
            history_bytes * 100 // cap,
            format_payload_size(cap),
        )
        return PreflightResult(policy.preflight_budget_ratio, Notice(PREFLIGHT_CODE, message))
    if history_bytes <= policy.uncapped_warning_bytes or cap_state.uncapped_warning_sent:
        return PreflightResult()
    cap_state.uncapped_warning_sent = True
    message = UNCAPPED_HISTORY_NOTICE % format_payload_size(history_bytes)
    return PreflightResult(notice=Notice(UNCAPPED_HISTORY_CODE, message))
