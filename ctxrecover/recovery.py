"""Recovery after a rejected request (SPEC §6) and the pre-flight check (SPEC §7).

Three pieces, each usable alone:

- :class:`PayloadCapState` — what one session learned about its gateway's body
  cap (learned cap, notice flags). Session state, never a module global and
  never ``os.environ``: two sessions in one process never see each other's cap.
- The **ladder**: composable steps indexed by attempt number, in the shape of
  tenacity's ``wait_chain``. :class:`Level1` halves the tool-result limits and
  cuts long assistant messages, :class:`Level2` keeps the last 10 messages,
  :class:`Level3` the last 4 capped at 4000 chars. Steps compose with ``+``::

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
from typing import ClassVar, Protocol

from ctxrecover.archive import Archive
from ctxrecover.classify import Failure, FailureKind
from ctxrecover.errors import ConfigError, PayloadFloorError, RecoveryExhausted, UnrecoverableFailure
from ctxrecover.events import EventBus, Notice, PostCompact, PreCompact
from ctxrecover.messages import Message
from ctxrecover.passes.pairing import PairingReport, repair_pairing
from ctxrecover.passes.tool_budget import enforce_tool_result_budget
from ctxrecover.passes.truncate import MIN_CAP_CHARS, cap_assistant_messages, keep_last
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


# -- the ladder (SPEC §6 steps 4–5) ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecoveryContext:
    """What a ladder step may use: the policy, the archive, the failure and the session's limits.

    ``tool_result_budget_chars`` / ``tool_result_max_chars`` are the session's
    *current* tool-result limits (the policy's until a Level 1 tightened them).
    """

    policy: Policy
    archive: Archive
    tool_result_budget_chars: int
    tool_result_max_chars: int
    failure: Failure | None = None

    def __post_init__(self) -> None:
        for name in ("tool_result_budget_chars", "tool_result_max_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"RecoveryContext.{name} must be a positive int of chars (got {value!r})")

    @classmethod
    def from_policy(
        cls, policy: Policy, archive: Archive, *, failure: Failure | None = None
    ) -> RecoveryContext:
        """A context whose tool-result limits are the policy's own."""
        return cls(
            policy=policy,
            archive=archive,
            tool_result_budget_chars=policy.tool_result_budget_chars,
            tool_result_max_chars=policy.tool_result_max_chars,
            failure=failure,
        )


@dataclass(frozen=True, slots=True)
class StepReport:
    """What a ladder step did.

    ``tool_result_budget_chars`` / ``tool_result_max_chars`` are the limits the
    caller keeps for the rest of *this session* (``None`` = unchanged); the
    process defaults are never touched. ``recall_note`` is the
    ``[full transcript of the messages dropped by context recovery …]`` note
    inserted for a dropped range, ``archive_key`` its CCR entry.
    """

    step: str
    changed: bool = False
    messages_before: int = 0
    messages_after: int = 0
    chars_before: int = 0
    chars_after: int = 0
    messages_dropped: int = 0
    messages_capped: int = 0
    tool_results_previewed: int = 0
    pairing_fixes: int = 0
    notice_inserted: bool = False
    recall_note: str | None = None
    archive_key: str | None = None
    tool_result_budget_chars: int | None = None
    tool_result_max_chars: int | None = None

    def then(self, later: StepReport) -> StepReport:
        """This report followed by ``later`` (the report of a composed step)."""
        return StepReport(
            step=f"{self.step}+{later.step}",
            changed=self.changed or later.changed,
            messages_before=self.messages_before,
            messages_after=later.messages_after,
            chars_before=self.chars_before,
            chars_after=later.chars_after,
            messages_dropped=self.messages_dropped + later.messages_dropped,
            messages_capped=self.messages_capped + later.messages_capped,
            tool_results_previewed=self.tool_results_previewed + later.tool_results_previewed,
            pairing_fixes=self.pairing_fixes + later.pairing_fixes,
            notice_inserted=self.notice_inserted or later.notice_inserted,
            recall_note=later.recall_note or self.recall_note,
            archive_key=later.archive_key or self.archive_key,
            tool_result_budget_chars=later.tool_result_budget_chars or self.tool_result_budget_chars,
            tool_result_max_chars=later.tool_result_max_chars or self.tool_result_max_chars,
        )


class RecoveryStep(Protocol):
    """One rung of the ladder: ``step(history, ctx) -> (new_history, report)``; never mutates its input."""

    def __call__(self, history: list[Message], ctx: RecoveryContext) -> tuple[list[Message], StepReport]: ...


def _chars(history: Sequence[Message]) -> int:
    return sum(len(m.content) for m in history)


def _pairing_fixes(report: PairingReport) -> int:
    return (
        report.synthetic_results
        + report.relocated
        + report.orphans_removed
        + report.duplicate_calls_pruned
        + report.empty_ids_pruned
    )


class StepBase:
    """Base of the built-in steps: ``a + b`` is a step that applies ``a`` then ``b``.

    >>> (Level1() + Level2(keep=6)).name
    'level1+level2'
    """

    __slots__ = ()
    label: ClassVar[str] = "step"

    @property
    def name(self) -> str:
        """A short name for reports (``level1``, ``level1+level2``)."""
        return self.label

    def __call__(self, history: list[Message], ctx: RecoveryContext) -> tuple[list[Message], StepReport]:
        raise NotImplementedError

    def __add__(self, other: RecoveryStep) -> ComposedStep:
        return ComposedStep((self, other))

    def __radd__(self, other: RecoveryStep) -> ComposedStep:
        return ComposedStep((other, self))


def _step_name(step: RecoveryStep) -> str:
    name = getattr(step, "name", None) or getattr(step, "__name__", None)
    return str(name) if name else type(step).__name__


@dataclass(frozen=True, slots=True)
class ComposedStep(StepBase):
    """Steps applied in order; a later step sees the limits an earlier one set."""

    steps: tuple[RecoveryStep, ...]

    def __post_init__(self) -> None:
        if not self.steps:
            raise ConfigError("ComposedStep needs at least one step, e.g. Level1() + Level2()")
        flat: list[RecoveryStep] = []
        for step in self.steps:
            if not callable(step):
                raise ConfigError(f"a recovery step must be callable as step(history, ctx), got {step!r}")
            flat.extend(step.steps if isinstance(step, ComposedStep) else (step,))
        object.__setattr__(self, "steps", tuple(flat))

    @property
    def name(self) -> str:
        return "+".join(_step_name(s) for s in self.steps)

    def __call__(self, history: list[Message], ctx: RecoveryContext) -> tuple[list[Message], StepReport]:
        report: StepReport | None = None
        for step in self.steps:
            history, step_report = _checked(step, step(history, ctx))
            budget, max_chars = step_report.tool_result_budget_chars, step_report.tool_result_max_chars
            if budget or max_chars:
                ctx = dataclasses.replace(
                    ctx,
                    tool_result_budget_chars=budget or ctx.tool_result_budget_chars,
                    tool_result_max_chars=max_chars or ctx.tool_result_max_chars,
                )
            report = step_report if report is None else report.then(step_report)
        assert report is not None  # __post_init__ rejects an empty chain
        return history, report


def _checked(step: RecoveryStep, result: object) -> tuple[list[Message], StepReport]:
    """Validate what a (possibly user-written) step returned, with a message that says how to fix it."""
    if (
        not isinstance(result, tuple)
        or len(result) != 2
        or not isinstance(result[0], list)
        or not isinstance(result[1], StepReport)
    ):
        raise ConfigError(
            f"recovery step {_step_name(step)!r} must return (list[Message], StepReport), "
            f"got {type(result).__name__}"
        )
    return result[0], result[1]


def _preview_split(policy: Policy, max_chars: int) -> tuple[int, int]:
    """Preview head/tail of the policy, scaled down when they would not fit under ``max_chars``."""
    head, tail = policy.tool_result_preview_head, policy.tool_result_preview_tail
    if head + tail < max_chars:
        return head, tail
    room = max_chars // 2
    scaled_head = max(1, room * head // (head + tail))
    return scaled_head, max(0, room - scaled_head)


@dataclass(frozen=True, slots=True)
class Level1(StepBase):
    """Level 1: repair pairing, tool-result budget at 50%, long assistant messages cut.

    The limits are ``budget_factor`` (``policy.level1_budget_factor``, 0.5) of
    the policy's limits — 100 000 per turn / 10 000 per result by default —
    and never looser than the session's current ones, so repeated recoveries do
    not compound. They come back in the report for the caller to keep for this
    session only. Assistant messages over ``assistant_max_chars``
    (``policy.level1_assistant_max_chars``, 5000) keep head ¾ + tail around
    ``\\n... [truncated] ...\\n``, the original archived behind a recall marker.
    """

    budget_factor: float | None = None
    assistant_max_chars: int | None = None
    label = "level1"

    def __post_init__(self) -> None:
        if self.budget_factor is not None and not 0.0 < self.budget_factor <= 1.0:
            raise ConfigError(
                f"Level1(budget_factor=...) must be in (0, 1], e.g. 0.5 (got {self.budget_factor})"
            )
        if self.assistant_max_chars is not None and self.assistant_max_chars < MIN_CAP_CHARS:
            raise ConfigError(
                f"Level1(assistant_max_chars=...) must be >= {MIN_CAP_CHARS} so a cut message keeps "
                f"its head, tail and recall marker (got {self.assistant_max_chars})"
            )

    def __call__(self, history: list[Message], ctx: RecoveryContext) -> tuple[list[Message], StepReport]:
        policy = ctx.policy
        factor = self.budget_factor or policy.level1_budget_factor
        budget = min(ctx.tool_result_budget_chars, max(1, int(policy.tool_result_budget_chars * factor)))
        max_chars = min(ctx.tool_result_max_chars, max(1, int(policy.tool_result_max_chars * factor)))
        head, tail = _preview_split(policy, max_chars)
        paired, pairing = repair_pairing(history, archive=ctx.archive)
        budgeted, budget_report = enforce_tool_result_budget(
            paired,
            archive=ctx.archive,
            turn_budget_chars=budget,
            max_result_chars=max_chars,
            preview_head=head,
            preview_tail=tail,
            turn_floor=policy.tool_result_turn_floor,
        )
        capped, cap = cap_assistant_messages(
            budgeted, self.assistant_max_chars or policy.level1_assistant_max_chars, archive=ctx.archive
        )
        return capped, StepReport(
            step=self.name,
            changed=capped is not history,
            messages_before=len(history),
            messages_after=len(capped),
            chars_before=_chars(history),
            chars_after=_chars(capped),
            messages_capped=cap.messages_capped,
            tool_results_previewed=budget_report.results_previewed,
            pairing_fixes=_pairing_fixes(pairing),
            tool_result_budget_chars=budget,
            tool_result_max_chars=max_chars,
        )


def _keep_and_repair(
    name: str, history: list[Message], ctx: RecoveryContext, keep: int, cap: int | None
) -> tuple[list[Message], StepReport]:
    # Repair first: keep_last must cut a history whose results sit right after their
    # calls, or a result behind an interposed user message would lose its call and be
    # removed by the repair after the cut, beyond the reach of the range's recall marker.
    paired, before = repair_pairing(history, archive=ctx.archive)
    kept, kept_report = keep_last(paired, keep, archive=ctx.archive, per_message_cap=cap)
    repaired, after = repair_pairing(kept, archive=ctx.archive)
    return repaired, StepReport(
        step=name,
        changed=repaired is not history,
        messages_before=len(history),
        messages_after=len(repaired),
        chars_before=_chars(history),
        chars_after=_chars(repaired),
        messages_dropped=kept_report.messages_dropped,
        messages_capped=kept_report.messages_capped,
        pairing_fixes=_pairing_fixes(before) + _pairing_fixes(after),
        notice_inserted=kept_report.notice_inserted,
        recall_note=kept_report.recall_note,
        archive_key=kept_report.archive_key,
    )


def _check_keep(step: str, keep: int | None) -> None:
    if keep is not None and keep < 2:
        raise ConfigError(
            f"{step}(keep=...) needs keep >= 2 so the history can still start with a user message "
            f"(got {keep})"
        )


@dataclass(frozen=True, slots=True)
class Level2(StepBase):
    """Level 2: system messages + the last ``keep`` non-system messages, then pairing repair.

    ``keep`` defaults to ``policy.emergency_keep_messages`` (10). The kept part
    starts with a user message; dropped messages are archived first and a
    recall note is inserted after the system messages (see
    :func:`ctxrecover.passes.truncate.keep_last`).
    """

    keep: int | None = None
    label = "level2"

    def __post_init__(self) -> None:
        _check_keep("Level2", self.keep)

    def __call__(self, history: list[Message], ctx: RecoveryContext) -> tuple[list[Message], StepReport]:
        keep = self.keep or ctx.policy.emergency_keep_messages
        return _keep_and_repair(self.name, history, ctx, keep, None)


@dataclass(frozen=True, slots=True)
class Level3(StepBase):
    """Level 3: like Level 2 with ``keep`` 4 and each kept message capped at ``per_message_cap`` (4000).

    Defaults come from ``policy.nuclear_keep_messages`` and
    ``policy.nuclear_message_max_chars``. When nothing non-system survives,
    the ``[Context was automatically compacted …]`` message is inserted.
    """

    keep: int | None = None
    per_message_cap: int | None = None
    label = "level3"

    def __post_init__(self) -> None:
        _check_keep("Level3", self.keep)
        if self.per_message_cap is not None and self.per_message_cap < MIN_CAP_CHARS:
            raise ConfigError(
                f"Level3(per_message_cap=...) must be >= {MIN_CAP_CHARS} so a cut message keeps its head, "
                f"tail and recall marker (got {self.per_message_cap})"
            )

    def __call__(self, history: list[Message], ctx: RecoveryContext) -> tuple[list[Message], StepReport]:
        policy = ctx.policy
        keep = self.keep or policy.nuclear_keep_messages
        cap = self.per_message_cap or policy.nuclear_message_max_chars
        return _keep_and_repair(self.name, history, ctx, keep, cap)


class RecoveryLadder:
    """Recovery steps chosen by attempt number (1-based); attempts past the end reuse the last step.

    >>> ladder = RecoveryLadder.default()
    >>> [ladder.step_for(n).name for n in (1, 2, 3, 4)]
    ['level1', 'level2', 'level3', 'level3']
    """

    __slots__ = ("steps",)

    def __init__(self, *steps: RecoveryStep) -> None:
        if not steps:
            raise ConfigError(
                "RecoveryLadder needs at least one step, e.g. RecoveryLadder(Level1(), Level2(), Level3()) "
                "or RecoveryLadder.default(policy)"
            )
        for index, step in enumerate(steps, 1):
            if not callable(step):
                raise ConfigError(
                    f"RecoveryLadder step {index} must be callable as "
                    f"step(history, ctx) -> (history, StepReport), got {step!r}"
                )
        self.steps: tuple[RecoveryStep, ...] = steps

    @classmethod
    def default(cls, policy: Policy | None = None) -> RecoveryLadder:
        """Level 1, Level 2, Level 3 with the policy's numbers (read from the context's policy when None)."""
        if policy is None:
            return cls(Level1(), Level2(), Level3())
        return cls(
            Level1(
                budget_factor=policy.level1_budget_factor,
                assistant_max_chars=policy.level1_assistant_max_chars,
            ),
            Level2(keep=policy.emergency_keep_messages),
            Level3(keep=policy.nuclear_keep_messages, per_message_cap=policy.nuclear_message_max_chars),
        )

    def __len__(self) -> int:
        return len(self.steps)

    def __repr__(self) -> str:
        return f"RecoveryLadder({', '.join(map(repr, self.steps))})"

    def level_for(self, attempt: int) -> int:
        """The 1-based index of the step that handles ``attempt``."""
        if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
            raise ConfigError(f"recovery attempts are numbered from 1 (got {attempt!r})")
        return min(attempt, len(self.steps))

    def step_for(self, attempt: int) -> RecoveryStep:
        """The step that handles ``attempt``."""
        return self.steps[self.level_for(attempt) - 1]

    def __call__(
        self, history: list[Message], attempt: int, ctx: RecoveryContext
    ) -> tuple[list[Message], StepReport]:
        step = self.step_for(attempt)
        return _checked(step, step(history, ctx))


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
            chars_before=_chars(history),
            chars_after=_chars(repaired),
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
