"""The recovery ladder (SPEC §6 steps 4–5): composable steps chosen by attempt number.

In the shape of tenacity's ``wait_chain``: :class:`Level1` halves the
tool-result limits and cuts long assistant messages, :class:`Level2` keeps the
last 10 messages, :class:`Level3` the last 4 capped at 4000 chars; attempts past
the end reuse the last step. Steps compose with ``+``, and a later step sees the
tool-result limits an earlier one set; those limits come back in the
:class:`StepReport` for the caller to keep for *this session* only::

    ladder = RecoveryLadder(Level1(), Level1() + Level2(keep=6), Level3())

Every dropped or cut message is archived first and reachable through its
``<<ccr:KEY>>`` marker (the passes in :mod:`ctxrecover.passes` do it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Protocol

from ctxrecover.archive import Archive
from ctxrecover.classify import Failure
from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message
from ctxrecover.passes.facts import HistoryFacts, content_chars, facts_for
from ctxrecover.passes.pairing import PairingReport, repair_pairing
from ctxrecover.passes.tool_budget import enforce_tool_result_budget
from ctxrecover.passes.truncate import MIN_CAP_CHARS, cap_assistant_messages, keep_last
from ctxrecover.policy import Policy
from ctxrecover.sizes import total_weight

__all__ = [
    "ComposedStep",
    "Level1",
    "Level2",
    "Level3",
    "RecoveryContext",
    "RecoveryLadder",
    "RecoveryStep",
    "StepBase",
    "StepReport",
    "content_chars",
]


@dataclass(frozen=True, slots=True)
class RecoveryContext:
    """What a ladder step may use: the policy, the archive, the failure and the session's limits.

    ``tool_result_budget_chars`` / ``tool_result_max_chars`` are the session's
    *current* tool-result limits (the policy's until a Level 1 tightened them).
    ``facts`` are what the session already knows of the history it hands over
    (:meth:`TurnPasses.facts <ctxrecover.passes.turn.TurnPasses.facts>`); a step reads them
    instead of scanning the history again while they describe the list it is given
    (:func:`~ctxrecover.passes.facts.facts_for`), and computes them otherwise.
    ``fill_chars`` is the weight a retry after a size rejection aims at (SPEC §12, fill the cap):
    :class:`Level1` cuts only until the history is under it; ``None`` cuts as SPEC §6 says.
    """

    policy: Policy
    archive: Archive
    tool_result_budget_chars: int
    tool_result_max_chars: int
    failure: Failure | None = None
    facts: HistoryFacts | None = None
    fill_chars: int | None = None

    def __post_init__(self) -> None:
        for name in ("tool_result_budget_chars", "tool_result_max_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"RecoveryContext.{name} must be a positive int of chars (got {value!r})")
        fill = self.fill_chars
        if fill is not None and (isinstance(fill, bool) or not isinstance(fill, int) or fill < 0):
            raise ConfigError(
                f"RecoveryContext.fill_chars must be None or an int of chars >= 0 (got {fill!r})"
            )

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


def _paired(
    history: list[Message], facts: HistoryFacts, ctx: RecoveryContext
) -> tuple[list[Message], PairingReport]:
    """``repair_pairing(history)``, without scanning a history the facts say is valid."""
    if facts.pairing_valid:
        return history, PairingReport()
    return repair_pairing(history, archive=ctx.archive)


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

    **Decision (SPEC §12, fill the cap):** with ``ctx.fill_chars`` set (the retry after a size
    rejection), assistant messages are cut oldest first only until the history weighs no more than
    it, and the tool-result limits tighten only when those cuts are not enough: the retry keeps
    what fits under the learned cap instead of a fraction of it.
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
        assistant_max = self.assistant_max_chars or policy.level1_assistant_max_chars
        facts = facts_for(history, ctx.facts)
        paired, pairing = _paired(history, facts, ctx)
        if ctx.fill_chars is None:
            budgeted, previewed = self._previewed(paired, ctx, budget, max_chars, head, tail)
            capped, cap = cap_assistant_messages(budgeted, assistant_max, archive=ctx.archive)
            limits: tuple[int | None, int | None] = (budget, max_chars)
        else:
            over = max(0, total_weight(paired) - ctx.fill_chars)
            capped, cap = cap_assistant_messages(paired, assistant_max, archive=ctx.archive, shed_chars=over)
            previewed, limits = 0, (None, None)
            if cap.chars_saved < over:
                capped, previewed = self._previewed(capped, ctx, budget, max_chars, head, tail)
                limits = (budget, max_chars)
        return capped, StepReport(
            step=self.name,
            changed=capped is not history,
            messages_before=len(history),
            messages_after=len(capped),
            chars_before=facts.content_chars,
            chars_after=content_chars(capped),
            messages_capped=cap.messages_capped,
            tool_results_previewed=previewed,
            pairing_fixes=_pairing_fixes(pairing),
            tool_result_budget_chars=limits[0],
            tool_result_max_chars=limits[1],
        )

    @staticmethod
    def _previewed(
        history: list[Message], ctx: RecoveryContext, budget: int, max_chars: int, head: int, tail: int
    ) -> tuple[list[Message], int]:
        """``history`` under the tightened tool-result limits, and how many results became previews."""
        budgeted, report = enforce_tool_result_budget(
            history,
            archive=ctx.archive,
            turn_budget_chars=budget,
            max_result_chars=max_chars,
            preview_head=head,
            preview_tail=tail,
            turn_floor=ctx.policy.tool_result_turn_floor,
        )
        return budgeted, report.results_previewed


def _keep_and_repair(
    name: str, history: list[Message], ctx: RecoveryContext, keep: int, cap: int | None
) -> tuple[list[Message], StepReport]:
    # Repair first: keep_last must cut a history whose results sit right after their
    # calls, or a result behind an interposed user message would lose its call and be
    # removed by the repair after the cut, beyond the reach of the range's recall marker.
    facts = facts_for(history, ctx.facts)
    paired, before = _paired(history, facts, ctx)
    kept, kept_report = keep_last(paired, keep, archive=ctx.archive, per_message_cap=cap, facts=facts)
    repaired, after = repair_pairing(kept, archive=ctx.archive)
    return repaired, StepReport(
        step=name,
        changed=repaired is not history,
        messages_before=len(history),
        messages_after=len(repaired),
        chars_before=facts.content_chars,
        chars_after=content_chars(repaired),
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
