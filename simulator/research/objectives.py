"""What a policy is judged on: the tuner's objectives and constraints, and the knob-response table.

One table, :data:`OBJECTIVES`, names the four objectives — summarizer USD per 100 turns, fact survival,
rejected requests per run, failed turns per run — with their direction; :func:`objective_values`
computes them from sweep rows (one row per run: :func:`simulator.research.sweep.sweep`'s frame or a
run directory's summaries), :func:`constraint_values` the two constraints (no char lost; a recovery rate
at least the reference's). :func:`knob_response` is each knob against each objective, mean ± 95 %
interval across seeds, for ``ctxsim report`` of sweeps and tunes.

>>> import pandas as pd
>>> rows = pd.DataFrame({"turns": [10, 30], "summarizer_cost_usd": [0.01, 0.03],
...     "fact_survival": [1.0, 0.5], "rejected_requests": [1, 3], "failed_episodes": [0, 1],
...     "recovered_episodes": [1, 1], "chars_lost": [0, 0]})
>>> objective_values(rows)["summarizer_usd_per_100_turns"], objective_values(rows)["fact_survival_pct"]
(0.1, 75.0)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CONSTRAINTS",
    "OBJECTIVES",
    "RESPONSE_COLUMNS",
    "Objective",
    "constraint_values",
    "dominates",
    "knob_response",
    "objective_values",
    "recovery_rate",
]

Direction = Literal["minimize", "maximize"]
TURNS_PER_UNIT = 100
NOTHING_TO_RECOVER = 1.0  # a policy that met no failure episode recovered all it met
# Two-sided 95 % Student t quantiles by degrees of freedom (NIST/SEMATECH e-Handbook, table 1.3.6.7.2);
# beyond the table the normal quantile.
T95: Mapping[int, float] = MappingProxyType(
    {
        1: 12.706,
        2: 4.303,
        3: 3.182,
        4: 2.776,
        5: 2.571,
        6: 2.447,
        7: 2.365,
        8: 2.306,
        9: 2.262,
        10: 2.228,
        15: 2.131,
        20: 2.086,
        30: 2.042,
    }
)
Z95 = 1.960


@dataclass(frozen=True, slots=True)
class Objective:
    """One objective: its label, which way is better, and how sweep rows give its value."""

    label: str
    direction: Direction
    value: Callable[[pd.DataFrame], float]

    def better(self, a: float, b: float) -> bool:
        """Whether ``a`` is strictly better than ``b``."""
        return a < b if self.direction == "minimize" else a > b


def _per_100_turns(rows: pd.DataFrame) -> float:
    turns = float(rows["turns"].sum())
    return float(rows["summarizer_cost_usd"].sum()) / turns * TURNS_PER_UNIT if turns else 0.0


def _survival_pct(rows: pd.DataFrame) -> float:
    values = [float(v) for v in rows["fact_survival"] if not _missing(v)]
    return statistics.fmean(values) * 100 if values else math.nan


def _per_run(column: str) -> Callable[[pd.DataFrame], float]:
    return lambda rows: float(rows[column].sum()) / len(rows) if len(rows) else 0.0


#: The tuner's objectives (name → Objective), in the order the study records them.
OBJECTIVES: Mapping[str, Objective] = MappingProxyType(
    {
        "summarizer_usd_per_100_turns": Objective("summarizer USD per 100 turns", "minimize", _per_100_turns),
        "fact_survival_pct": Objective("fact survival, mean over runs (%)", "maximize", _survival_pct),
        "rejected_per_run": Objective("rejected requests per run", "minimize", _per_run("rejected_requests")),
        "failed_turns_per_run": Objective(
            "failed turns per run (a turn that gave up)", "minimize", _per_run("failed_episodes")
        ),
    }
)
#: The constraints (name → meaning); a value <= 0 is feasible (optuna's convention).
CONSTRAINTS: Mapping[str, str] = MappingProxyType(
    {
        "chars_lost": "original chars irrecoverably lost, summed over runs (must be 0)",
        "recovery_shortfall": "the reference's recovery rate minus this policy's (must be <= 0)",
    }
)
RESPONSE_COLUMNS: tuple[str, ...] = ("knob", "value", "objective", "mean", "low", "high", "seeds")


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or str(value) in ("<NA>", "nan")


def objective_values(rows: pd.DataFrame) -> dict[str, float]:
    """Every objective of the runs in ``rows`` (one row per run), keyed as :data:`OBJECTIVES`."""
    return {name: objective.value(rows) for name, objective in OBJECTIVES.items()}


def recovery_rate(rows: pd.DataFrame) -> float:
    """Failure episodes recovered over episodes met (1.0 when none were met)."""
    recovered = float(rows["recovered_episodes"].sum())
    total = recovered + float(rows["failed_episodes"].sum())
    return recovered / total if total else NOTHING_TO_RECOVER


def constraint_values(rows: pd.DataFrame, *, reference_rate: float) -> dict[str, float]:
    """The constraints of :data:`CONSTRAINTS` for ``rows``; all <= 0 means feasible."""
    return {
        "chars_lost": float(rows["chars_lost"].sum()),
        "recovery_shortfall": reference_rate - recovery_rate(rows),
    }


def dominates(a: Mapping[str, float], b: Mapping[str, float]) -> bool:
    """Whether objective values ``a`` are at least as good as ``b`` everywhere and better somewhere."""
    no_worse = all(not OBJECTIVES[name].better(b[name], a[name]) for name in OBJECTIVES)
    return no_worse and any(OBJECTIVES[name].better(a[name], b[name]) for name in OBJECTIVES)


def _interval(values: Sequence[float]) -> tuple[float, float, float]:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    df = len(values) - 1  # between two rows of the table, the smaller df's (wider) quantile
    quantile = T95[max(k for k in T95 if k <= df)] if df <= max(T95) else Z95
    half = quantile * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def knob_response(rows: pd.DataFrame, knobs: Iterable[str], *, seed_column: str = "seed") -> pd.DataFrame:
    """Each knob against each objective: :data:`RESPONSE_COLUMNS`, one row per knob × value × objective.

    For one knob value, the runs with that value (whatever the other knobs, over every scenario) give
    one objective value per seed; ``mean`` is their mean and ``low``/``high`` the two-sided 95 % Student
    t interval across seeds (equal to the mean with one seed). Values sort ascending.
    """
    import pandas as pd

    records = []
    for knob in knobs:
        present = rows[rows[knob].notna()]
        for value, at_value in present.groupby(knob, sort=True):
            per_seed = [objective_values(group) for _seed, group in at_value.groupby(seed_column, sort=True)]
            for name in OBJECTIVES:
                values = [point[name] for point in per_seed if not math.isnan(point[name])]
                if not values:
                    continue
                mean, low, high = _interval(values)
                records.append(
                    {
                        "knob": knob,
                        "value": value,
                        "objective": name,
                        "mean": mean,
                        "low": low,
                        "high": high,
                        "seeds": len(values),
                    }
                )
    return pd.DataFrame(records, columns=list(RESPONSE_COLUMNS))
