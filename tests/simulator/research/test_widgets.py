"""The replay dashboard: controls → Policy → replay → budget curve and summary, through interactive()."""

from __future__ import annotations

from typing import Any

import pytest
from ipywidgets import interactive
from matplotlib.figure import Figure

from ctxrecover.policy import DEFAULT_POLICY, Policy
from simulator.proxy.scenario import Scenario
from simulator.replay import ReplayResult, replay
from simulator.research.widgets import (
    CONTROL_NAMES,
    DEFAULT_SCENARIO,
    POLICY_SLIDERS,
    SCENARIO_SUMMARIZER,
    SUMMARIZER_CHOICES,
    WORKLOAD_TRANSCRIPT,
    figure_png,
    replay_controls,
    replay_dashboard,
    run_replay,
    summary_frame,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
KNOB_CONTROLS = (*POLICY_SLIDERS, "payload_cap")  # every control that sets a Policy field
# A small, fast scenario: chat-50k overflows a 128k-token window shrunk by the scenario.
SCENARIO = "openai-128k-overflow"
KNOBS = {
    "budget_ratio": 0.6,
    "keep_recent": 8,
    "emergency_keep_messages": 10,
    "microcompact_truncate_turns": 2,
    "microcompact_summarize_turns": 4,
    "payload_cap": 0,
}


class ReplaySpy:
    """Records what each replay was asked for, then runs the real replay."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, Scenario, Policy]] = []

    def __call__(self, transcript: Any, scenario: Scenario, **options: Any) -> ReplayResult:
        self.calls.append((transcript, scenario, options["policy"]))
        return replay(transcript, scenario, **options)


@pytest.fixture
def spy() -> ReplaySpy:
    return ReplaySpy()


def controls_for(scenario: str = SCENARIO, **kwargs: Any) -> dict[str, Any]:
    return replay_controls(scenario=scenario, **kwargs)


# -- run_replay: the pure function behind the dashboard -------------------------------------------


def test_run_replay_returns_the_budget_curve_and_a_summary_of_the_run(spy: ReplaySpy) -> None:
    figure, summary = run_replay(
        SCENARIO, WORKLOAD_TRANSCRIPT, **KNOBS, summarizer=SCENARIO_SUMMARIZER, replay_fn=spy
    )

    assert isinstance(figure, Figure)
    assert "budget curve" in figure.get_suptitle()
    assert (summary["scenario"], summary["transcript"]) == (SCENARIO, "chat-50k")
    assert summary["outcome"] == summary["expected_outcome"] == "recovered"
    assert summary["chars_lost"] == 0
    assert {name: summary[name] for name in KNOB_CONTROLS} == KNOBS
    ((transcript, _scenario, _policy),) = spy.calls
    assert transcript is None  # the scenario's own workload


def test_run_replay_applies_every_knob_to_the_policy(spy: ReplaySpy) -> None:
    knobs = {
        "budget_ratio": 0.35,
        "keep_recent": 5,
        "emergency_keep_messages": 6,
        "microcompact_truncate_turns": 3,
        "microcompact_summarize_turns": 7,
        "payload_cap": 65536,
    }

    _, summary = run_replay(SCENARIO, "chat-50k", **knobs, summarizer="extractive", replay_fn=spy)

    ((transcript, _scenario, policy),) = spy.calls
    assert transcript == "chat-50k"
    assert {name: getattr(policy, name) for name in knobs} == knobs
    assert {name: summary[name] for name in knobs} == knobs
    assert policy.replace(**KNOBS) == DEFAULT_POLICY


def test_the_summarizer_dropdown_overrides_the_scenarios_summarizer(spy: ReplaySpy) -> None:
    _, summary = run_replay(SCENARIO, WORKLOAD_TRANSCRIPT, **KNOBS, summarizer="refusing", replay_fn=spy)
    run_replay("summarizer-refuses", "coding-120k", **KNOBS, summarizer=SCENARIO_SUMMARIZER, replay_fn=spy)

    assert [scenario.summarizer.behaviour for _, scenario, _ in spy.calls] == ["refusing", "refusing"]
    assert summary["summarizer"] == "refusing"


def test_run_replay_rejects_an_unknown_summarizer_with_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown summarizer 'chatty'; use one of .*too-short"):
        run_replay(SCENARIO, WORKLOAD_TRANSCRIPT, **KNOBS, summarizer="chatty")


# -- the controls ---------------------------------------------------------------------------------


def test_controls_start_at_the_policy_knobs_and_act_on_release() -> None:
    policy = DEFAULT_POLICY.replace(budget_ratio=0.45, keep_recent=12, payload_cap=131072)

    controls = replay_controls(scenario=SCENARIO, policy=policy)

    assert list(controls) == list(CONTROL_NAMES)
    assert {name: controls[name].value for name in KNOB_CONTROLS} == {
        name: getattr(policy, name) for name in KNOB_CONTROLS
    }
    assert all(controls[name].continuous_update is False for name in KNOB_CONTROLS)
    assert controls["scenario"].value == SCENARIO
    assert controls["transcript"].options[0] == WORKLOAD_TRANSCRIPT
    assert "chat-50k" in controls["transcript"].options
    assert tuple(controls["summarizer"].options) == SUMMARIZER_CHOICES


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scenario": "no-such-waf"}, "unknown scenario 'no-such-waf'; bundled: .*corporate-128k-waf"),
        ({"transcript": "nope"}, "unknown transcript 'nope'; use one of .*chat-50k"),
        ({"summarizer": "chatty"}, "unknown summarizer 'chatty'"),
    ],
)
def test_controls_reject_unknown_choices_naming_the_valid_ones(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replay_controls(**kwargs)


# -- where the dashboard opens --------------------------------------------------------------------
# For each slider, a value other than the opening one (the default policy's).
OTHER_VALUES = {
    "budget_ratio": 0.3,
    "keep_recent": 2,
    "emergency_keep_messages": 4,
    "microcompact_truncate_turns": 3,
    # sooner than the default: with its token-dense logs counted as such, the opening run truncates so
    # often that summarizing at 6 or 10 turns changes nothing; at 3 it does
    "microcompact_summarize_turns": 3,
    "payload_cap": 16384,
}


def what_happened(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary without the echo of the knobs the replay ran with."""
    return {key: value for key, value in summary.items() if key not in KNOB_CONTROLS}


def test_the_dashboard_opens_where_every_slider_of_the_planned_compaction_changes_the_result() -> None:
    # emergency_keep_messages is what the ladder's second rung keeps: since the window is learned from
    # the overflow's evidence (issue 26), every bundled overflow recovers at the first rung, so that one
    # slider changes nothing on any bundled scenario — a gateway that refuses the first retry too brings it in
    controls = replay_controls()
    assert controls["scenario"].value == DEFAULT_SCENARIO
    opening = {name: controls[name].value for name in CONTROL_NAMES}
    assert set(OTHER_VALUES) == set(KNOB_CONTROLS)

    _, first = run_replay(**opening)
    assert first["outcome"] == first["expected_outcome"] and first["chars_lost"] == 0
    unchanged = []
    for name, other in OTHER_VALUES.items():
        assert other != opening[name]
        _, moved = run_replay(**(opening | {name: other}))
        assert moved[name] == other and moved["chars_lost"] == 0
        if what_happened(moved) == what_happened(first):
            unchanged.append(name)
    assert unchanged == ["emergency_keep_messages"]


def test_a_float_slider_value_is_rounded_to_its_step(spy: ReplaySpy) -> None:
    sent_by_a_browser = 0.1 + 4 * 0.05  # 0.30000000000000004

    _, summary = run_replay(
        SCENARIO,
        WORKLOAD_TRANSCRIPT,
        **(KNOBS | {"budget_ratio": sent_by_a_browser}),
        summarizer=SCENARIO_SUMMARIZER,
        replay_fn=spy,
    )

    assert spy.calls[0][2].budget_ratio == 0.3 and summary["budget_ratio"] == 0.3
    shown = summary_frame(summary)["value"]
    assert shown["budget_ratio"] == "0.3" and "0000000" not in "".join(shown)


def test_summarize_after_never_goes_below_preview_after() -> None:
    controls = replay_controls(scenario=SCENARIO)

    controls["microcompact_truncate_turns"].value = 6

    assert controls["microcompact_summarize_turns"].min == 6
    assert controls["microcompact_summarize_turns"].value == 6  # was 4: lifted, never inverted


# -- the dashboard: interactive(run_fn, **controls) -----------------------------------------------


def test_constructing_the_dashboard_runs_one_replay_and_holds_its_result(spy: ReplaySpy) -> None:
    dashboard = replay_dashboard(controls_for(), replay_fn=spy)

    assert isinstance(dashboard, interactive)
    assert len(spy.calls) == 1
    figure, summary = dashboard.result
    assert isinstance(figure, Figure)
    assert summary["outcome"] == "recovered" and summary["budget_ratio"] == 0.6


def test_changing_a_slider_reruns_the_replay_with_the_new_policy(spy: ReplaySpy) -> None:
    controls = controls_for()
    dashboard = replay_dashboard(controls, replay_fn=spy)
    before = dashboard.result[1]

    controls["payload_cap"].value = 16384

    assert len(spy.calls) == 2
    assert spy.calls[-1][2].payload_cap == 16384
    after = dashboard.result[1]
    assert after["payload_cap"] == 16384 and before["payload_cap"] == 0
    # A configured cap: pre-flight compaction keeps every request small, so the overflow never happens.
    assert (before["outcome"], before["rejected_requests"]) == ("recovered", 1)
    assert (after["outcome"], after["rejected_requests"]) == ("ok", 0)
    assert after["wire_bytes"] < before["wire_bytes"]
    assert after["chars_lost"] == 0


def test_changing_the_budget_ratio_changes_when_the_session_compacts(spy: ReplaySpy) -> None:
    controls = controls_for()
    dashboard = replay_dashboard(controls, replay_fn=spy)
    before = dashboard.result[1]

    controls["budget_ratio"].value = 0.3

    (_, summary) = dashboard.result
    assert spy.calls[-1][2].budget_ratio == 0.3 and summary["budget_ratio"] == 0.3
    assert summary["wire_bytes"] < before["wire_bytes"]  # a smaller budget: smaller requests
    assert summary["chars_lost"] == 0


def test_changing_the_scenario_and_transcript_dropdowns_replays_them(spy: ReplaySpy) -> None:
    controls = controls_for()
    dashboard = replay_dashboard(controls, replay_fn=spy)

    controls["transcript"].value = "coding-120k"
    controls["scenario"].value = "corporate-128k-waf"

    transcript, scenario, _ = spy.calls[-1]
    assert (transcript, scenario.name) == ("coding-120k", "corporate-128k-waf")
    summary = dashboard.result[1]
    assert (summary["scenario"], summary["transcript"]) == ("corporate-128k-waf", "coding-120k")
    assert summary["learned_cap"] is not None  # the WAF taught the session a cap


def test_the_dashboard_starts_from_its_base_policy() -> None:
    base = DEFAULT_POLICY.replace(keep_recent=6, max_recovery_attempts=1)
    spy = ReplaySpy()

    replay_dashboard(replay_controls(scenario=SCENARIO, policy=base), base_policy=base, replay_fn=spy)

    (_, _, policy) = spy.calls[0]
    assert (policy.keep_recent, policy.max_recovery_attempts) == (6, 1)


def test_the_dashboard_needs_every_control() -> None:
    controls = controls_for()
    del controls["payload_cap"]

    with pytest.raises(ValueError, match="needs the controls payload_cap"):
        replay_dashboard(controls)


# -- display helpers ------------------------------------------------------------------------------


def test_figure_png_is_a_png_and_the_same_figure_gives_the_same_bytes() -> None:
    figure, _ = run_replay(SCENARIO, WORKLOAD_TRANSCRIPT, **KNOBS, summarizer=SCENARIO_SUMMARIZER)

    png = figure_png(figure)

    assert png.startswith(PNG_SIGNATURE)
    assert figure_png(figure) == png


def test_summary_frame_has_one_row_per_key_and_a_dash_for_none() -> None:
    frame = summary_frame({"outcome": "recovered", "learned_cap": None, "attempts": 16})

    assert list(frame.index) == ["outcome", "learned_cap", "attempts"]
    assert list(frame["value"]) == ["recovered", "—", "16"]


def test_controls_of_your_own_that_invert_an_ordered_pair_say_why_instead_of_replaying(
    spy: ReplaySpy, capsys: pytest.CaptureFixture[str]
) -> None:
    from ipywidgets import IntSlider

    controls = controls_for()
    controls["microcompact_summarize_turns"] = IntSlider(value=4, min=1, max=20)  # not linked to the other
    dashboard = replay_dashboard(controls, replay_fn=spy)
    capsys.readouterr()

    controls["microcompact_truncate_turns"].value = 9  # past summarize-after (4)

    assert len(spy.calls) == 1 and dashboard.result is None
    # outside a kernel the output area's display() prints
    assert "⚠ no replay: Policy.microcompact_truncate_turns (9) must be <=" in capsys.readouterr().out
    controls["microcompact_summarize_turns"].value = 12  # the pair is ordered again: replays
    assert len(spy.calls) == 2 and dashboard.result is not None


def test_the_payload_cap_slider_reads_kilobytes_on_a_log_scale() -> None:
    slider = replay_controls(scenario=SCENARIO)["payload_cap"]
    labels = [label for label, _value in slider.options]
    sizes = [value for _label, value in slider.options]
    assert (labels[0], sizes[0], slider.value) == ("none", 0, 0)
    assert labels[1:4] == ["8 KB", "11 KB", "16 KB"] and labels[-1] == "2,048 KB"
    assert sizes[-1] == 2 * 1024 * 1024 and all(label.endswith(" KB") for label in labels[1:])
    ratios = [b / a for a, b in zip(sizes[1:], sizes[2:], strict=False)]
    assert all(1.35 < ratio < 1.5 for ratio in ratios)  # every step the same ratio, about √2
    slider.label = "64 KB"
    assert slider.value == 64 * 1024
    # a policy's own cap, off the scale, is kept as an extra stop
    odd = replay_controls(scenario=SCENARIO, policy=DEFAULT_POLICY.replace(payload_cap=100_000))[
        "payload_cap"
    ]
    assert odd.value == 100_000 and odd.label == "100,000 B"
