"""Pareto fronts of policies: which policies no other beats, among those that recover as well as the default.

A policy that recovers fewer failure episodes than the default is never on a front, however cheap it
is: *no-recovery* costs nothing because it gives up. :func:`front_table` says, per policy, its cost,
fact survival and recovery rate, whether it recovers at least as well as the reference policy
(``eligible``) and whether it is on the front; :func:`cost_vs_fact_survival` draws it with numbered
points and a key, so labels stay short and never overlap (:func:`simulator.research.plotting.place_labels`).

>>> pareto_front([(1.0, 0.5), (2.0, 0.5), (0.5, 0.2)], senses=("min", "max"))
[True, False, True]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from simulator.research.figures import (
    SUMMARY_HINT,
    SUMMARY_NEEDS,
    TURNS_PER_UNIT,
    aggregate_runs,
    require_columns,
)
from simulator.research.plotting import new_figure, place_labels

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["FRONT_COLUMNS", "REFERENCE_POLICY", "cost_vs_fact_survival", "front_table", "pareto_front"]

Sense = Literal["min", "max"]
REFERENCE_POLICY = "default"  # fronts are drawn among policies recovering at least as well as this one
NOTHING_TO_RECOVER_PCT = 100.0  # a policy that met no failure episode recovered everything it met
FRONT_COLUMNS: Mapping[str, str] = MappingProxyType(
    {
        "number": "the policy's number on the figure and in its key (1-based, first-seen order)",
        "cost": f"cache-adjusted input USD per {TURNS_PER_UNIT} turns (lower is better)",
        "fact_survival_pct": "tagged facts still in the history or recallable at the end, mean, %",
        "recovered_pct": "failure episodes recovered, % (100 when the policy met none)",
        "eligible": "recovers at least as many episodes (in %) as the reference policy",
        "on_front": "eligible, and no other eligible policy is as cheap and keeps as many facts, one better",
    }
)
STYLES: Mapping[str, tuple[str, str, float]] = MappingProxyType(
    {  # kind → (legend label, colour, marker size)
        "front": ("Pareto front", "tab:green", 40.0),
        "dominated": ("dominated", "tab:gray", 25.0),
        "ineligible": ("recovers fewer episodes than {reference}", "tab:red", 25.0),
    }
)
SURVIVAL_AXIS_TOP = 105  # % axis with room above 100 for labels
X_HEADROOM = 1.25
BASE_SIZE = (6.5, 4.5)  # inches, before the key
KEY_CHARS_PER_INCH = 14  # x-small text: how wide the key grows with its longest entry
KEY_GAP = "  "
UNMARKED = " (not marked: no room beside its point)"


def pareto_front(points: Sequence[Sequence[float]], *, senses: Sequence[Sense]) -> list[bool]:
    """Which points no other point dominates: as good on every objective (``min`` or ``max`` per
    position of ``senses``) and strictly better on one."""

    def at_least_as_good(a: Sequence[float], b: Sequence[float]) -> bool:
        return all(x <= y if sense == "min" else x >= y for x, y, sense in zip(a, b, senses, strict=True))

    return [
        not any(at_least_as_good(other, point) and tuple(other) != tuple(point) for other in points)
        for point in points
    ]


def front_table(summary_frame: pd.DataFrame, *, reference: str = REFERENCE_POLICY) -> pd.DataFrame:
    """Per policy (first-seen order, policies without a cost or fact survival left out):
    :data:`FRONT_COLUMNS`. The reference recovery rate is ``reference``'s when it is among the
    policies, else the best one's; the front is computed among the eligible policies only."""
    import pandas as pd

    require_columns(summary_frame, (*SUMMARY_NEEDS, "fact_survival"), "cost_vs_fact_survival", SUMMARY_HINT)
    table = aggregate_runs(summary_frame, ["policy"])
    measured = [
        (str(policy), float(cost), float(survival), NOTHING_TO_RECOVER_PCT if math.isnan(rec) else float(rec))
        for policy, cost, survival, rec in zip(
            table.index,
            table["cache_adjusted_usd_per_100_turns"],
            table["fact_survival_pct"],
            table["recovered_pct"],
            strict=True,
        )
        if not (math.isnan(cost) or math.isnan(survival))
    ]
    if not measured:
        raise ValueError("cost_vs_fact_survival: no policy has both a cost and a fact_survival value")
    rates = {policy: recovered for policy, _cost, _survival, recovered in measured}
    bar = rates.get(reference, max(rates.values()))
    eligible = [
        (policy, cost, survival) for policy, cost, survival, recovered in measured if recovered >= bar
    ]
    front = pareto_front([(cost, survival) for _p, cost, survival in eligible], senses=("min", "max"))
    on_front = {policy for (policy, _c, _s), flag in zip(eligible, front, strict=True) if flag}
    rows = [
        {
            "policy": policy,
            "number": number,
            "cost": cost,
            "fact_survival_pct": survival,
            "recovered_pct": recovered,
            "eligible": recovered >= bar,
        }
        for number, (policy, cost, survival, recovered) in enumerate(measured, start=1)
    ]
    frame = pd.DataFrame(rows).set_index("policy")
    frame["on_front"] = [name in on_front for name in frame.index]
    return frame[list(FRONT_COLUMNS)]


def _kind(row: pd.Series) -> str:
    return "front" if row["on_front"] else "dominated" if row["eligible"] else "ineligible"


def cost_vs_fact_survival(summary_frame: pd.DataFrame, *, reference: str = REFERENCE_POLICY) -> Figure:
    """Pareto scatter per policy: cache-adjusted input USD per 100 turns (x, lower is better) vs mean
    fact survival % (y, higher is better); the front (green, joined by a step line) is among the
    policies that recover at least as well as ``reference`` (:func:`front_table`); the others are red.

    Each point carries its number (policies on the same spot share one label, ``2,5``); the key
    beside the axes names the policy of each number. Needs a ``fact_survival`` column with a value.
    """
    from matplotlib.lines import Line2D

    table = front_table(summary_frame, reference=reference)
    names = [
        f"{number}{KEY_GAP}{policy}" for policy, number in zip(table.index, table["number"], strict=True)
    ]
    width = BASE_SIZE[0] + max(len(name) for name in names) / KEY_CHARS_PER_INCH
    figure = new_figure(width, BASE_SIZE[1])
    ax = figure.subplots()
    kinds = [_kind(row) for _, row in table.iterrows()]
    for kind, (label, colour, size) in STYLES.items():
        chosen = table[[k == kind for k in kinds]]
        if len(chosen):
            ax.scatter(
                chosen["cost"],
                chosen["fact_survival_pct"],
                color=colour,
                s=size,
                zorder=3,
                label=label.format(reference=reference),
            )
    front = table[table["on_front"]].sort_values("cost")
    ax.step(front["cost"], front["fact_survival_pct"], where="post", color=STYLES["front"][1], linestyle="--")
    ax.set_xlabel(f"cache-adjusted input USD per {TURNS_PER_UNIT} turns (lower is better)")
    ax.set_xlim(0, float(table["cost"].max()) * X_HEADROOM or 1.0)
    ax.set_ylim(0, SURVIVAL_AXIS_TOP)
    ax.set_ylabel("fact survival, mean over runs (%)")
    ax.set_title("cost vs fact survival per policy")
    ax.legend(fontsize="x-small", loc="lower right")
    key = [Line2D([], [], linestyle="", marker="o", color=STYLES[kind][1]) for kind in kinds]
    key_legend = figure.legend(
        key, names, loc="outside right upper", fontsize="x-small", frameon=False, title="policies"
    )
    spots: dict[tuple[float, float], list[str]] = {}
    for number, cost, survival in zip(
        table["number"], table["cost"], table["fact_survival_pct"], strict=True
    ):
        spots.setdefault((float(cost), float(survival)), []).append(str(number))
    unplaced = place_labels(ax, [(",".join(numbers), x, y) for (x, y), numbers in spots.items()])
    if unplaced:  # named in the key, so every policy can still be found
        missing = {number for label in unplaced for number in label.split(",")}
        for text, number in zip(key_legend.get_texts(), table["number"], strict=True):
            if str(number) in missing:
                text.set_text(f"{text.get_text()}{UNMARKED}")
    return figure
