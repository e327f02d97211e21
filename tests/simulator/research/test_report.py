"""Report figures and tables: what each figure draws, the comparison table, markdown, run directories."""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import math
import random
import re
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Annotation, Text
from matplotlib.transforms import Bbox

from ctxrecover.events import SessionStats
from simulator.research import run_files
from simulator.research.figures import (
    VERDICTS,
    budget_curve,
    outcome_cells,
    outcome_matrix,
    rejected_per_episode,
    summarizer_cost,
)
from simulator.research.metrics import RUN_COLUMNS, AttemptRecord, records_to_frame
from simulator.research.pareto import cost_vs_fact_survival, front_table
from simulator.research.report import (
    ATTEMPTS_CSV,
    COMPARISON_COLUMNS,
    FIGURE_FILES,
    MANIFEST_JSON,
    REPORT_DIR,
    SUMMARY_CSV,
    archived_by_source,
    comparison_table,
    failure_counts,
    load_run,
    markdown_table,
    policy_episodes,
    read_attempts,
    run_summaries,
    write_report,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
WINDOW_TOKENS = 1000  # drawn as 4000 chars
PROXY_CAP = 3000
LEARNED_CAP = 2100


def attempt(run_id: str, turn: int, attempt_no: int, outcome: str, **fields: object) -> AttemptRecord:
    policy, scenario, seed = run_id.split("/")
    base: dict[str, object] = {
        "run_id": run_id,
        "transcript": "demo",
        "transcript_sha256": "ab" * 32,
        "scenario": scenario,
        "policy": policy,
        "seed": int(seed),
        "turn": turn,
        "attempt": attempt_no,
        "outcome": outcome,
        "request_bytes": 1000 + 500 * turn,
        "history_weight": 900 + 500 * turn,
        "estimated_tokens": 250 + 125 * turn,
        "context_window": WINDOW_TOKENS,
        "proxy_cap": PROXY_CAP,
    }
    return AttemptRecord(**(base | fields))  # type: ignore[arg-type]


def waf_run(run_id: str, *, recovered: bool = True, summarizer_cost: float = 0.0) -> list[AttemptRecord]:
    """4 turns; turn 2 is rejected twice, then recovers at recovery level 2, truncated (or fails)."""
    records = [attempt(run_id, 0, 1, "ok"), attempt(run_id, 1, 1, "ok")]
    records += [
        attempt(run_id, 2, 1, "rejected:waf_rejection", failure_kind="waf_rejection", request_bytes=3200),
        attempt(
            run_id,
            2,
            2,
            "rejected:waf_rejection",
            failure_kind="waf_rejection",
            request_bytes=2500,
            recovery_level=1,
            learned_cap=LEARNED_CAP,
            chars_archived=700,
        ),
    ]
    if not recovered:
        return records + [
            attempt(
                run_id,
                2,
                3,
                "failed",
                failure_kind="waf_rejection",
                request_bytes=2400,
                learned_cap=LEARNED_CAP,
            ),
        ]
    return records + [
        attempt(
            run_id,
            2,
            3,
            "recovered@L2",
            request_bytes=1800,
            recovery_level=2,
            compaction_level=3,
            learned_cap=LEARNED_CAP,
            summarizer_calls=1,
            summarizer_cost_usd=summarizer_cost,
        ),
        attempt(run_id, 3, 1, "ok", request_bytes=2000, learned_cap=LEARNED_CAP),
    ]


def quiet_run(run_id: str) -> list[AttemptRecord]:
    """Two turns, no failure."""
    return [attempt(run_id, 0, 1, "ok"), attempt(run_id, 1, 1, "ok")]


@pytest.fixture
def attempts() -> pd.DataFrame:
    """Two policies × two scenarios; `default` recovers the WAF twice, `none` fails once."""
    return records_to_frame(
        waf_run("default/waf/0", summarizer_cost=0.02)
        + waf_run("default/waf/1", summarizer_cost=0.04)
        + quiet_run("default/quiet/0")
        + waf_run("none/waf/0", recovered=False)
        + quiet_run("none/quiet/0")
    )


@pytest.fixture
def summaries(attempts: pd.DataFrame) -> pd.DataFrame:
    survival = {
        "default/waf/0": 1.0,
        "default/waf/1": 0.5,
        "default/quiet/0": 1.0,
        "none/waf/0": 0.25,
        "none/quiet/0": 1.0,
    }
    manifest = {"runs": [{"run_id": run_id, "fact_survival": value} for run_id, value in survival.items()]}
    return run_summaries(attempts, manifest=manifest)


def texts(figure: Figure) -> list[str]:
    return [text.get_text() for text in figure.axes[0].texts]


def line_labels(figure: Figure) -> list[str]:
    return [line.get_label() for line in figure.axes[0].get_lines()]


def collection(figure: Figure, label: str) -> list[tuple[float, float]]:
    (found,) = [c for ax in figure.axes for c in ax.collections if c.get_label() == label]
    return [(float(x), float(y)) for x, y in found.get_offsets()]


# -- budget curve -------------------------------------------------------------------------------
def wire_and_tokens(figure: Figure) -> tuple[Axes, Axes]:
    wire, tokens = figure.axes
    return wire, tokens


def labels(ax: Axes) -> list[str]:
    return [artist.get_label() for artist in [*ax.get_lines(), *ax.patches]]


def test_budget_curve_draws_wire_bytes_and_caps_apart_from_tokens_and_window(attempts: pd.DataFrame) -> None:
    figure = budget_curve(attempts, run_id="default/waf/0")
    wire, tokens = wire_and_tokens(figure)
    assert isinstance(figure, Figure)
    assert figure.canvas.manager is None  # not registered with pyplot
    assert labels(wire) == ["request body", "proxy cap", "learned cap"]
    assert labels(tokens) == ["request (estimated input tokens)", "context window the session assumed"]
    request = wire.get_lines()[0]
    assert list(request.get_ydata()) == [b / 1024 for b in [1000, 1500, 3200, 2500, 1800, 2000]]
    cap, learned = wire.patches
    assert set(cap.get_data().values) == {PROXY_CAP / 1024}
    assert [v for v in learned.get_data().values if not math.isnan(v)] == [LEARNED_CAP / 1024] * 3
    assert list(tokens.get_lines()[0].get_ydata()) == [250, 375, 500, 500, 500, 625]
    assert set(tokens.patches[0].get_data().values) == {WINDOW_TOKENS}
    assert "default/waf/0" in figure.get_suptitle()


def test_budget_curve_names_binary_units_and_never_puts_chars_on_an_axis(attempts: pd.DataFrame) -> None:
    figure = budget_curve(attempts, run_id="default/waf/0")
    wire, tokens = wire_and_tokens(figure)
    assert (wire.get_ylabel(), tokens.get_ylabel()) == ("wire bytes (KiB)", "tokens")
    every_label = [*labels(wire), *labels(tokens), wire.get_ylabel(), tokens.get_ylabel()]
    assert not [label for label in every_label if "char" in label]
    big = records_to_frame([attempt("p/s/0", 0, 1, "ok", request_bytes=3 * 1024 * 1024, proxy_cap=None)])
    assert budget_curve(big).axes[0].get_ylabel() == "wire bytes (MiB)"


def test_budget_curve_title_names_the_window_and_the_cap(attempts: pd.DataFrame) -> None:
    title = budget_curve(attempts, run_id="default/waf/0").get_suptitle()
    assert "waf × default: window 1,000 tokens · proxy cap 2.9 KiB" in title
    title = budget_curve(attempts, run_id="default/waf/0", provider_window=800).get_suptitle()
    assert "window 800 tokens" in title  # the provider's window, when given, is the scenario's


def test_budget_curve_zooms_the_wire_axis_to_the_requests_and_caps_not_the_window() -> None:
    # A WAF at 125 KiB and requests of 100-130 KB under a 200k-token window (800 KB as chars).
    sizes = [100_000, 112_000, 124_000, 131_000, 104_000]
    frame = records_to_frame(
        [
            attempt(
                "p/waf/0",
                turn,
                1,
                "rejected:waf_rejection" if size > 128_000 else "ok",
                request_bytes=size,
                proxy_cap=128_000,
                context_window=200_000,
                estimated_tokens=size // 4,
            )
            for turn, size in enumerate(sizes)
        ]
    )
    wire, tokens = wire_and_tokens(budget_curve(frame))
    bottom, top = wire.get_ylim()
    assert bottom == 0 and top == pytest.approx(131_000 / 1024 * 1.12)
    assert (128_000 / 1024 - bottom) / (top - bottom) > 0.8  # the cap sits high on the panel
    assert tokens.get_ylim()[1] >= 200_000  # the window is on its own panel


def test_a_one_request_run_is_drawn_in_a_readable_band_with_its_cap_across() -> None:
    frame = records_to_frame(
        [
            attempt(
                "p/floor/0",
                0,
                1,
                "fail_fast_floor",
                request_bytes=146_500,
                proxy_cap=131_072,
                estimated_tokens=36_000,
                context_window=200_000,
            )
        ]
    )
    wire, tokens = wire_and_tokens(budget_curve(frame))
    assert tokens.get_xlim() == (0.5, 1.5) and wire.get_xlim() == (0.5, 1.5)
    (cap,) = wire.patches
    assert list(cap.get_data().edges) == [0.5, 1.5] and list(cap.get_data().values) == [128.0]
    bottom, top = wire.get_ylim()
    assert bottom < 128.0 < 146_500 / 1024 < top
    assert collection(wire.figure, "rejected") == [(1.0, 146_500 / 1024)]


RECOVERY_MARKS = "recovery (recovery level 1–3)"
COMPACTION_MARKS = "planned compaction (trim, summary, truncation)"


def test_budget_curve_marks_compactions_with_their_level_and_rejections(attempts: pd.DataFrame) -> None:
    figure = budget_curve(attempts, run_id="none/waf/0")
    assert collection(figure, RECOVERY_MARKS) == [(4, 2500 / 1024)]  # exact: KiB are powers of 2
    assert collection(figure, "rejected") == [(3, 3200 / 1024), (4, 2500 / 1024), (5, 2400 / 1024)]
    assert texts(figure) == ["recovery level 1"]


def test_budget_curve_names_recovery_levels_and_compaction_steps_in_words_on_two_scales(
    attempts: pd.DataFrame,
) -> None:
    # turn 2's retry followed recovery level 2 and then planned compaction's truncation: two marks, two names
    figure = budget_curve(attempts, run_id="default/waf/0")
    assert collection(figure, RECOVERY_MARKS) == [(4, 2500 / 1024), (5, 1800 / 1024)]
    assert collection(figure, COMPACTION_MARKS) == [(5, 1800 / 1024)]
    assert texts(figure) == ["recovery level 1", "recovery level 2", "truncation"]
    every_text = [t.get_text() for ax in figure.axes for t in [*ax.texts, *ax.get_legend().get_texts()]]
    assert not [text for text in every_text if re.search(r"\bL[123]\b", text)]


def test_budget_curve_shows_answers_cut_at_max_tokens() -> None:
    frame = records_to_frame(
        [
            attempt("p/trunc/0", 0, 1, "ok"),
            attempt("p/trunc/0", 1, 1, "truncated", failure_kind="output_truncated", max_tokens=4096),
            attempt("p/trunc/0", 1, 2, "truncated", failure_kind="output_truncated", max_tokens=8192),
            attempt("p/trunc/0", 1, 3, "ok", max_tokens=16384),
        ]
    )
    figure = budget_curve(frame)
    assert collection(figure, "answer cut at max_tokens") == [(2, 1500 / 1024), (3, 1500 / 1024)]


def test_budget_curve_ticks_the_first_request_of_each_turn(attempts: pd.DataFrame) -> None:
    axes = budget_curve(attempts, run_id="default/waf/0").axes[1]
    assert list(axes.get_xticks()) == [1, 2, 3, 6]
    assert [label.get_text() for label in axes.get_xticklabels()] == ["t0", "t1", "t2", "t3"]


def test_budget_curve_leaves_out_caps_the_run_does_not_have() -> None:
    frame = records_to_frame(
        [attempt("p/s/0", turn, 1, "ok", proxy_cap=None, context_window=None) for turn in range(3)]
    )
    figure = budget_curve(frame)
    wire, tokens = wire_and_tokens(figure)
    assert labels(wire) == ["request body"] and labels(tokens) == ["request (estimated input tokens)"]
    assert len(wire.collections) == 0 and tokens.get_yscale() == "linear"
    assert "no context window recorded · no proxy cap" in figure.get_suptitle()


def test_budget_curve_names_a_window_that_dwarfs_the_requests_above_a_linear_axis() -> None:
    frame = records_to_frame([attempt("p/s/0", 0, 1, "ok", context_window=200_000)])
    _wire, tokens = wire_and_tokens(budget_curve(frame, provider_window=1500))
    assert tokens.get_yscale() == "linear"
    (window,) = [line for line in tokens.get_lines() if line.get_label() == "provider's context window"]
    assert list(window.get_ydata()) == [1500, 1500]
    assert tokens.get_ylim()[1] == pytest.approx(1500 * 1.12)
    assert labels(tokens)[-1] == "context window the session assumed (above the axis: 200,000 tokens)"


TOKEN_TICK = re.compile(r"\d+(\.\d+)?[kM]?")


@pytest.mark.parametrize(
    ("requests", "window", "provider_window"),
    [
        ([250, 400], 1000, None),
        ([20_000, 60_000, 90_000], 128_000, 6000),  # a provider window far below the assumed one
        ([30_000, 40_000], 1_000_000, 1_000_000),  # a window that dwarfs every request
        ([150_000, 900_000, 1_400_000], 2_000_000, None),  # millions
    ],
)
def test_every_token_axis_is_linear_and_reads_one_format(
    requests: list[int], window: int, provider_window: int | None
) -> None:
    frame = records_to_frame(
        [
            attempt("p/s/0", turn, 1, "ok", estimated_tokens=tokens, context_window=window)
            for turn, tokens in enumerate(requests)
        ]
    )
    figure = budget_curve(frame, provider_window=provider_window)
    _wire, tokens = wire_and_tokens(figure)
    figure.draw_without_rendering()
    shown = [label.get_text() for label in tokens.get_yticklabels() if label.get_text()]
    assert tokens.get_yscale() == "linear" and len(shown) >= 3
    assert [text for text in shown if not TOKEN_TICK.fullmatch(text)] == []
    assert not tokens.yaxis.get_minor_ticks() or not any(
        label.get_text() for label in tokens.get_yticklabels(minor=True)
    )


def test_budget_curve_needs_a_run_id_when_the_frame_holds_several(attempts: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match=r"holds 5: pass run_id= one of \['default/waf/0'"):
        budget_curve(attempts)
    with pytest.raises(ValueError, match="run_id 'nope' is not in the frame"):
        budget_curve(attempts, run_id="nope")


@pytest.mark.parametrize(
    ("function", "dropped", "named"),
    [
        (budget_curve, ["learned_cap", "estimated_tokens"], "estimated_tokens, learned_cap"),
        (policy_episodes, ["identical_retry"], "identical_retry"),
    ],
)
def test_attempt_functions_name_the_missing_columns(
    attempts: pd.DataFrame, function, dropped: list[str], named: str
) -> None:
    with pytest.raises(ValueError, match=f"needs columns missing from the frame: {named}; pass the attempt"):
        function(attempts.drop(columns=dropped))


# -- summaries ----------------------------------------------------------------------------------
def test_run_summaries_take_retention_from_the_manifest_and_keep_swept_knobs(attempts: pd.DataFrame) -> None:
    frame = attempts.assign(keep_recent=[4 if p == "default" else 8 for p in attempts["policy"]])
    entry = {"run_id": "none/waf/0", "fact_survival": 0.25, "outcome": "failed", "chars_lost": 0}
    table = run_summaries(frame, manifest={"runs": [entry]}).set_index("run_id")
    assert list(table.index) == list(dict.fromkeys(attempts["run_id"]))
    assert table.loc["none/waf/0", "fact_survival"] == 0.25
    assert pd.isna(table.loc["default/waf/0", "fact_survival"])
    assert table.loc["none/waf/0", "outcome"] == "failed"
    assert table.loc["none/waf/0", "failures_by_kind"] == "waf_rejection=1"
    assert list(table["keep_recent"]) == [4, 4, 4, 8, 8]
    assert table.loc["default/waf/0", "rejected_requests"] == 2


def test_policy_episodes_carry_policy_and_scenario(attempts: pd.DataFrame) -> None:
    found = policy_episodes(attempts)
    assert list(found[["policy", "scenario", "rejected_requests", "recovered"]].itertuples(index=False)) == [
        ("default", "waf", 2, True),
        ("default", "waf", 2, True),
        ("none", "waf", 3, False),
    ]


def test_comparison_table_rates_per_policy_and_scenario(summaries: pd.DataFrame) -> None:
    table = comparison_table(summaries)
    assert list(table.columns) == list(COMPARISON_COLUMNS)
    assert list(table.index.names) == ["policy", "scenario"]
    assert list(table.index) == [("default", "waf"), ("default", "quiet"), ("none", "waf"), ("none", "quiet")]
    waf = table.loc[("default", "waf")]
    assert (waf["runs"], waf["episodes"]) == (2, 2)
    assert (waf["recovered_pct"], waf["rejected_per_episode"]) == (100.0, 2.0)
    assert waf["summarizer_usd_per_100_turns"] == pytest.approx(0.06 / 8 * 100)
    assert waf["fact_survival_pct"] == pytest.approx(75.0)
    failed = table.loc[("none", "waf")]
    assert (failed["episodes"], failed["recovered_pct"], failed["rejected_per_episode"]) == (1, 0.0, 3.0)
    quiet = table.loc[("none", "quiet")]
    assert math.isnan(quiet["recovered_pct"]) and math.isnan(quiet["rejected_per_episode"])
    assert (table["chars_lost"] == 0).all()


def test_failure_counts_count_each_truncated_answer_besides_the_episodes() -> None:
    frame = records_to_frame(
        [
            attempt("p/trunc/0", 0, 1, "truncated", failure_kind="output_truncated"),
            attempt("p/trunc/0", 0, 2, "truncated", failure_kind="output_truncated"),
            attempt("p/trunc/0", 0, 3, "ok"),
            attempt("p/trunc/0", 1, 1, "rejected:context_overflow", failure_kind="context_overflow"),
            attempt("p/trunc/0", 1, 2, "recovered@L1"),
        ]
    )
    assert failure_counts(frame) == {"context_overflow": 1, "output_truncated": 2}
    summary = run_summaries(frame)
    assert summary.loc[0, "failures_by_kind"] == "context_overflow=1, output_truncated=2"


def test_archived_by_source_reads_a_breakdown_when_the_stats_have_one() -> None:
    @dataclasses.dataclass
    class WithMapping:
        chars_archived: int = 30
        chars_archived_by_source: dict[str, int] = dataclasses.field(
            default_factory=lambda: {"planned": 10, "microcompact": 20}
        )

    @dataclasses.dataclass
    class WithFields:
        chars_archived: int = 30
        chars_archived_recovery: int = 25
        chars_archived_dedup: int = 5

    assert archived_by_source(WithMapping()) == {"planned": 10, "microcompact": 20}
    assert archived_by_source(WithFields()) == {"recovery": 25, "dedup": 5}
    assert archived_by_source(SessionStats(chars_archived=30)) == {}  # no breakdown: nothing made up


def test_comparison_table_without_fact_survival_reads_na(attempts: pd.DataFrame) -> None:
    table = comparison_table(run_summaries(attempts).drop(columns=["fact_survival"]))
    assert table["fact_survival_pct"].isna().all()


def judged(summaries: pd.DataFrame, cells: dict[str, tuple[str, str, int]]) -> pd.DataFrame:
    """``summaries`` with (outcome, expected_outcome, chars_lost) per run id."""
    frame = summaries.set_index("run_id")
    for run_id, (outcome, expected, lost) in cells.items():
        frame.loc[run_id, ["outcome", "expected_outcome", "chars_lost"]] = [outcome, expected, lost]
    return frame.reset_index()


def test_outcome_cells_tell_intended_failures_regressions_and_losses_apart(summaries: pd.DataFrame) -> None:
    frame = judged(
        summaries,
        {
            "default/waf/0": ("recovered", "recovered", 0),
            "default/waf/1": ("recovered", "recovered", 0),
            "default/quiet/0": ("fail_fast_floor", "fail_fast_floor", 0),  # intended: a floor fail-fast
            "none/waf/0": ("failed", "recovered", 0),  # a regression
            "none/quiet/0": ("ok", "ok", 812_253),  # the outcome matches, but chars were dropped
        },
    )
    cells = outcome_cells(frame)
    assert cells["verdict"].to_dict() == {
        ("default", "waf"): "met",
        ("default", "quiet"): "intended",
        ("none", "waf"): "missed",
        ("none", "quiet"): "lost",
    }
    assert cells.loc[("default", "waf"), "text"] == "✓ recovered×2\nrec 2/2 · rej 4\n0 chars lost"
    assert cells.loc[("default", "quiet"), "text"] == "✓ fail_fast_floor\nrej 0\n0 chars lost"
    assert cells.loc[("none", "waf"), "text"] == "✗ failed\nexpected recovered\nrec 0/1 · rej 3\n0 chars lost"
    assert cells.loc[("none", "quiet"), "text"] == "✗ ok\nrej 0\n812.3 K chars lost"
    assert len(set(cells["colour"])) == 4  # intended ≠ met ≠ missed ≠ lost
    assert cells.loc[("none", "quiet"), "colour"] != VERDICTS["met"][1]  # a loss is never green


def test_outcome_cells_without_expectations_are_unknown_never_green(attempts: pd.DataFrame) -> None:
    cells = outcome_cells(run_summaries(attempts))
    assert set(cells["verdict"]) == {"unknown"}
    assert cells.loc[("default", "waf"), "text"].startswith("? ")


def test_outcome_matrix_paints_each_cell_with_its_verdict(summaries: pd.DataFrame) -> None:
    frame = judged(
        summaries,
        {
            "default/waf/0": ("recovered", "recovered", 0),
            "default/waf/1": ("recovered", "recovered", 0),
            "default/quiet/0": ("no_compaction", "no_compaction", 0),
            "none/waf/0": ("failed", "recovered", 0),
            "none/quiet/0": ("ok", "ok", 250_000),
        },
    )
    figure = outcome_matrix(frame)
    axes = figure.axes[0]
    cells = outcome_cells(frame)
    # rows: scenarios, columns: policies; the image holds each cell's verdict index into VERDICTS
    assert [t.get_text() for t in axes.get_yticklabels()] == ["waf", "quiet"]
    assert [t.get_text() for t in axes.get_xticklabels()] == ["default", "none"]
    grid = axes.images[0].get_array()
    order = list(VERDICTS)
    for (row, scenario), (column, policy) in itertools.product(
        enumerate(["waf", "quiet"]), enumerate(["default", "none"])
    ):
        assert order[int(grid[row, column])] == cells.loc[(policy, scenario), "verdict"]
    assert texts(figure) == [cells.loc[(p, s), "text"] for s in ("waf", "quiet") for p in ("default", "none")]
    legend = [text.get_text() for text in axes.get_legend().get_texts()]
    assert legend == [VERDICTS[v][0] for v in ("lost", "missed", "met", "intended")]


def test_summarizer_cost_draws_usd_per_100_turns_per_policy(summaries: pd.DataFrame) -> None:
    figure = summarizer_cost(summaries)
    axes = figure.axes[0]
    assert [bar.get_height() for bar in axes.patches] == pytest.approx([0.06 / 10 * 100, 0.0])
    assert [t.get_text() for t in axes.get_xticklabels()] == ["default", "none"]
    assert texts(figure) == ["$0.6000", "$0.0000"]
    assert axes.get_ylabel() == "summarizer USD per 100 turns"


def test_rejected_per_episode_marks_means_and_the_floor(attempts: pd.DataFrame) -> None:
    figure = rejected_per_episode(policy_episodes(attempts))
    axes = figure.axes[0]
    assert collection(figure, "mean") == [(1, 2.0), (2, 3.0)]
    assert texts(figure) == ["2.00", "3.00"]
    floor = "floor (1: the rejection that opens an episode)"
    (limit,) = [line for line in axes.get_lines() if line.get_label() == floor]
    assert list(limit.get_ydata()) == [1, 1]
    assert not [text for text in map(str, [*line_labels(figure), *texts(figure)]) if "physical" in text]
    assert [t.get_text() for t in axes.get_xticklabels()] == ["default", "none"]


def test_cost_vs_fact_survival_highlights_the_pareto_front() -> None:
    # policy → (prompt-size factor, fact survival): default beats dear (same survival, dearer) and worse.
    policies = {"cheap": (0.5, 0.5), "default": (1.0, 0.8), "dear": (2.0, 0.8), "worse": (1.5, 0.4)}
    frame = records_to_frame(
        dataclasses.replace(record, estimated_tokens=int(record.estimated_tokens * factor))
        for name, (factor, _survival) in policies.items()
        for record in waf_run(f"{name}/waf/0")
    )
    table = run_summaries(frame)
    table["fact_survival"] = [policies[name][1] for name in table["policy"]]
    figure = cost_vs_fact_survival(table)
    cost = comparison_table(table)["cache_adjusted_usd_per_100_turns"].droplevel("scenario")
    assert list(cost.rank()) == [1, 2, 4, 3]
    assert collection(figure, "Pareto front") == [(cost["cheap"], 50.0), (cost["default"], 80.0)]
    assert collection(figure, "dominated") == [(cost["dear"], 80.0), (cost["worse"], 40.0)]
    assert texts(figure) == ["1", "2", "3", "4"]  # numbered points, named in the key
    assert key(figure) == ["1  cheap", "2  default", "3  dear", "4  worse"]


def key(figure: Figure) -> list[str]:
    (legend,) = figure.legends
    return [text.get_text() for text in legend.get_texts()]


def pareto_frame(points: dict[str, tuple[float, float, float]]) -> pd.DataFrame:
    """One summary row per policy: (cache-adjusted cost, fact survival, share of 4 episodes recovered)."""
    return pd.DataFrame(
        [
            {
                "policy": name,
                "scenario": "s",
                "turns": 100,
                "recovered_episodes": round(4 * recovered),
                "failed_episodes": 4 - round(4 * recovered),
                "rejected_requests": 4,
                "summarizer_cost_usd": 0.0,
                "cache_adjusted_cost_usd": cost,
                "chars_lost": 0,
                "fact_survival": survival,
            }
            for name, (cost, survival, recovered) in points.items()
        ]
    )


def test_a_policy_that_recovers_less_than_the_default_is_never_on_the_front() -> None:
    # no-recovery is the cheapest and keeps as many facts: it gives up instead of recovering
    frame = pareto_frame(
        {"default": (0.40, 1.0, 1.0), "no-recovery": (0.10, 1.0, 0.0), "lean": (0.30, 0.9, 1.0)}
    )
    table = front_table(frame)
    assert table[["eligible", "on_front"]].to_dict("index") == {
        "default": {"eligible": True, "on_front": True},
        "no-recovery": {"eligible": False, "on_front": False},
        "lean": {"eligible": True, "on_front": True},
    }
    figure = cost_vs_fact_survival(frame)
    assert collection(figure, "recovers fewer episodes than default") == [(0.10, 100.0)]
    assert collection(figure, "Pareto front") == [(0.40, 100.0), (0.30, 90.0)]
    # without the default, the best recovery rate present is the bar
    assert not front_table(frame[frame["policy"] != "default"])["eligible"]["no-recovery"]


def text_box(annotation: Annotation, renderer: object) -> Bbox:
    """Where an annotation's text is drawn, its leader line left out."""
    annotation.update_positions(renderer)
    return Text.get_window_extent(annotation, renderer)


def assert_labels_readable(figure: Figure, numbers: int) -> None:
    """Every number is on the plot once, no label overlaps another or a point, all inside the axes."""
    axes = figure.axes[0]
    renderer = figure.canvas.get_renderer()
    boxes = [(t.get_text(), text_box(t, renderer)) for t in axes.texts]
    shown = sorted(int(number) for text, _box in boxes for number in text.split(","))
    assert shown == list(range(1, numbers + 1))
    overlapping = [
        (a, b) for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2) if box_a.overlaps(box_b)
    ]
    assert overlapping == []
    frame = axes.bbox
    outside = [text for text, box in boxes if not (frame.x0 <= box.x0 and box.x1 <= frame.x1)]
    outside += [text for text, box in boxes if not (frame.y0 <= box.y0 and box.y1 <= frame.y1)]
    assert outside == []
    points = [tuple(axes.transData.transform(xy)) for c in axes.collections for xy in c.get_offsets()]
    covering = [text for text, box in boxes for x, y in points if box.contains(x, y)]
    assert covering == []
    assert not [text for text in key(figure) if "not marked" in text]
    positions = {text: box.bounds for text, box in boxes}
    figure.savefig(io.BytesIO(), format="png")  # drawing again keeps the positions the check measured
    for text in axes.texts:
        assert text_box(text, renderer).bounds == pytest.approx(positions[text.get_text()])


def test_cost_vs_fact_survival_labels_never_overlap_even_for_coinciding_policies() -> None:
    # Peer baselines often land on the very same point (same cost, same survival), or next to it.
    points = {
        "default": (0.40, 1.0, 1.0),
        "cap-bisection": (0.40, 1.0, 1.0),
        "no-recovery": (0.10, 0.63, 0.0),
        "cline-drop-half": (0.31, 0.42, 1.0),
        "cline-drop-three-quarters": (0.30, 0.39, 1.0),
        "langchain-keep-last-n": (0.30, 0.35, 1.0),
        "observation-masking": (0.11, 0.61, 1.0),
        "summarize-everything": (0.32, 0.46, 1.0),
    }
    figure = cost_vs_fact_survival(pareto_frame(points))
    assert "1,2" in texts(figure)  # default and cap-bisection share their spot and their label
    assert_labels_readable(figure, len(points))
    assert key(figure) == [f"{n}  {name}" for n, name in enumerate(points, start=1)]


def test_cost_vs_fact_survival_labels_a_random_search_heap_without_overlaps() -> None:
    # `sweep --random N`: long policy labels, points piled in a corner of the plot
    rng = random.Random(6)
    points = {
        f"default[budget_ratio={rng.uniform(0.3, 0.9):.4f},keep_recent={rng.randint(2, 20)}]": (
            0.30 + rng.uniform(0, 0.02),
            95 / 100 + rng.uniform(0, 0.03),
            1.0,
        )
        for _ in range(24)
    }
    figure = cost_vs_fact_survival(pareto_frame(points))
    assert_labels_readable(figure, len(points))
    assert all(len(text) <= 5 for text in texts(figure))  # numbers, not the long labels


def test_cost_vs_fact_survival_needs_fact_survival_values(attempts: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match="missing from the frame: fact_survival"):
        cost_vs_fact_survival(run_summaries(attempts).drop(columns=["fact_survival"]))
    with pytest.raises(ValueError, match="no policy has both a cost and a fact_survival value"):
        cost_vs_fact_survival(run_summaries(attempts))


@pytest.mark.parametrize(
    "function", [outcome_matrix, summarizer_cost, comparison_table, cost_vs_fact_survival]
)
def test_summary_functions_name_the_missing_columns(summaries: pd.DataFrame, function) -> None:
    with pytest.raises(ValueError, match=r"needs columns missing from the frame: turns, chars_lost; pass"):
        function(summaries.drop(columns=["chars_lost", "turns"]))


@pytest.mark.parametrize("function", [outcome_matrix, summarizer_cost, comparison_table])
def test_summary_functions_refuse_an_empty_frame(summaries: pd.DataFrame, function) -> None:
    with pytest.raises(ValueError, match="got an empty frame"):
        function(summaries.iloc[0:0])


def test_rejected_per_episode_names_the_missing_columns() -> None:
    with pytest.raises(ValueError, match="missing from the frame: policy; pass episodes with their policy"):
        rejected_per_episode(pd.DataFrame({"rejected_requests": [1]}))


# -- markdown -----------------------------------------------------------------------------------
def test_markdown_table_is_exact_with_a_named_index_na_and_escapes() -> None:
    frame = pd.DataFrame(
        {"policy": ["a|b", "c"], "recovered_pct": [100.0, math.nan], "chars_lost": [0, 12]},
    ).set_index("policy")
    assert markdown_table(frame) == (
        "| policy | recovered_pct | chars_lost |\n"
        "| ------ | ------------: | ---------: |\n"
        "| a\\|b   |           100 |          0 |\n"
        "| c      |             — |         12 |"
    )


def test_markdown_table_leaves_out_a_default_index_and_takes_a_float_format() -> None:
    frame = pd.DataFrame({"x": [2 / 3], "note": ["two\nlines"]})
    assert markdown_table(frame, float_format="{:.2f}") == (
        "|    x | note      |\n| ---: | --------- |\n| 0.67 | two lines |"
    )


# -- run directories ----------------------------------------------------------------------------
def write_run_dir(directory: Path, attempts: pd.DataFrame, manifest: object, *, timing: bool = True) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    frame = attempts if timing else attempts.drop(columns=["elapsed_ms"])
    frame.to_csv(directory / ATTEMPTS_CSV, index=False, lineterminator="\n")  # as cli_output writes it
    (directory / MANIFEST_JSON).write_text(json.dumps(manifest), encoding="utf-8")
    return directory


MANIFEST = {
    "code_version": {"package": "0.1.0", "git": "abc1234"},
    "runs": [{"run_id": "default/waf/0", "fact_survival": 1.0, "outcome": "recovered", "chars_lost": 0}],
}


def test_run_directory_file_names_match_the_cli() -> None:
    assert (ATTEMPTS_CSV, MANIFEST_JSON) == (run_files.ATTEMPTS_CSV, run_files.MANIFEST_JSON)


@pytest.mark.parametrize("timing", [True, False])
def test_read_attempts_round_trips_the_typed_frame(
    tmp_path: Path, attempts: pd.DataFrame, timing: bool
) -> None:
    notices = pd.Series(["⚠ a\nb"] + [""] * (len(attempts) - 1), dtype="string")
    frame = attempts.assign(policy=attempts["policy"].replace({"none": "None"}), notices=notices)
    back = read_attempts(write_run_dir(tmp_path, frame, MANIFEST, timing=timing) / ATTEMPTS_CSV)
    expected = frame if timing else frame.drop(columns=["elapsed_ms"])
    pd.testing.assert_frame_equal(back, expected)
    assert "None" in set(back["policy"])  # a policy named None is not NA


def test_read_attempts_names_the_file_and_the_missing_columns(tmp_path: Path, attempts: pd.DataFrame) -> None:
    path = tmp_path / ATTEMPTS_CSV
    attempts.drop(columns=["outcome", "turn"]).to_csv(path, index=False)
    with pytest.raises(ValueError, match=rf"{ATTEMPTS_CSV}: the attempt table lacks columns turn, outcome"):
        read_attempts(path)


def test_write_report_writes_figures_and_tables(tmp_path: Path, attempts: pd.DataFrame) -> None:
    run_dir = write_run_dir(tmp_path / "run", attempts, MANIFEST)
    written = write_report(run_dir)
    report = run_dir / REPORT_DIR
    names = sorted(path.name for path in written)
    assert all(path.parent == report and path.stat().st_size > 0 for path in written)
    assert names == sorted(
        [
            f"budget-{run.split('/')[1]}--demo--{run.split('/')[0]}--s{run.split('/')[2]}.png"
            for run in dict.fromkeys(attempts["run_id"])
        ]
        + [f"{stem}.png" for stem in FIGURE_FILES.values()]
        + [f"{table}.{ext}" for table in ("comparison", "runs", "episodes") for ext in ("csv", "md")]
    )
    assert all(path.read_bytes().startswith(PNG_SIGNATURE) for path in written if path.suffix == ".png")
    comparison = pd.read_csv(report / "comparison.csv")
    assert list(comparison.columns) == ["policy", "scenario", *COMPARISON_COLUMNS]
    assert (report / "comparison.md").read_text(encoding="utf-8").startswith("| policy  | scenario | runs |")
    assert len(pd.read_csv(report / "runs.csv")) == 5 and len(pd.read_csv(report / "episodes.csv")) == 3


@pytest.mark.parametrize(("policy", "formats"), [("none", ("png",)), ("quiet", ("png", "svg", "pdf"))])
def test_write_report_is_byte_identical_across_calls(
    tmp_path: Path, attempts: pd.DataFrame, policy: str, formats: tuple[str, ...]
) -> None:
    frame = attempts[attempts["policy"] == policy]
    if frame.empty:
        frame = records_to_frame(quiet_run(f"{policy}/s/0"))
    run_dir = write_run_dir(tmp_path / "run", frame, MANIFEST)
    first = {p.name: p.read_bytes() for p in write_report(run_dir, formats=formats)}
    second = {p.name: p.read_bytes() for p in write_report(run_dir, formats=formats, out_dir=tmp_path / "b")}
    assert first == second
    assert {name.rsplit(".", 1)[1] for name in first} == {*formats, "csv", "md"}


def test_write_report_skips_figures_the_data_does_not_support(tmp_path: Path) -> None:
    frame = records_to_frame(quiet_run("p/s/0"))
    written = write_report(write_run_dir(tmp_path, frame, {"runs": []}))
    figures = sorted(p.name for p in written if p.suffix == ".png")
    assert figures == ["budget-s--demo--p--s0.png", "summarizer-cost.png"]  # no episodes, no fact survival


def test_write_report_prefers_the_summary_csv(tmp_path: Path, attempts: pd.DataFrame) -> None:
    attempts = attempts[attempts["policy"] == "none"]
    run_dir = write_run_dir(tmp_path, attempts, {})
    summaries = run_summaries(attempts).assign(fact_survival=0.5, policy="renamed")
    summaries.to_csv(run_dir / SUMMARY_CSV, index=False)
    assert list(load_run(run_dir).summaries["policy"].unique()) == ["renamed"]
    write_report(run_dir)
    comparison = pd.read_csv(run_dir / REPORT_DIR / "comparison.csv")
    assert set(comparison["policy"]) == {"renamed"} and set(comparison["fact_survival_pct"]) == {50.0}


def test_write_report_checks_the_summary_csv_columns(tmp_path: Path, attempts: pd.DataFrame) -> None:
    run_dir = write_run_dir(tmp_path, attempts, {})
    run_summaries(attempts).drop(columns=["turns"]).to_csv(run_dir / SUMMARY_CSV, index=False)
    with pytest.raises(ValueError, match=rf"{SUMMARY_CSV}: the run summary table lacks columns turns"):
        write_report(run_dir)


@pytest.mark.parametrize(
    ("missing", "error", "message"),
    [
        (ATTEMPTS_CSV, FileNotFoundError, rf"{ATTEMPTS_CSV}: no attempt table"),
        (MANIFEST_JSON, FileNotFoundError, rf"{MANIFEST_JSON}: no run manifest"),
    ],
)
def test_write_report_names_the_missing_file(
    tmp_path: Path, attempts: pd.DataFrame, missing: str, error: type[Exception], message: str
) -> None:
    run_dir = write_run_dir(tmp_path, attempts, MANIFEST)
    (run_dir / missing).unlink()
    with pytest.raises(error, match=message):
        write_report(run_dir)
    assert not (run_dir / REPORT_DIR).exists()


def test_write_report_rejects_a_bad_manifest_a_missing_directory_and_unknown_formats(
    tmp_path: Path, attempts: pd.DataFrame
) -> None:
    run_dir = write_run_dir(tmp_path, attempts, MANIFEST)
    (run_dir / MANIFEST_JSON).write_text("{\n  oops\n}", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{MANIFEST_JSON}:2: the manifest is not valid JSON"):
        write_report(run_dir)
    (run_dir / MANIFEST_JSON).write_text("[]", encoding="utf-8")
    with pytest.raises(ValueError, match="the manifest must be a JSON object, got list"):
        write_report(run_dir)
    with pytest.raises(FileNotFoundError, match="no such run directory"):
        write_report(tmp_path / "absent")
    with pytest.raises(ValueError, match=r"formats must be among png, svg, pdf; got \['jpg'\]"):
        write_report(run_dir, formats=("jpg",))


def test_write_report_reads_a_real_ctxsim_run_directory(tmp_path: Path) -> None:
    from simulator.cli import main

    run_dir = tmp_path / "run"
    main(
        [
            "run",
            "--scenarios",
            "anthropic-200k-overflow",
            "--no-timing",
            "--figures",
            "--out",
            str(run_dir),
        ]
    )
    data = load_run(run_dir)
    assert set(RUN_COLUMNS) - set(data.attempts.columns) == {"elapsed_ms"}
    written = write_report(run_dir)
    names = {path.name for path in written}
    # one policy: no Pareto "front" of a single dot; every other figure
    assert {f"{FIGURE_FILES[name]}.png" for name in FIGURE_FILES if name != "cost_vs_fact_survival"} <= names
    assert f"{FIGURE_FILES['cost_vs_fact_survival']}.png" not in names
    assert data.summaries["fact_survival"].notna().all()
    # `run --figures` and `report` name a run's budget curve by one scheme
    quick_look = sorted(path.name for path in run_dir.glob("budget-*.png"))
    assert quick_look == sorted(name for name in names if name.startswith("budget-"))
    assert quick_look == ["budget-anthropic-200k-overflow--swe-agent-nofc-quiet-rotation--default--s0.png"]


# -- labels and cells stay where they belong ------------------------------------------------------
LONG_POLICIES = [  # a random search's labels, and peer baselines
    "default[budget_ratio=0.6123,keep_recent=7,emergency_keep_messages=12]",
    "observation-masking",
    "summarize-everything",
    "cline-drop-three-quarters",
]


def many_policies(summaries: pd.DataFrame) -> pd.DataFrame:
    frames = [
        summaries.assign(policy=[f"{name}{'' if p == 'default' else '-x'}" for p in summaries["policy"]])
        for name in LONG_POLICIES
    ]
    return pd.concat(frames, ignore_index=True)


@pytest.mark.parametrize("draw", ["summarizer_cost", "outcome_matrix", "rejected_per_episode"])
def test_rotated_category_labels_end_at_their_ticks(summaries: pd.DataFrame, draw: str) -> None:
    frame = many_policies(summaries)
    figure = (
        summarizer_cost(frame)
        if draw == "summarizer_cost"
        else outcome_matrix(frame)
        if draw == "outcome_matrix"
        else rejected_per_episode(policy_episodes(records_to_frame(waf_run(f"{LONG_POLICIES[3]}/waf/0"))))
    )
    figure.draw_without_rendering()
    axes = figure.axes[0]
    renderer = figure.canvas.get_renderer()
    for tick, label in zip(axes.get_xticks(), axes.get_xticklabels(), strict=True):
        box = label.get_window_extent(renderer)
        tick_x = axes.transData.transform((tick, 0))[0]
        # a label that ends at its tick reaches past it by at most its font's height (its rotated corner)
        assert tick_x - 1 <= box.x1 <= tick_x + label.get_fontsize() * figure.dpi / 72, label.get_text()


def test_outcome_matrix_cell_text_stays_inside_its_cell(summaries: pd.DataFrame) -> None:
    frame = judged(
        summaries,
        {
            "default/waf/0": ("recovered", "recovered", 0),
            "default/waf/1": ("failed", "recovered", 0),  # a missed cell: the longest text, four lines
            "default/quiet/0": ("no_compaction", "no_compaction", 0),
            "none/waf/0": ("failed", "recovered", 1200),
            "none/quiet/0": ("ok", "ok", 0),
        },
    )
    frame = many_policies(frame)
    figure = outcome_matrix(frame)
    figure.draw_without_rendering()
    axes = figure.axes[0]
    renderer = figure.canvas.get_renderer()
    assert max(t.get_text().count("\n") + 1 for t in axes.texts) == 4
    for text in axes.texts:
        column, row = text.get_position()
        (x0, y0), (x1, y1) = axes.transData.transform([(column - 0.5, row + 0.5), (column + 0.5, row - 0.5)])
        box = text.get_window_extent(renderer)
        assert x0 <= box.x0 and box.x1 <= x1 and y0 <= box.y0 and box.y1 <= y1, text.get_text()


def test_a_sweep_report_draws_each_knob_against_each_objective_with_its_interval_across_seeds(
    tmp_path: Path,
) -> None:
    from simulator.research.objectives import OBJECTIVES
    from simulator.research.response import knob_response_figure
    from simulator.research.sweep import sweep

    sweep(
        grid={"keep_recent": [2, 8]},
        scenarios=["openai-128k-overflow"],
        seeds=[0, 1],
        workers=1,
        figures=True,
        progress=False,
        out_dir=tmp_path,
    )
    response = pd.read_csv(tmp_path / REPORT_DIR / "knob-response.csv")
    assert sorted(set(response["value"])) == [2, 8] and set(response["seeds"]) == {2}
    assert set(response["objective"]) == set(OBJECTIVES)
    for objective in OBJECTIVES:
        assert (tmp_path / REPORT_DIR / f"knob-response-{objective.replace('_', '-')}.png").is_file()
    # the figure draws the table: one point per value, error bars from low to high
    rows = response[response["objective"] == "rejected_per_run"]
    figure = knob_response_figure(rows, "rejected_per_run")
    (bars,) = [c for c in figure.axes[0].containers]
    points = bars.lines[0]
    assert list(points.get_xdata()) == [2.0, 8.0]
    assert list(points.get_ydata()) == pytest.approx(list(rows["mean"]))
