"""Research figures from run data: pure functions DataFrame → matplotlib Figure.

Three kinds of frame go in:

- the **attempt table** (:data:`simulator.research.metrics.RUN_COLUMNS`, one row per request
  attempt; a sweep adds columns for its swept knobs) → :func:`budget_curve`;
- the **run summaries** (:func:`simulator.research.report.run_summaries`: one row per run) →
  :func:`outcome_matrix` (its cells: :func:`outcome_cells`), :func:`summarizer_cost`,
  :func:`cost_vs_fact_survival`;
- the **episodes** with their policy (:func:`simulator.research.report.policy_episodes`) →
  :func:`rejected_per_episode`.

Units never mix on an axis: wire bytes are drawn in binary units (KiB, MiB, named as such)
and the context window in tokens, each on its own panel. Figures use matplotlib's object API
(:mod:`simulator.research.plotting`); the same frame gives the same figure.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

from simulator.research.metrics import (
    OUTCOME_FAILED,
    OUTCOME_FLOOR,
    REJECTED_PREFIX,
)
from simulator.research.plotting import (
    FIGURE_DPI,
    binary_unit,
    format_binary,
    new_figure,
    place_labels,
)

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "FIGURE_DPI",
    "VERDICTS",
    "budget_curve",
    "cost_vs_fact_survival",
    "outcome_cells",
    "outcome_matrix",
    "rejected_per_episode",
    "summarizer_cost",
]


# -- what the figures draw -----------------------------------------------------------------------
MAX_TURN_TICKS = 20
LOG_SCALE_RATIO = 8  # a window this far above every request's tokens switches the token axis to log
HEADROOM = 1.12  # the top of an axis sits this far above the highest request or cap
BUDGET_FIGSIZE = (10.0, 6.0)
# Fixed margins (no constrained layout: one budget curve per run must stay cheap); legends sit on the right.
BUDGET_MARGINS: Mapping[str, float] = MappingProxyType(
    {"left": 0.08, "right": 0.74, "bottom": 0.09, "top": 0.89, "hspace": 0.08}
)
LEGEND_OUTSIDE: Mapping[str, object] = MappingProxyType(
    {"fontsize": "x-small", "loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "frameon": False}
)
PHYSICAL_LIMIT = 1  # an episode opens with a rejection: fewer than one is impossible
SURVIVAL_AXIS_TOP = 105  # % axis with room above 100 for labels
TURNS_PER_UNIT = 100  # costs are given per 100 turns
NA_TEXT = "—"  # a matrix cell without failures, a table cell without a value
WIRE_SERIES: Mapping[str, tuple[str, str]] = MappingProxyType(
    {  # column → (label, colour); drawn in bytes
        "request_bytes": ("request body", "tab:blue"),
        "proxy_cap": ("proxy cap", "black"),
        "learned_cap": ("learned cap", "tab:purple"),
    }
)
TOKEN_SERIES: Mapping[str, tuple[str, str]] = MappingProxyType(
    {  # column → (label, colour); drawn in tokens
        "estimated_tokens": ("request (estimated input tokens)", "tab:blue"),
        "context_window": ("context window the session assumed", "tab:gray"),
    }
)
PROVIDER_WINDOW_STYLE = ("provider's context window", "tab:red")
COMPACTION_STYLE = ("compaction (L1–L3)", "tab:orange", "v")
REJECTION_STYLE = ("rejected", "tab:red", "x")
FRONT_STYLE = ("Pareto front", "tab:green")
DOMINATED_STYLE = ("dominated", "tab:gray")
# -- the outcome matrix: a verdict per cell, each with its colour ---------------------------------
# Outcomes a scenario may *expect* that are failures by design (a floor fail-fast, a rate limit left
# alone, an unfixable header cap): meeting them is right, and is drawn apart from a success.
INTENDED_FAILURES = frozenset({"fail_fast_floor", "no_compaction", "failed"})
VERDICTS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {  # verdict → (legend label, colour); a cell takes the first that applies, in this order
        "lost": ("chars lost (never acceptable)", "#f4845f"),
        "missed": ("missed its expected outcome", "#fdd49e"),
        "met": ("expected outcome, nothing lost", "#a6dba0"),
        "intended": ("intended failure, as expected", "#9ecae1"),
        "unknown": ("no expectation recorded", "#e0e0e0"),
    }
)
MATRIX_BASE_WIDTH = 4.6  # inches: scenario names and the legend
MATRIX_CELL_WIDTH = 1.45
MATRIX_BASE_HEIGHT = 1.6
MATRIX_CELL_HEIGHT = 0.62
CHECK_MET = "✓"
CHECK_MISSED = "✗"
CHECK_UNKNOWN = "?"
# -- validation: the columns each function reads --------------------------------------------------
BUDGET_COLUMNS: tuple[str, ...] = (
    "run_id",
    "scenario",
    "policy",
    "turn",
    "request_bytes",
    "estimated_tokens",
    "context_window",
    "proxy_cap",
    "learned_cap",
    "compaction_level",
    "outcome",
)
SUMMARY_NEEDS: tuple[str, ...] = (
    "policy",
    "scenario",
    "turns",
    "recovered_episodes",
    "failed_episodes",
    "rejected_requests",
    "summarizer_cost_usd",
    "cache_adjusted_cost_usd",
    "chars_lost",
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
        [
            "runs",
            "turns",
            "episodes",
            "recovered_episodes",
            "rejected_requests",
            "summarizer_cost_usd",
            "cache_adjusted_cost_usd",
            "chars_lost",
        ]
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


# -- the attempt table ----------------------------------------------------------------------------
def _values(run: pd.DataFrame, column: str) -> list[float]:
    return [math.nan if is_na(value) else float(value) for value in run[column]]


def _first(values: Iterable[float]) -> float | None:
    return next((value for value in values if not math.isnan(value)), None)


def budget_curve(
    frame: pd.DataFrame, *, run_id: str | None = None, provider_window: int | None = None
) -> Figure:
    """One run's requests against its limits: wire bytes against the caps, tokens against the window.

    Two panels share the x axis (the request index, 1-based in frame order; ticks mark the
    first request of each turn). **Wire bytes** (binary units): the request bodies, the proxy
    cap and the learned cap (step lines, when the run has them), compactions (``▼``, labelled
    ``L1``–``L3``) and rejections (``x``: ``rejected:*``, ``failed``, ``fail_fast_floor``); the
    axis is zoomed to the requests and caps. **Tokens**: each request's estimated input tokens,
    the window the session assumed, and ``provider_window`` (the provider's real window, e.g.
    the scenario's) when given; logarithmic when a window dwarfs every request. The title
    names the scenario, policy, the window and the proxy cap. ``run_id`` picks a run when the
    frame holds several.
    """
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
    figure = new_figure(*BUDGET_FIGSIZE, layout=None)
    wire, tokens = figure.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    figure.subplots_adjust(**BUDGET_MARGINS)
    _wire_panel(wire, run, xs)
    session_window = _token_panel(tokens, run, xs, provider_window)
    _turn_ticks(tokens, xs, list(run["turn"]))
    tokens.set_xlim(0.5, len(xs) + 0.5)  # one request is a point in a readable band, not on a 0.96–1.04 axis
    tokens.set_xlabel("request (ticks: first request of each turn)")
    window = provider_window if provider_window is not None else session_window
    cap = _first(_values(run, "proxy_cap"))
    limits = [
        f"window {window:,.0f} tokens" if window is not None else "no context window recorded",
        f"proxy cap {format_binary(cap)}" if cap is not None else "no proxy cap",
    ]
    who = f"{run['scenario'].iloc[0]} × {run['policy'].iloc[0]}"
    figure.suptitle(f"budget curve — {who}: {' · '.join(limits)}\n{chosen}", fontsize="medium")
    return figure


def _wire_panel(ax: Axes, run: pd.DataFrame, xs: Sequence[int]) -> None:
    """Request bodies, caps, compactions and rejections, in one binary unit, zoomed to them."""
    series = {column: _values(run, column) for column in WIRE_SERIES}
    top = max(value for points in series.values() for value in points if not math.isnan(value))
    unit_name, unit = binary_unit(top)
    scaled = {column: [value / unit for value in points] for column, points in series.items()}
    for column, points in scaled.items():
        label, colour = WIRE_SERIES[column]
        if column == "request_bytes":
            ax.plot(xs, points, color=colour, linewidth=1.2, marker=".", label=label)
        elif any(not math.isnan(value) for value in points):
            _limit_line(ax, xs, points, colour=colour, label=label)
    request = scaled["request_bytes"]
    levels = [0 if is_na(level) else int(level) for level in run["compaction_level"]]
    compacted = [i for i, level in enumerate(levels) if level > 0]
    if compacted:
        label, colour, mark = COMPACTION_STYLE
        ax.scatter(
            [xs[i] for i in compacted],
            [request[i] for i in compacted],
            marker=mark,
            color=colour,
            zorder=3,
            label=label,
        )
        for previous, i in zip([None, *compacted], compacted, strict=False):
            if previous is not None and levels[previous] == levels[i]:
                continue
            ax.annotate(
                f"L{levels[i]}",
                (xs[i], request[i]),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize="x-small",
                color=colour,
            )
    rejected = [i for i, outcome in enumerate(run["outcome"]) if _is_rejection(str(outcome))]
    if rejected:
        label, colour, mark = REJECTION_STYLE
        ax.scatter(
            [xs[i] for i in rejected],
            [request[i] for i in rejected],
            marker=mark,
            color=colour,
            zorder=4,
            label=label,
        )
    ax.set_ylim(0, top / unit * HEADROOM)
    ax.set_ylabel(f"wire bytes ({unit_name})")
    ax.legend(**LEGEND_OUTSIDE)


def _limit_line(ax: Axes, xs: Sequence[int], values: Sequence[float], *, colour: str, label: str) -> None:
    """A limit in force per request, as a dashed step line spanning each request's whole band
    (so a one-request run still shows its limit)."""
    edges = [xs[0] - 0.5, *(x + 0.5 for x in xs)]
    ax.stairs(values, edges, color=colour, linestyle="--", linewidth=1, label=label, baseline=None)


def _tokens_tick(value: float, _position: object) -> str:
    return f"{value / 1000:g}k" if abs(value) >= 1000 else f"{value:g}"


def _token_panel(ax: Axes, run: pd.DataFrame, xs: Sequence[int], provider_window: int | None) -> float | None:
    """Estimated input tokens against the window(s), on their own axis; returns the assumed window."""
    from matplotlib.ticker import FuncFormatter

    requests = _values(run, "estimated_tokens")
    label, colour = TOKEN_SERIES["estimated_tokens"]
    ax.plot(xs, requests, color=colour, linewidth=1.2, marker=".", label=label)
    assumed = _values(run, "context_window")
    if any(not math.isnan(value) for value in assumed):
        label, colour = TOKEN_SERIES["context_window"]
        _limit_line(ax, xs, assumed, colour=colour, label=label)
    drawn = [value for value in [*requests, *assumed] if not math.isnan(value)]
    if provider_window is not None:
        label, colour = PROVIDER_WINDOW_STYLE
        ax.axhline(provider_window, color=colour, linestyle=":", linewidth=1, label=label)
        drawn.append(float(provider_window))
    biggest_request = max(requests) if requests else 0.0
    if biggest_request > 0 and max(drawn) > LOG_SCALE_RATIO * biggest_request:
        ax.set_yscale("log")
    else:
        ax.set_ylim(0, max(drawn) * HEADROOM)
    ax.yaxis.set_major_formatter(FuncFormatter(_tokens_tick))
    ax.set_ylabel("tokens")
    ax.legend(**LEGEND_OUTSIDE)
    return _first(assumed)


def is_na(value: object) -> bool:
    import pandas as pd

    return bool(pd.isna(value))


def _is_rejection(outcome: str) -> bool:
    return outcome.startswith(REJECTED_PREFIX) or outcome in (OUTCOME_FAILED, OUTCOME_FLOOR)


def _turn_ticks(ax: Axes, xs: Sequence[int], turns: Sequence[int]) -> None:
    firsts = [
        (x, int(turn))
        for i, (x, turn) in enumerate(zip(xs, turns, strict=True))
        if i == 0 or turns[i - 1] != turn
    ]
    step = max(1, math.ceil(len(firsts) / MAX_TURN_TICKS))
    shown = firsts[::step]
    ax.set_xticks([x for x, _ in shown], [f"t{turn}" for _, turn in shown], fontsize="x-small")


# -- run summaries --------------------------------------------------------------------------------
def _compact(n: int) -> str:
    """A count in a few characters: 940, 81.3 K, 1.3 M."""
    if abs(n) < 1000:
        return str(n)
    if abs(n) < 1_000_000:
        return f"{n / 1000:.1f} K".replace(".0 K", " K")
    return f"{n / 1_000_000:.1f} M".replace(".0 M", " M")


def _verdict(outcomes: Sequence[str | None], expected: Sequence[str | None], chars_lost: int) -> str:
    if chars_lost > 0:
        return "lost"
    if any(e is None for e in expected):
        return "unknown"
    if any(o != e for o, e in zip(outcomes, expected, strict=True)):
        return "missed"
    return "intended" if all(e in INTENDED_FAILURES for e in expected) else "met"


def _text_or_none(value: object) -> str | None:
    return None if is_na(value) else str(value)


def outcome_cells(summary_frame: pd.DataFrame) -> pd.DataFrame:
    """The outcome matrix's cells: one row per (policy, scenario), in first-seen order.

    Columns: ``runs``, ``met_runs`` (runs whose outcome is the scenario's expected one),
    ``outcome`` (the runs' outcomes), ``expected_outcome``, ``episodes``,
    ``recovered_episodes``, ``rejected_requests``, ``chars_lost`` (sums), ``verdict`` (a
    :data:`VERDICTS` key: ``lost`` when any char was lost, whatever the outcome; ``missed``
    when a run ended otherwise than expected; ``intended`` when every run met an expected
    failure — :data:`INTENDED_FAILURES`; ``met``; ``unknown`` without an expectation), its
    ``colour`` and the cell ``text``. Outcomes come from the summaries' ``outcome`` and
    ``expected_outcome`` columns (:func:`simulator.research.report.run_summaries`).
    """
    import pandas as pd

    require_columns(summary_frame, SUMMARY_NEEDS, "outcome_matrix", SUMMARY_HINT)
    frame = summary_frame.assign(
        outcome=summary_frame["outcome"] if "outcome" in summary_frame else None,
        expected_outcome=summary_frame["expected_outcome"] if "expected_outcome" in summary_frame else None,
    )
    rows = []
    for (policy, scenario), group in frame.groupby(["policy", "scenario"], sort=False):
        outcomes = [_text_or_none(o) for o in group["outcome"]]
        expected = [_text_or_none(e) for e in group["expected_outcome"]]
        lost = int(group["chars_lost"].sum())
        verdict = _verdict(outcomes, expected, lost)
        met = sum(o is not None and o == e for o, e in zip(outcomes, expected, strict=True))
        recovered = int(group["recovered_episodes"].sum())
        episodes = recovered + int(group["failed_episodes"].sum())
        rejected = int(group["rejected_requests"].sum())
        shown = Counter(o or "?" for o in outcomes)
        outcome_text = ", ".join(o if n == 1 else f"{o}×{n}" for o, n in shown.items())
        mark = {"met": CHECK_MET, "intended": CHECK_MET, "unknown": CHECK_UNKNOWN}.get(verdict, CHECK_MISSED)
        lines = [f"{mark} {outcome_text}"]
        if verdict == "missed":
            lines.append(f"expected {', '.join(dict.fromkeys(e or '?' for e in expected))}")
        lines.append(f"rec {recovered}/{episodes} · rej {rejected}" if episodes else f"rej {rejected}")
        lines.append(f"{_compact(lost)} chars lost")
        rows.append(
            {
                "policy": policy,
                "scenario": scenario,
                "runs": len(group),
                "met_runs": met,
                "outcome": outcome_text,
                "expected_outcome": ", ".join(dict.fromkeys(e or "?" for e in expected)),
                "episodes": episodes,
                "recovered_episodes": recovered,
                "rejected_requests": rejected,
                "chars_lost": lost,
                "verdict": verdict,
                "colour": VERDICTS[verdict][1],
                "text": "\n".join(lines),
            }
        )
    return pd.DataFrame(rows).set_index(["policy", "scenario"])


def outcome_matrix(summary_frame: pd.DataFrame) -> Figure:
    """Recovery outcome matrix: scenario (rows) × policy (columns), each cell judged against its scenario.

    A cell's colour is its verdict (:data:`VERDICTS`): chars lost (whatever else happened),
    an expected outcome missed, the expected outcome met, an *intended* failure met (the
    floor fail-fast, a rate limit left uncompacted, an unfixable 431: right, but not a
    success), or no expectation. Its text: ``✓``/``✗`` with the outcome(s), the expected
    outcome when missed, failure episodes recovered and rejected requests, chars lost
    (:func:`outcome_cells`). Scenarios and policies keep first-seen order.
    """
    import numpy as np
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    cells = outcome_cells(summary_frame)
    policies = list(dict.fromkeys(summary_frame["policy"]))
    scenarios = list(dict.fromkeys(summary_frame["scenario"]))
    order = list(VERDICTS)
    grid = np.full((len(scenarios), len(policies)), np.nan)
    figure = new_figure(
        MATRIX_BASE_WIDTH + MATRIX_CELL_WIDTH * len(policies),
        MATRIX_BASE_HEIGHT + MATRIX_CELL_HEIGHT * len(scenarios),
    )
    ax = figure.subplots()
    for row, scenario in enumerate(scenarios):
        for column, policy in enumerate(policies):
            if (policy, scenario) not in cells.index:
                ax.text(column, row, NA_TEXT, ha="center", va="center", fontsize="small")
                continue
            cell = cells.loc[(policy, scenario)]
            grid[row, column] = order.index(cell["verdict"])
            ax.text(column, row, cell["text"], ha="center", va="center", fontsize="x-small")
    colours = ListedColormap([VERDICTS[verdict][1] for verdict in order]).with_extremes(bad="white")
    ax.imshow(np.ma.masked_invalid(grid), cmap=colours, vmin=-0.5, vmax=len(order) - 0.5, aspect="auto")
    present = [verdict for verdict in order if verdict in set(cells["verdict"])]
    ax.legend(
        handles=[Patch(color=VERDICTS[v][1], label=VERDICTS[v][0]) for v in present],
        fontsize="x-small",
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        frameon=False,
    )
    ax.set_xticks(range(len(policies)), [str(p) for p in policies], rotation=30, ha="right", fontsize="small")
    ax.set_yticks(range(len(scenarios)), [str(s) for s in scenarios], fontsize="small")
    ax.set_xlabel("policy")
    ax.set_ylabel("scenario")
    ax.set_title("recovery outcomes against each scenario's expected outcome", fontsize="medium")
    return figure


def summarizer_cost(summary_frame: pd.DataFrame) -> Figure:
    """Summarizer cost per policy in USD per 100 turns (bars with their values), over every scenario."""
    require_columns(summary_frame, SUMMARY_NEEDS, "summarizer_cost", SUMMARY_HINT)
    table = aggregate_runs(summary_frame, ["policy"])
    policies = [str(p) for p in table.index]
    costs = [0.0 if math.isnan(c) else c for c in table["summarizer_usd_per_100_turns"]]
    figure = new_figure(max(5.0, 1.5 + 0.9 * len(policies)), 3.8)
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
    figure = new_figure(6.5, 4.5)
    ax = figure.subplots()
    for on_front, (label, colour) in ((True, FRONT_STYLE), (False, DOMINATED_STYLE)):
        chosen = [point for point, flag in zip(points, front, strict=True) if flag is on_front]
        if chosen:
            ax.scatter(
                [c for _, c, _ in chosen],
                [s for _, _, s in chosen],
                color=colour,
                zorder=3,
                s=40 if on_front else 25,
                label=label,
            )
    ordered = sorted((c, s) for (_, c, s), flag in zip(points, front, strict=True) if flag)
    ax.step(
        [c for c, _ in ordered],
        [s for _, s in ordered],
        where="post",
        color=FRONT_STYLE[1],
        linestyle="--",
        linewidth=1,
    )
    ax.set_xlabel(f"cache-adjusted input USD per {TURNS_PER_UNIT} turns (lower is better)")
    ax.set_xlim(0, max(cost for _, cost, _ in points) * 1.25 or 1.0)
    ax.set_ylim(0, SURVIVAL_AXIS_TOP)
    ax.set_ylabel("fact survival, mean over runs (%)")
    ax.set_title("cost vs fact survival per policy")
    ax.legend(fontsize="x-small", loc="lower right")
    place_labels(ax, points)  # last: labels are placed where nothing else is drawn
    return figure


def _pareto_front(points: Sequence[tuple[float, float]]) -> list[bool]:
    """Which ``(cost, benefit)`` points no other point beats: cost <= and benefit >=, one strictly."""
    return [
        not any(oc <= cost and ob >= benefit and (oc < cost or ob > benefit) for oc, ob in points)
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
    figure = new_figure(max(6.0, 1.5 + 0.9 * len(policies)), 4.0)
    ax = figure.subplots()
    ax.boxplot(data, positions=positions, tick_labels=[str(p) for p in policies], showfliers=True)
    ax.scatter(positions, means, marker="D", color="tab:red", zorder=3, label="mean")
    for x, mean in zip(positions, means, strict=True):
        ax.annotate(
            f"{mean:.2f}",
            (x, mean),
            textcoords="offset points",
            xytext=(8, 0),
            va="center",
            fontsize="x-small",
            color="tab:red",
        )
    ax.axhline(
        PHYSICAL_LIMIT,
        color="tab:green",
        linestyle="--",
        linewidth=1,
        label=f"physical limit ({PHYSICAL_LIMIT})",
    )
    ax.tick_params(axis="x", labelrotation=30, labelsize="small")
    ax.set_ylim(bottom=0)
    ax.set_ylabel("rejected requests per episode")
    ax.set_title("rejected requests per failure episode")
    ax.legend(fontsize="x-small", loc="upper right")
    return figure
