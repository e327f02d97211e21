"""Knob-response figures: each knob of a sweep or tune against each objective, mean ± 95 % across seeds.

One figure per objective (:data:`simulator.research.objectives.OBJECTIVES`), one panel per knob: the
mean at each value the knob took, with its interval across seeds as error bars
(:func:`simulator.research.objectives.knob_response`); a categorical knob's values are spread evenly
and named. With one seed a point has no interval, and the panel says so.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from simulator.research.objectives import OBJECTIVES
from simulator.research.plotting import new_figure, rotate_tick_labels

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["RESPONSE_FILE", "knob_response_figure"]

RESPONSE_FILE = "knob-response-{objective}"
PANEL_WIDTH = 3.4  # inches per knob panel
PANEL_HEIGHT = 3.0
MAX_COLUMNS = 4
ONE_SEED_NOTE = "1 seed: no interval"


def _numeric(values: pd.Series) -> bool:
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    return is_numeric_dtype(values) and not is_bool_dtype(values)


def knob_response_figure(response: pd.DataFrame, objective: str) -> Figure:
    """The panels of one objective from a :func:`~simulator.research.objectives.knob_response` table."""
    if objective not in OBJECTIVES:
        raise ValueError(
            f"knob_response_figure: unknown objective {objective!r}; use one of {', '.join(OBJECTIVES)}"
        )
    rows = response[response["objective"] == objective]
    if rows.empty:
        raise ValueError(f"knob_response_figure: the table has no rows for {objective!r}")
    knobs = list(dict.fromkeys(rows["knob"]))
    columns = min(MAX_COLUMNS, len(knobs))
    lines = math.ceil(len(knobs) / columns)
    figure = new_figure(PANEL_WIDTH * columns, PANEL_HEIGHT * lines + 0.6)
    axes = figure.subplots(lines, columns, squeeze=False).ravel()
    for ax, knob in zip(axes, knobs, strict=False):
        points = rows[rows["knob"] == knob]
        values = points["value"]
        numeric = _numeric(values.infer_objects())
        xs = [float(v) for v in values] if numeric else list(range(len(values)))
        means = [float(v) for v in points["mean"]]
        below = [m - float(low) for m, low in zip(means, points["low"], strict=True)]
        above = [float(high) - m for m, high in zip(means, points["high"], strict=True)]
        ax.errorbar(xs, means, yerr=[below, above], fmt="o", capsize=3, markersize=4, linewidth=1)
        if not numeric:
            ax.set_xticks(xs, [str(v) for v in values])
            rotate_tick_labels(ax, fontsize="x-small")
        if int(points["seeds"].max()) < 2:
            ax.text(
                0.02, 0.96, ONE_SEED_NOTE, transform=ax.transAxes, va="top", fontsize="x-small", color="0.4"
            )
        ax.set_xlabel(knob, fontsize="small")
        ax.tick_params(labelsize="x-small")
    for ax in axes[len(knobs) :]:
        ax.set_visible(False)
    axes[0].set_ylabel(OBJECTIVES[objective].label, fontsize="small")
    better = "lower" if OBJECTIVES[objective].direction == "minimize" else "higher"
    figure.suptitle(f"{OBJECTIVES[objective].label} per knob ({better} is better; bars: 95 % across seeds)")
    return figure
