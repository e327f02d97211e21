"""One vocabulary for what rewrote a history before a request: compaction steps and recovery levels.

Two scales exist and are never mixed: **planned compaction** (SPEC §5, before a request that is over
budget) goes through the steps *trim*, *summary* and *truncation*; **recovery** (SPEC §6, after a
rejected request) climbs the ladder's *recovery level 1, 2, 3*. The attempt table keeps them in two
columns (``compaction_level`` 1–3 and ``recovery_level`` 1–3, :data:`simulator.research.metrics.RUN_COLUMNS`)
and the outcome ``recovered@L<n>`` names the recovery level; whatever a user reads — the replay log, the
figures, the tables, the README — names them with the words below.

>>> compaction_step(3), recovery_step(1)
('truncation', 'recovery level 1')
>>> outcome_words("recovered@L2")
'recovered at recovery level 2'
>>> steps_text(compaction_level=3, recovery_level=1)
'recovery level 1, then truncation'
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from simulator.research.metrics import RECOVERED_PREFIX

__all__ = [
    "COMPACTION_STEPS",
    "RECOVERY_LEVELS",
    "STATUS_STEPS",
    "compaction_step",
    "outcome_words",
    "recovery_step",
    "steps_text",
]

#: Planned compaction's steps by ``compaction_level``, shallowest first.
COMPACTION_STEPS: Mapping[int, str] = MappingProxyType({1: "trim", 2: "summary", 3: "truncation"})
#: Planned compaction's status phases (ctxrecover.compaction's StatusEvent.phase) → the step they reach.
STATUS_STEPS: Mapping[str, int] = MappingProxyType({"trim": 1, "summary_applied": 2, "emergency": 3})
#: The recovery ladder's rungs by ``recovery_level`` (ctxrecover.recovery.RecoveryLadder.level_for).
RECOVERY_LEVELS: Mapping[int, str] = MappingProxyType({n: f"recovery level {n}" for n in (1, 2, 3)})
RECOVERED_WORDS = "recovered at {level}"
THEN = ", then "


def compaction_step(level: int) -> str:
    """The name of planned compaction's step ``level`` (1 trim, 2 summary, 3 truncation)."""
    return COMPACTION_STEPS.get(level, f"compaction step {level}")


def recovery_step(level: int) -> str:
    """The name of the recovery ladder's level ``level`` (``recovery level 1`` …)."""
    return RECOVERY_LEVELS.get(level, f"recovery level {level}")


def outcome_words(outcome: str) -> str:
    """An attempt's outcome as a user reads it: ``recovered@L1`` → ``recovered at recovery level 1``;
    every other outcome (``ok``, ``rejected:<kind>``, ``failed``, …) reads as it is."""
    if outcome.startswith(RECOVERED_PREFIX) and outcome.removeprefix(RECOVERED_PREFIX).isdigit():
        return RECOVERED_WORDS.format(level=recovery_step(int(outcome.removeprefix(RECOVERED_PREFIX))))
    return outcome


def steps_text(*, compaction_level: int | None, recovery_level: int | None) -> str | None:
    """What rewrote the history before one request, in the order it happened (a recovery, then the
    planned compaction of the retry's prologue), or None when nothing did."""
    names = []
    if recovery_level is not None:
        names.append(recovery_step(recovery_level))
    if compaction_level is not None:
        names.append(compaction_step(compaction_level))
    return THEN.join(names) or None
