"""The tuner's search space, declared once: which Policy fields it searches and how (range, log scale,
choices), checked against the Policy fields' own types and validation.

>>> SEARCH_SPACE["tool_result_max_chars"]
Knob(low=4000, high=80000, log=True, choices=())
>>> resolve_space(["budget_ratio", "cap_strategy"])["cap_strategy"].choices
('three_quarters', 'bisection')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ctxrecover.errors import ConfigError
from ctxrecover.policy import DEFAULT_POLICY, ORDERED_FIELDS, SUMMARY_SCOPES, Policy

if TYPE_CHECKING:
    import optuna

__all__ = ["SEARCH_SPACE", "Knob", "field_kind", "policy_for", "resolve_space", "suggest"]


@dataclass(frozen=True, slots=True)
class Knob:
    """How one Policy field is searched: ``low``..``high`` (on a log scale when ``log``), or ``choices``."""

    low: float = 0
    high: float = 0
    log: bool = False
    choices: tuple[str, ...] = ()


#: Policy field → how the tuner searches it. Ranges bracket the defaults (ctxrecover/policy.py, SPEC §10):
#: budgets and keeps around the seed's values, sizes on a log scale; the cap strategy among the learning
#: ones ("none" learns nothing: a baseline, not a candidate).
SEARCH_SPACE: Mapping[str, Knob] = MappingProxyType(
    {
        "budget_ratio": Knob(0.30, 0.90),
        "keep_recent": Knob(2, 20),
        "emergency_keep_messages": Knob(4, 30),
        "microcompact_truncate_turns": Knob(1, 6),
        "microcompact_summarize_turns": Knob(2, 12),
        "tool_result_max_chars": Knob(4000, 80_000, log=True),
        "learned_cap_factor": Knob(0.50, 0.95),
        "cap_strategy": Knob(choices=("three_quarters", "bisection")),
        "summary_scope": Knob(choices=SUMMARY_SCOPES),
    }
)


def field_kind(name: str) -> str:
    """The type of Policy field ``name`` as written (``int``, ``float``, ``str``), None-ness left out."""
    annotation = str(next(f.type for f in dataclasses.fields(Policy) if f.name == name))
    return annotation.replace(" | None", "")


def resolve_space(names: Iterable[str] | Mapping[str, Knob] | None = None) -> dict[str, Knob]:
    """The knobs to search: ``names`` (default: all of :data:`SEARCH_SPACE`; an unknown or unsearchable
    name is a :class:`ConfigError` listing the valid ones), or a space of your own — Policy field →
    :class:`Knob` — checked against the Policy fields."""
    if isinstance(names, Mapping):
        fields = set(Policy.fields())
        strange = [name for name in names if name not in fields or not isinstance(names[name], Knob)]
        if strange or not names:
            shown = ", ".join(strange) or "an empty space"
            raise ConfigError(f"tune: a search space maps Policy fields to Knob values; not that: {shown}")
        return dict(names)
    chosen = list(SEARCH_SPACE) if names is None else [name.strip() for name in names if name.strip()]
    unknown = [name for name in chosen if name not in SEARCH_SPACE]
    if unknown or not chosen:
        raise ConfigError(
            f"tune: cannot search {', '.join(unknown) or 'nothing'}; searchable Policy fields: "
            f"{', '.join(SEARCH_SPACE)}"
        )
    return {name: SEARCH_SPACE[name] for name in chosen}


def suggest(trial: optuna.Trial, space: Mapping[str, Knob]) -> dict[str, Any]:
    """One point of ``space`` drawn by ``trial`` (ints, floats or choices as the Policy field types)."""
    point: dict[str, Any] = {}
    for name, knob in space.items():
        if knob.choices:
            point[name] = trial.suggest_categorical(name, list(knob.choices))
        elif field_kind(name) == "int":
            point[name] = trial.suggest_int(name, int(knob.low), int(knob.high), log=knob.log)
        else:
            point[name] = trial.suggest_float(name, float(knob.low), float(knob.high), log=knob.log)
    return point


def policy_for(point: Mapping[str, Any], base: Policy = DEFAULT_POLICY) -> tuple[dict[str, Any], Policy]:
    """The knobs a point sets, made valid together, and the policy they give.

    A pair Policy keeps ordered (``ORDERED_FIELDS``: tool results are previewed before they are
    summarized) is lifted, not refused: the higher knob takes at least the lower one's value.
    """
    knobs = dict(point)
    for lower, higher, _why in ORDERED_FIELDS:
        low = knobs.get(lower, getattr(base, lower))
        if higher in knobs and knobs[higher] < low:
            knobs[higher] = low
        elif lower in knobs and higher not in knobs and getattr(base, higher) < low:
            knobs[higher] = low
    return knobs, base.replace(**knobs)
