"""Research figures from run data: pure functions DataFrame → matplotlib Figure.

Three kinds of frame go in:

- the **attempt table** (:data:`simulator.research.metrics.RUN_COLUMNS`, one row per request
  attempt; a sweep adds columns for its swept knobs) → :func:`budget_curve`;
- the **run summaries** (:func:`simulator.research.report.run_summaries`: one row per run) →
  :func:`outcome_matrix` (its cells: :func:`outcome_cells`), :func:`summarizer_cost` (and
  :func:`simulator.research.pareto.cost_vs_fact_survival`);
- the **episodes** with their policy (:func:`simulator.research.report.policy_episodes`) →
  :func:`rejected_per_episode`.

Units never mix on an axis: wire bytes are drawn in binary units (KiB, MiB, named as such)
and the context window in tokens, each on its own panel; every token axis is linear and reads
``500``, ``1.5k``, ``100k``, ``1M``. Compaction steps and recovery levels are named in words
(:mod:`simulator.research.levels`). Rotated category labels end at their ticks. Figures use
matplotlib's object API (:mod:`simulator.research.plotting`); the same frame gives the same figure.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

from simulator.research.levels import compaction_step, recovery_step
from simulator.research.metrics import OUTCOME_TRUNCATED, is_rejection
from simulator.research.plotting import (
    FIGURE_DPI,
    binary_unit,
    format_binary,
    format_tokens,
    new_figure,
    rotate_tick_labels,
)

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "FIGURE_DPI",
    "VERDICTS",
    "budget_curve",
    "outcome_cells",
    "outcome_matrix",
    "rejected_per_episode",
    "summarizer_cost",
]


# -- what the figures draw -----------------------------------------------------------------------
MAX_TURN_TICKS = 20
OFF_AXIS_RATIO = 8  # a window this far above every request's tokens is named, not drawn, on the token axis
HEADROOM = 1.12  # the top of an axis sits this far above the highest request or cap
BUDGET_FIGSIZE = (10.0, 6.0)
# Fixed margins (no constrained layout: one budget curve per run must stay cheap); legends sit on the right.
BUDGET_MARGINS: Mapping[str, float] = MappingProxyType(
    {"left": 0.08, "right": 0.74, "bottom": 0.09, "top": 0.89, "hspace": 0.08}
)
LEGEND_OUTSIDE: Mapping[str, object] = MappingProxyType(
    {"fontsize": "x-small", "loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "frameon": False}
)
EPISODE_FLOOR = 1  # an episode opens with a rejection: fewer than one per episode is impossible
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
ABOVE_AXIS = " (above the axis: {value} tokens)"
# Markers on the wire panel: (legend label, colour, marker, label offset in points).
COMPACTION_STYLE = ("planned compaction (trim, summary, truncation)", "tab:orange", "v", 6)
RECOVERY_STYLE = ("recovery (recovery level 1–3)", "tab:brown", "^", -12)
TRUNCATED_STYLE = ("answer cut at max_tokens", "tab:olive", "s")
REJECTION_STYLE = ("rejected", "tab:red", "x")
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
MATRIX_BASE_HEIGHT = 1.2  # inches: title and axis labels
MATRIX_LINE_HEIGHT = 0.15  # inches per line of x-small cell text, line spacing included
MATRIX_CELL_PADDING = 0.14  # inches of a cell above and below its text
LABEL_HEIGHT_PER_CHAR = 0.05  # inches a rotated policy label takes below the axes, per character
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
    cap and the learned cap (step lines, when the run has them), planned compactions (``▼``,
    named *trim*, *summary*, *truncation*), recoveries (``▲``, *recovery level 1–3*), answers cut
    at ``max_tokens`` (``■``) and rejections (``x``: ``rejected:*``, ``failed``,
    ``fail_fast_floor``); the axis is zoomed to the requests and caps. **Tokens** (linear):
    each request's estimated input tokens, the window the session assumed, and
    ``provider_window`` (the provider's real window, e.g. the scenario's) when given; a window
    that dwarfs every request is named in the legend, above the axis. The title
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
    """Request bodies, caps, compactions, recoveries, truncated answers and rejections, in one binary
    unit, zoomed to them."""
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
    for column, style, name in (
        ("recovery_level", RECOVERY_STYLE, recovery_step),
        ("compaction_level", COMPACTION_STYLE, compaction_step),
    ):
        if column in run:
            _level_marks(ax, xs, request, [0 if is_na(v) else int(v) for v in run[column]], style, name)
    outcomes = [str(outcome) for outcome in run["outcome"]]
    marks: tuple[tuple[tuple[str, str, str], list[int]], ...] = (
        (TRUNCATED_STYLE, [i for i, outcome in enumerate(outcomes) if outcome == OUTCOME_TRUNCATED]),
        (REJECTION_STYLE, [i for i, outcome in enumerate(outcomes) if is_rejection(outcome)]),
    )
    for mark_style, chosen in marks:
        if chosen:
            label, colour, mark = mark_style
            ax.scatter(
                [xs[i] for i in chosen],
                [request[i] for i in chosen],
                marker=mark,
                color=colour,
                zorder=4,
                label=label,
            )
    ax.set_ylim(0, top / unit * HEADROOM)
    ax.set_ylabel(f"wire bytes ({unit_name})")
    ax.legend(**LEGEND_OUTSIDE)


def _level_marks(
    ax: Axes,
    xs: Sequence[int],
    request: Sequence[float],
    levels: Sequence[int],
    style: tuple[str, str, str, int],
    name: Callable[[int], str],
) -> None:
    """Mark the requests a step preceded, each named where the step differs from the previous mark."""
    marked = [i for i, level in enumerate(levels) if level > 0]
    if not marked:
        return
    label, colour, mark, offset = style
    ax.scatter(
        [xs[i] for i in marked],
        [request[i] for i in marked],
        marker=mark,
        color=colour,
        zorder=3,
        label=label,
    )
    for previous, i in zip([None, *marked], marked, strict=False):
        if previous is not None and levels[previous] == levels[i]:
            continue
        ax.annotate(
            name(levels[i]),
            (xs[i], request[i]),
            textcoords="offset points",
            xytext=(0, offset),
            ha="center",
            fontsize="x-small",
            color=colour,
        )


def _limit_line(ax: Axes, xs: Sequence[int], values: Sequence[float], *, colour: str, label: str) -> None:
    """A limit in force per request, as a dashed step line spanning each request's whole band
    (so a one-request run still shows its limit)."""
    edges = [xs[0] - 0.5, *(x + 0.5 for x in xs)]
    ax.stairs(values, edges, color=colour, linestyle="--", linewidth=1, label=label, baseline=None)


def _tokens_tick(value: float, _position: object) -> str:
    return format_tokens(value)


def _token_panel(ax: Axes, run: pd.DataFrame, xs: Sequence[int], provider_window: int | None) -> float | None:
    """Estimated input tokens against the window(s), on their own linear axis; returns the assumed window.

    A window more than :data:`OFF_AXIS_RATIO` times the largest request would flatten the requests
    into the floor: the axis stops short of it and its legend entry says where it is.
    """
    from matplotlib.ticker import FuncFormatter

    requests = _values(run, "estimated_tokens")
    biggest_request = max((value for value in requests if not math.isnan(value)), default=0.0)
    reach = OFF_AXIS_RATIO * biggest_request if biggest_request > 0 else math.inf
    label, colour = TOKEN_SERIES["estimated_tokens"]
    ax.plot(xs, requests, color=colour, linewidth=1.2, marker=".", label=label)
    drawn = [value for value in requests if not math.isnan(value)]
    assumed = _values(run, "context_window")
    known = [value for value in assumed if not math.isnan(value)]
    if known:
        label, colour = TOKEN_SERIES["context_window"]
        _limit_line(ax, xs, assumed, colour=colour, label=_off_axis(label, max(known), reach))
        drawn += [value for value in known if value <= reach]
    if provider_window is not None:
        label, colour = PROVIDER_WINDOW_STYLE
        ax.axhline(
            provider_window,
            color=colour,
            linestyle=":",
            linewidth=1,
            label=_off_axis(label, provider_window, reach),
        )
        if provider_window <= reach:
            drawn.append(float(provider_window))
    ax.set_ylim(0, max(drawn, default=1.0) * HEADROOM)
    ax.yaxis.set_major_formatter(FuncFormatter(_tokens_tick))
    ax.set_ylabel("tokens")
    ax.legend(**LEGEND_OUTSIDE)
    return _first(assumed)


def _off_axis(label: str, value: float, reach: float) -> str:
    return label + ABOVE_AXIS.format(value=f"{value:,.0f}") if value > reach else label


def is_na(value: object) -> bool:
    import pandas as pd

    return bool(pd.isna(value))


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
    lines = max(str(text).count("\n") + 1 for text in cells["text"])
    cell_height = MATRIX_LINE_HEIGHT * lines + 2 * MATRIX_CELL_PADDING
    labels_height = LABEL_HEIGHT_PER_CHAR * max(len(str(p)) for p in policies)
    figure = new_figure(
        MATRIX_BASE_WIDTH + MATRIX_CELL_WIDTH * len(policies),
        MATRIX_BASE_HEIGHT + labels_height + cell_height * len(scenarios),
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
    ax.set_xticks(range(len(policies)), [str(p) for p in policies])
    rotate_tick_labels(ax)
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
    rotate_tick_labels(ax)
    ax.set_ylabel(f"summarizer USD per {TURNS_PER_UNIT} turns")
    ax.set_title("summarizer cost per policy")
    ax.margins(y=0.15)
    return figure


# -- episodes -------------------------------------------------------------------------------------
def rejected_per_episode(episodes_frame: pd.DataFrame) -> Figure:
    """Rejected requests per failure episode, a box per policy with its mean marked and annotated.

    The floor (1: the rejection that opens an episode; no policy can do better) is drawn as a line.
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
        EPISODE_FLOOR,
        color="tab:green",
        linestyle="--",
        linewidth=1,
        label=f"floor ({EPISODE_FLOOR}: the rejection that opens an episode)",
    )
    rotate_tick_labels(ax)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("rejected requests per episode")
    ax.set_title("rejected requests per failure episode")
    ax.legend(fontsize="x-small", loc="upper right")
    return figure
