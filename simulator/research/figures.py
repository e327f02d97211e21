"""Research figures from run data: pure functions DataFrame → matplotlib Figure.

Three kinds of frame go in:

- the **attempt table** (:data:`simulator.research.metrics.RUN_COLUMNS`, one row per request
  attempt; a sweep adds columns for its swept knobs) → :func:`budget_curve`;
- the **run summaries** (:func:`simulator.research.report.run_summaries`: one row per run) →
  :func:`outcome_matrix`, :func:`summarizer_cost`, :func:`cost_vs_fact_survival`;
- the **episodes** with their policy (:func:`simulator.research.report.policy_episodes`) →
  :func:`rejected_per_episode`.

Figures use matplotlib's object API (``Figure()``, never pyplot): nothing needs a display and
nothing accumulates in a global figure registry. The same frame gives the same figure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

from simulator.research.metrics import (
    OUTCOME_FAILED,
    OUTCOME_FLOOR,
    REJECTED_PREFIX,
)

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "budget_curve",
    "cost_vs_fact_survival",
    "outcome_matrix",
    "rejected_per_episode",
    "summarizer_cost",
]


# -- saving: fixed dpi, no timestamps or tool versions in the files --------------------------------
FIGURE_DPI = 100
# -- what the figures draw -----------------------------------------------------------------------
CHARS_PER_TOKEN = 4  # SPEC §1.3 default: a window in tokens is drawn as window × 4 chars
MAX_TURN_TICKS = 20
LOG_SCALE_RATIO = 8  # a window or cap this far above every request switches the y axis to log
PHYSICAL_LIMIT = 1  # an episode opens with a rejection: fewer than one is impossible
SURVIVAL_AXIS_TOP = 105  # % axis with room above 100 for labels
TURNS_PER_UNIT = 100  # costs are given per 100 turns
NA_TEXT = "—"  # a matrix cell without failures, a table cell without a value
BUDGET_SERIES: Mapping[str, tuple[str, str]] = MappingProxyType(
    {  # series → (label, colour)
        "request_bytes": ("request body (wire bytes)", "tab:blue"),
        "history_weight": ("history weight (chars)", "tab:cyan"),
        "context_window": (f"context window × {CHARS_PER_TOKEN} chars/token", "tab:gray"),
        "proxy_cap": ("proxy cap (bytes)", "black"),
        "learned_cap": ("learned cap (bytes)", "tab:purple"),
    }
)
COMPACTION_STYLE = ("compaction (L1–L3)", "tab:orange", "v")
REJECTION_STYLE = ("rejected", "tab:red", "x")
FRONT_STYLE = ("Pareto front", "tab:green")
DOMINATED_STYLE = ("dominated", "tab:gray")
MATRIX_COLORMAP = "RdYlGn"
MATRIX_NO_DATA_COLOUR = "lightgrey"
# -- validation: the columns each function reads --------------------------------------------------
BUDGET_COLUMNS: tuple[str, ...] = (
    "run_id", "scenario", "policy", "turn", "request_bytes", "history_weight", "context_window",
    "proxy_cap", "learned_cap", "compaction_level", "outcome",
)
SUMMARY_NEEDS: tuple[str, ...] = (
    "policy", "scenario", "turns", "recovered_episodes", "failed_episodes", "rejected_requests",
    "summarizer_cost_usd", "cache_adjusted_cost_usd", "chars_lost",
)
EPISODE_NEEDS: tuple[str, ...] = ("policy", "rejected_requests")
ATTEMPTS_HINT = "pass the attempt table (simulator.research.metrics.records_to_frame or report.read_attempts)"
SUMMARY_HINT = "pass per-run summaries (report.run_summaries)"
EPISODES_HINT = "pass episodes with their policy (report.policy_episodes)"


# -- validation and aggregation -------------------------------------------------------------------
def require_columns(frame: pd.DataFrame, columns: Iterable[str], who: str, hint: str) -> None:
    missing = [name for name in columns if name not in frame.columns]
    if missing:
        raise ValueError(f"{who} needs columns missing from the frame: {', '.join(missing)}; {hint}")
    if frame.empty:
        raise ValueError(f"{who} got an empty frame; {hint}")


def _per_unit(amount: float, turns: float) -> float:
    return amount / turns * TURNS_PER_UNIT if turns else math.nan


def aggregate_runs(summaries: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Sums over runs per ``keys`` (first-seen order), and the derived rates of COMPARISON_COLUMNS."""
    import pandas as pd

    survival = (
        summaries["fact_survival"]
        if "fact_survival" in summaries
        else pd.Series(pd.NA, index=summaries.index)
    )
    frame = summaries.assign(
        runs=1,
        episodes=summaries["recovered_episodes"] + summaries["failed_episodes"],
        fact_survival=survival.astype("Float64"),
    )
    grouped = frame.groupby(keys, sort=False)
    sums = grouped[
        ["runs", "turns", "episodes", "recovered_episodes", "rejected_requests", "summarizer_cost_usd",
         "cache_adjusted_cost_usd", "chars_lost"]
    ].sum()
    survival_mean = grouped["fact_survival"].mean()
    table = pd.DataFrame(index=sums.index)
    table["runs"] = sums["runs"].astype("int64")
    table["episodes"] = sums["episodes"].astype("int64")
    table["recovered_pct"] = [
        rec / total * 100 if total else math.nan
        for rec, total in zip(sums["recovered_episodes"], sums["episodes"], strict=True)
    ]
    table["rejected_per_episode"] = [
        rej / total if total else math.nan
        for rej, total in zip(sums["rejected_requests"], sums["episodes"], strict=True)
    ]
    table["summarizer_usd_per_100_turns"] = [
        _per_unit(cost, turns) for cost, turns in zip(sums["summarizer_cost_usd"], sums["turns"], strict=True)
    ]
    table["cache_adjusted_usd_per_100_turns"] = [
        _per_unit(cost, turns)
        for cost, turns in zip(sums["cache_adjusted_cost_usd"], sums["turns"], strict=True)
    ]
    table["fact_survival_pct"] = [
        math.nan if pd.isna(value) else float(value) * 100 for value in survival_mean
    ]
    table["chars_lost"] = sums["chars_lost"].astype("int64")
    table["recovered_episodes"] = sums["recovered_episodes"].astype("int64")
    return table


def _new_figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=FIGURE_DPI, layout="constrained")


# -- the attempt table ----------------------------------------------------------------------------
def budget_curve(frame: pd.DataFrame, *, run_id: str | None = None) -> Figure:
    """One run's budget per request: wire bytes and history weight against the window and caps.

    Lines: request body, history weight, context window (tokens × 4, in chars), proxy
    cap and learned cap (step lines, drawn when the run has them). Markers: compactions
    (``compaction_level`` > 0, annotated ``L1``–``L3``) and rejections (``rejected:*``,
    ``failed``, ``fail_fast_floor``). x is the request index (1-based, frame order);
    ticks mark the first request of each turn. The y axis turns logarithmic when a
    window or cap sits more than :data:`LOG_SCALE_RATIO` times above every request.
    ``run_id`` picks a run when the frame holds several.
    """
    from matplotlib.ticker import EngFormatter

    require_columns(frame, BUDGET_COLUMNS, "budget_curve", ATTEMPTS_HINT)
    run_ids = list(dict.fromkeys(frame["run_id"]))
    if run_id is None and len(run_ids) > 1:
        raise ValueError(
            f"budget_curve draws one run and the frame holds {len(run_ids)}: pass run_id= one of {run_ids}"
        )
    chosen = run_ids[0] if run_id is None else run_id
    if chosen not in run_ids:
        raise ValueError(f"budget_curve: run_id {chosen!r} is not in the frame; it holds {run_ids}")
    run = frame[frame["run_id"] == chosen].reset_index(drop=True)
    xs = list(range(1, len(run) + 1))

    scale = {"context_window": CHARS_PER_TOKEN}  # tokens drawn as chars
    series = {
        column: [math.nan if is_na(value) else float(value) * scale.get(column, 1) for value in run[column]]
        for column in BUDGET_SERIES
    }
    figure = _new_figure(9.0, 4.5)
    ax = figure.subplots()
    for column, points in series.items():
        label, colour = BUDGET_SERIES[column]
        if column in ("request_bytes", "history_weight"):
            ax.plot(xs, points, color=colour, linewidth=1.2, marker=".", label=label)
        elif any(not math.isnan(value) for value in points):
            ax.step(xs, points, where="post", color=colour, linestyle="--", linewidth=1, label=label)
    request = series["request_bytes"]
    levels = [0 if is_na(level) else int(level) for level in run["compaction_level"]]
    compacted = [i for i, level in enumerate(levels) if level > 0]
    if compacted:
        label, colour, mark = COMPACTION_STYLE
        ax.scatter([xs[i] for i in compacted], [request[i] for i in compacted], marker=mark, color=colour,
                   zorder=3, label=label)
        for previous, i in zip([None, *compacted], compacted, strict=False):
            if previous is not None and levels[previous] == levels[i]:
                continue
            ax.annotate(f"L{levels[i]}", (xs[i], request[i]), textcoords="offset points", xytext=(0, 6),
                        ha="center", fontsize="x-small", color=colour)
    rejected = [i for i, outcome in enumerate(run["outcome"]) if _is_rejection(str(outcome))]
    if rejected:
        label, colour, mark = REJECTION_STYLE
        ax.scatter([xs[i] for i in rejected], [request[i] for i in rejected], marker=mark, color=colour,
                   zorder=4, label=label)
    _turn_ticks(ax, xs, list(run["turn"]))
    drawn = [value for points in series.values() for value in points if not math.isnan(value)]
    if min(drawn) > 0 and max(drawn) > LOG_SCALE_RATIO * max(request):
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(EngFormatter())
    ax.set_xlabel("request (ticks: first request of each turn)")
    ax.set_ylabel("bytes (wire, caps) · chars (weight, window)")
    ax.set_title(f"budget curve — {run['scenario'].iloc[0]} × {run['policy'].iloc[0]}\n{chosen}",
                 fontsize="medium")
    ax.legend(fontsize="x-small", loc="upper left")
    return figure


def is_na(value: object) -> bool:
    import pandas as pd

    return bool(pd.isna(value))


def _is_rejection(outcome: str) -> bool:
    return outcome.startswith(REJECTED_PREFIX) or outcome in (OUTCOME_FAILED, OUTCOME_FLOOR)


def _turn_ticks(ax: Axes, xs: Sequence[int], turns: Sequence[int]) -> None:
    firsts = [(x, int(turn)) for i, (x, turn) in enumerate(zip(xs, turns, strict=True))
              if i == 0 or turns[i - 1] != turn]
    step = max(1, math.ceil(len(firsts) / MAX_TURN_TICKS))
    shown = firsts[::step]
    ax.set_xticks([x for x, _ in shown], [f"t{turn}" for _, turn in shown], fontsize="x-small")


# -- run summaries --------------------------------------------------------------------------------
def outcome_matrix(summary_frame: pd.DataFrame) -> Figure:
    """Recovery outcome matrix: policy (rows) × scenario (columns), % of failure episodes recovered.

    Each cell reads ``NN%`` over ``recovered/episodes``; a cell without failure
    episodes reads ``—`` (grey). Policies and scenarios keep first-seen order.
    """
    import numpy as np
    from matplotlib import colormaps

    require_columns(summary_frame, SUMMARY_NEEDS, "outcome_matrix", SUMMARY_HINT)
    table = aggregate_runs(summary_frame, ["policy", "scenario"])
    policies = list(dict.fromkeys(summary_frame["policy"]))
    scenarios = list(dict.fromkeys(summary_frame["scenario"]))
    grid = np.full((len(policies), len(scenarios)), np.nan)
    figure = _new_figure(max(6.0, 2.5 + 1.3 * len(scenarios)), max(3.5, 2.2 + 0.6 * len(policies)))
    ax = figure.subplots()
    cells = {key: row for key, row in table.iterrows()}
    for row, policy in enumerate(policies):
        for column, scenario in enumerate(scenarios):
            cell = cells.get((policy, scenario))
            if cell is None or not cell["episodes"]:
                ax.text(column, row, NA_TEXT, ha="center", va="center", fontsize="small")
                continue
            grid[row, column] = cell["recovered_pct"]
            recovered, total = int(cell["recovered_episodes"]), int(cell["episodes"])
            ax.text(column, row, f"{cell['recovered_pct']:.0f}%\n{recovered}/{total}", ha="center",
                    va="center", fontsize="small")
    cmap = colormaps[MATRIX_COLORMAP].with_extremes(bad=MATRIX_NO_DATA_COLOUR)
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=100, aspect="auto")
    figure.colorbar(image, ax=ax, label="episodes recovered (%)")
    ax.set_xticks(range(len(scenarios)), [str(s) for s in scenarios], rotation=30, ha="right",
                  fontsize="small")
    ax.set_yticks(range(len(policies)), [str(p) for p in policies], fontsize="small")
    ax.set_xlabel("scenario")
    ax.set_ylabel("policy")
    ax.set_title("recovery outcome matrix (failure episodes recovered)")
    return figure


def summarizer_cost(summary_frame: pd.DataFrame) -> Figure:
    """Summarizer cost per policy in USD per 100 turns (bars with their values), over every scenario."""
    require_columns(summary_frame, SUMMARY_NEEDS, "summarizer_cost", SUMMARY_HINT)
    table = aggregate_runs(summary_frame, ["policy"])
    policies = [str(p) for p in table.index]
    costs = [0.0 if math.isnan(c) else c for c in table["summarizer_usd_per_100_turns"]]
    figure = _new_figure(max(5.0, 1.5 + 0.9 * len(policies)), 3.8)
    ax = figure.subplots()
    bars = ax.bar(policies, costs, color="tab:blue")
    ax.bar_label(bars, labels=[f"${cost:.4f}" for cost in costs], fontsize="x-small")
    ax.tick_params(axis="x", labelrotation=30, labelsize="small")
    ax.set_ylabel(f"summarizer USD per {TURNS_PER_UNIT} turns")
    ax.set_title("summarizer cost per policy")
    ax.margins(y=0.15)
    return figure


def cost_vs_fact_survival(summary_frame: pd.DataFrame) -> Figure:
    """Pareto scatter per policy: cache-adjusted input USD per 100 turns (x, lower is better) vs
    mean fact survival % (y, higher is better); the non-dominated policies are the front.

    Needs a ``fact_survival`` column with at least one value (policies without one are left out).
    """
    require_columns(summary_frame, (*SUMMARY_NEEDS, "fact_survival"), "cost_vs_fact_survival", SUMMARY_HINT)
    table = aggregate_runs(summary_frame, ["policy"])
    points = [
        (str(policy), cost, survival)
        for policy, cost, survival in zip(
            table.index, table["cache_adjusted_usd_per_100_turns"], table["fact_survival_pct"], strict=True
        )
        if not (math.isnan(cost) or math.isnan(survival))
    ]
    if not points:
        raise ValueError("cost_vs_fact_survival: no policy has both a cost and a fact_survival value")
    front = _pareto_front([(cost, survival) for _, cost, survival in points])
    figure = _new_figure(6.5, 4.5)
    ax = figure.subplots()
    for on_front, (label, colour) in ((True, FRONT_STYLE), (False, DOMINATED_STYLE)):
        chosen = [point for point, flag in zip(points, front, strict=True) if flag is on_front]
        if chosen:
            ax.scatter([c for _, c, _ in chosen], [s for _, _, s in chosen], color=colour, zorder=3,
                       s=40 if on_front else 25, label=label)
    ordered = sorted((c, s) for (_, c, s), flag in zip(points, front, strict=True) if flag)
    ax.step([c for c, _ in ordered], [s for _, s in ordered], where="post", color=FRONT_STYLE[1],
            linestyle="--", linewidth=1)
    for policy, cost, survival in points:
        ax.annotate(policy, (cost, survival), textcoords="offset points", xytext=(5, 4), fontsize="x-small")
    ax.set_xlabel(f"cache-adjusted input USD per {TURNS_PER_UNIT} turns (lower is better)")
    ax.set_xlim(left=0)
    ax.set_ylim(0, SURVIVAL_AXIS_TOP)
    ax.set_ylabel("fact survival, mean over runs (%)")
    ax.set_title("cost vs fact survival per policy")
    ax.legend(fontsize="x-small", loc="lower right")
    return figure


def _pareto_front(points: Sequence[tuple[float, float]]) -> list[bool]:
    """Which ``(cost, benefit)`` points no other point beats: cost <= and benefit >=, one strictly."""
    return [
        not any(
            oc <= cost and ob >= benefit and (oc < cost or ob > benefit) for oc, ob in points
        )
        for cost, benefit in points
    ]


# -- episodes -------------------------------------------------------------------------------------
def rejected_per_episode(episodes_frame: pd.DataFrame) -> Figure:
    """Rejected requests per failure episode, a box per policy with its mean marked and annotated.

    The physical limit (1: the rejection that opens an episode) is drawn as a line.
    """
    require_columns(episodes_frame, EPISODE_NEEDS, "rejected_per_episode", EPISODES_HINT)
    policies = list(dict.fromkeys(episodes_frame["policy"]))
    data = [
        [int(v) for v in episodes_frame.loc[episodes_frame["policy"] == policy, "rejected_requests"]]
        for policy in policies
    ]
    means = [sum(values) / len(values) for values in data]
    positions = list(range(1, len(policies) + 1))
    figure = _new_figure(max(6.0, 1.5 + 0.9 * len(policies)), 4.0)
    ax = figure.subplots()
    ax.boxplot(data, positions=positions, tick_labels=[str(p) for p in policies], showfliers=True)
    ax.scatter(positions, means, marker="D", color="tab:red", zorder=3, label="mean")
    for x, mean in zip(positions, means, strict=True):
        ax.annotate(f"{mean:.2f}", (x, mean), textcoords="offset points", xytext=(8, 0), va="center",
                    fontsize="x-small", color="tab:red")
    ax.axhline(PHYSICAL_LIMIT, color="tab:green", linestyle="--", linewidth=1,
               label=f"physical limit ({PHYSICAL_LIMIT})")
    ax.tick_params(axis="x", labelrotation=30, labelsize="small")
    ax.set_ylim(bottom=0)
    ax.set_ylabel("rejected requests per episode")
    ax.set_title("rejected requests per failure episode")
    ax.legend(fontsize="x-small", loc="upper right")
    return figure
