"""Live dashboards on top of :mod:`simulator.research.report`: sliders for the policy knobs re-run a replay.

:func:`replay_dashboard` is ``ipywidgets.interactive(...)`` over :func:`run_replay`, a
pure function from control values to ``(budget-curve Figure, summary dict)``; the
controls come from :func:`replay_controls`. Changing a control re-runs the replay
(sliders act on release, not while dragging), draws the budget curve
(:func:`simulator.research.report.budget_curve`) and a small summary table; the dashboard's
``.result`` holds the last ``(Figure, summary)``. Everything but the display runs
without a kernel, so the wiring is testable in plain pytest::

    controls = replay_controls(scenario="corporate-128k-waf")
    dashboard = replay_dashboard(controls)        # runs the first replay
    controls["budget_ratio"].value = 0.4          # re-runs it with the new Policy
    figure, summary = dashboard.result
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ctxrecover.errors import ConfigError
from ctxrecover.policy import DEFAULT_POLICY, Policy
from simulator.proxy.scenario import Scenario, list_scenarios, load_scenario
from simulator.replay import ReplayResult, replay
from simulator.research.figures import budget_curve
from simulator.research.levels import compaction_step, recovery_step
from simulator.workloads import bundled_transcripts

if TYPE_CHECKING:
    import pandas as pd
    from ipywidgets import ValueWidget, interactive
    from matplotlib.figure import Figure

__all__ = [
    "CONTROL_NAMES",
    "PAYLOAD_CAPS",
    "POLICY_SLIDERS",
    "SCENARIO_SUMMARIZER",
    "SUMMARIZER_CHOICES",
    "WORKLOAD_TRANSCRIPT",
    "figure_png",
    "replay_controls",
    "replay_dashboard",
    "run_replay",
    "summary_frame",
]

# The dashboard opens on a scenario where every slider of the planned compaction moves the result
# (tests/simulator/research/test_widgets.py checks it): the overflow teaches the window, and the ladder's
# first rung recovers it.
DEFAULT_SCENARIO = "anthropic-200k-overflow"
# Transcript dropdown entry for "the scenario's own [workload] transcript".
WORKLOAD_TRANSCRIPT = "(scenario workload)"
# Summarizer dropdown entry for "the summarizer the scenario names" (no override).
SCENARIO_SUMMARIZER = "(scenario)"
SUMMARIZER_CHOICES: tuple[str, ...] = (
    SCENARIO_SUMMARIZER,
    "extractive",
    "refusing",
    "too-short",
    "failing",
    "none",
)
# The Policy knobs the sliders set: name → (min, max, step, label); float sliders for float knobs.
POLICY_SLIDERS: Mapping[str, tuple[float, float, float, str]] = MappingProxyType(
    {
        "budget_ratio": (0.10, 1.00, 0.05, "budget ratio"),
        "keep_recent": (1, 40, 1, "keep recent"),
        "emergency_keep_messages": (2, 40, 1, "recovery 2 keeps"),
        "microcompact_truncate_turns": (1, 20, 1, "preview after"),
        "microcompact_summarize_turns": (1, 20, 1, "summarize after"),
    }
)
# The payload-cap slider: none, then 8 KB to 2 MB in steps of √2 (a log scale: each step the same
# ratio, so 16 KB and 1 MB are equally easy to reach), shown in KB; the value is in bytes.
PAYLOAD_CAP_KB: tuple[int, ...] = (
    8,
    11,
    16,
    23,
    32,
    45,
    64,
    91,
    128,
    181,
    256,
    362,
    512,
    724,
    1024,
    1448,
    2048,
)
NO_CAP_LABEL = "none"
PAYLOAD_CAPS: tuple[tuple[str, int], ...] = (
    (NO_CAP_LABEL, 0),
    *((f"{kb:,} KB", kb * 1024) for kb in PAYLOAD_CAP_KB),
)
PAYLOAD_CAP_LABEL = "payload cap"
# Argument order of run_replay's controls (the dashboard shows them in this order).
CONTROL_NAMES: tuple[str, ...] = ("scenario", "transcript", *POLICY_SLIDERS, "payload_cap", "summarizer")
DASHBOARD_POLICY_NAME = "dashboard"
INVALID_POLICY_PREFIX = "⚠ no replay: "
FIGURE_DPI = 100
FLOAT_SHOWN = "{:.4g}"  # floats in the summary table: 0.3, not 0.30000000000000004
PNG_METADATA = MappingProxyType({"Software": None})  # no version stamp: same figure, same bytes
SLIDER_WIDTH = "460px"
DESCRIPTION_WIDTH = "110px"
SUMMARY_COLUMN = "value"


def _on_step(name: str, value: float) -> float:
    """A float slider's value rounded to its step's decimals (a browser sends 0.1 + 4 × 0.05 as
    0.30000000000000004)."""
    decimals = len(repr(POLICY_SLIDERS[name][2]).partition(".")[2])
    return round(value, decimals)


def _with_summarizer(scenario: Scenario, behaviour: str) -> Scenario:
    """``scenario`` with its summarizer behaviour replaced (its summarizer window kept)."""
    spec = dataclasses.replace(scenario.summarizer, behaviour=behaviour)
    return dataclasses.replace(scenario, summarizer=spec)


def run_replay(
    scenario: str,
    transcript: str,
    budget_ratio: float,
    keep_recent: int,
    emergency_keep_messages: int,
    microcompact_truncate_turns: int,
    microcompact_summarize_turns: int,
    payload_cap: int,
    summarizer: str,
    *,
    base_policy: Policy = DEFAULT_POLICY,
    seed: int | None = None,
    replay_fn: Callable[..., ReplayResult] = replay,
) -> tuple[Figure, dict[str, Any]]:
    """One replay with the control values; returns its budget curve and its summary.

    ``transcript`` is a bundled name or :data:`WORKLOAD_TRANSCRIPT`; ``summarizer`` a
    behaviour that overrides the scenario's, or :data:`SCENARIO_SUMMARIZER`. The knobs
    are applied to ``base_policy`` (``payload_cap`` in bytes, 0 = none) and the
    scenario's ``[policy]`` section still applies on top. The summary first echoes the
    knobs of the policy the replay ran with, then says what happened.
    """
    if summarizer not in SUMMARIZER_CHOICES:
        raise ValueError(f"unknown summarizer {summarizer!r}; use one of {', '.join(SUMMARIZER_CHOICES)}")
    spec = load_scenario(scenario)
    if summarizer != SCENARIO_SUMMARIZER:
        spec = _with_summarizer(spec, summarizer)
    policy = base_policy.replace(
        budget_ratio=_on_step("budget_ratio", budget_ratio),
        keep_recent=keep_recent,
        emergency_keep_messages=emergency_keep_messages,
        microcompact_truncate_turns=microcompact_truncate_turns,
        microcompact_summarize_turns=microcompact_summarize_turns,
        payload_cap=payload_cap,
    )
    chosen = None if transcript == WORKLOAD_TRANSCRIPT else transcript
    result = replay_fn(chosen, spec, policy=policy, seed=seed, policy_name=DASHBOARD_POLICY_NAME)
    return budget_curve(result.frame, provider_window=spec.provider.context_window), _summary(result)


def _summary(result: ReplayResult) -> dict[str, Any]:
    summary = result.summary
    learned = [r.learned_cap for r in result.records if r.learned_cap is not None]
    return {
        "scenario": result.scenario.name,
        "transcript": result.transcript.name,
        "summarizer": result.scenario.summarizer.behaviour,
        **{name: getattr(result.policy, name) for name in POLICY_SLIDERS},
        "payload_cap": result.policy.payload_cap,
        "outcome": result.outcome,
        "expected_outcome": result.scenario.expect.outcome,
        "turns": f"{result.turns_completed}/{result.turns}",
        "attempts": summary["attempts"],
        "rejected_requests": summary["rejected_requests"],
        "recovered_episodes": summary["recovered_episodes"],
        "failed_episodes": summary["failed_episodes"],
        "deepest_compaction": _named(result.max_compaction_level, compaction_step),
        "highest_recovery": _named(result.max_recovery_level, recovery_step),
        "learned_cap": learned[-1] if learned else None,
        "summarizer_calls": summary["summarizer_calls"],
        "summarizer_cost_usd": summary["summarizer_cost_usd"],
        "wire_bytes": summary["wire_bytes"],
        "chars_lost": result.chars_lost,
        "fact_survival": result.fact_survival,
    }


def _named(level: int | None, name: Callable[[int], str]) -> str | None:
    return None if level is None else name(level)


def _cap_text(cap: int) -> str:
    labels = {size: label for label, size in PAYLOAD_CAPS}
    return labels.get(cap, NO_CAP_LABEL if cap == 0 else f"{cap:,} B")


def summary_frame(summary: Mapping[str, Any]) -> pd.DataFrame:
    """A :func:`run_replay` summary as a one-column table (one row per key), for display."""
    import pandas as pd

    values = [_shown(value) for value in summary.values()]
    return pd.DataFrame({SUMMARY_COLUMN: values}, index=pd.Index(list(summary), name="key"))


def _shown(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return FLOAT_SHOWN.format(value)
    return str(value)


def figure_png(figure: Figure) -> bytes:
    """``figure`` as PNG bytes (Agg, fixed dpi, no version stamp): shows in any notebook frontend."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=FIGURE_DPI, metadata=dict(PNG_METADATA))
    return buffer.getvalue()


def replay_controls(
    *,
    scenario: str = DEFAULT_SCENARIO,
    transcript: str = WORKLOAD_TRANSCRIPT,
    policy: Policy = DEFAULT_POLICY,
    summarizer: str = SCENARIO_SUMMARIZER,
) -> dict[str, ValueWidget]:
    """The dashboard's controls, keyed by :data:`CONTROL_NAMES`, starting at ``policy``'s knobs.

    Dropdowns: scenario (bundled), transcript (the scenario's workload or a bundled
    fixture, smallest first), summarizer (:data:`SUMMARIZER_CHOICES`); sliders: the
    :data:`POLICY_SLIDERS` knobs and the payload cap (:data:`PAYLOAD_CAPS`: none or 8 KB–2 MB on a
    log scale, shown in KB, valued in bytes), acting on release.
    """
    import ipywidgets as widgets

    style = {"description_width": DESCRIPTION_WIDTH}
    layout = {"width": SLIDER_WIDTH}
    scenarios = list_scenarios()
    if scenario not in scenarios:
        raise ValueError(f"unknown scenario {scenario!r}; bundled: {', '.join(scenarios)}")
    transcripts = [WORKLOAD_TRANSCRIPT, *bundled_transcripts()]
    if transcript not in transcripts:
        raise ValueError(f"unknown transcript {transcript!r}; use one of {', '.join(transcripts)}")
    if summarizer not in SUMMARIZER_CHOICES:
        raise ValueError(f"unknown summarizer {summarizer!r}; use one of {', '.join(SUMMARIZER_CHOICES)}")
    controls: dict[str, ValueWidget] = {
        "scenario": widgets.Dropdown(
            options=scenarios, value=scenario, description="scenario", style=style, layout=layout
        ),
        "transcript": widgets.Dropdown(
            options=transcripts, value=transcript, description="transcript", style=style, layout=layout
        ),
    }
    for name, (low, high, step, label) in POLICY_SLIDERS.items():
        value = getattr(policy, name)
        slider = widgets.FloatSlider if isinstance(value, float) else widgets.IntSlider
        controls[name] = slider(
            value=value,
            min=low,
            max=high,
            step=step,
            description=label,
            continuous_update=False,
            style=style,
            layout=layout,
        )
    cap = policy.payload_cap
    options = (
        PAYLOAD_CAPS
        if cap in {size for _label, size in PAYLOAD_CAPS}
        else (*PAYLOAD_CAPS, (_cap_text(cap), cap))
    )
    controls["payload_cap"] = widgets.SelectionSlider(
        options=list(options),
        value=cap,
        description=PAYLOAD_CAP_LABEL,
        continuous_update=False,
        style=style,
        layout=layout,
    )
    # Old tool results are previewed before they are cleared: the "summarize after" slider never goes
    # below "preview after" (Policy rejects the inverted pair).
    widgets.dlink(
        (controls["microcompact_truncate_turns"], "value"), (controls["microcompact_summarize_turns"], "min")
    )
    controls["summarizer"] = widgets.Dropdown(
        options=SUMMARIZER_CHOICES, value=summarizer, description="summarizer", style=style, layout=layout
    )
    return controls


def replay_dashboard(
    controls: Mapping[str, ValueWidget] | None = None,
    *,
    base_policy: Policy = DEFAULT_POLICY,
    seed: int | None = None,
    replay_fn: Callable[..., ReplayResult] = replay,
) -> interactive:
    """An ``ipywidgets.interactive`` dashboard: each control change re-runs :func:`run_replay`.

    ``controls`` default to :func:`replay_controls` (pass your own to start elsewhere
    or to drive them from code). The output area shows the budget curve as a PNG and
    the summary table; ``.result`` is the last ``(Figure, summary)``, or None when the
    controls make no valid policy together (the output area then says why). Display it
    as the last expression of a cell.
    """
    from IPython.display import Image, display
    from ipywidgets import interactive

    controls = dict(replay_controls(policy=base_policy) if controls is None else controls)
    missing = [name for name in CONTROL_NAMES if name not in controls]
    if missing:
        raise ValueError(f"replay_dashboard needs the controls {', '.join(missing)} (see replay_controls)")

    def show(**values: Any) -> tuple[Figure, dict[str, Any]] | None:
        try:
            figure, summary = run_replay(**values, base_policy=base_policy, seed=seed, replay_fn=replay_fn)
        except ConfigError as exc:  # sliders that make no valid policy together (an inverted pair)
            display(f"{INVALID_POLICY_PREFIX}{exc}")
            return None
        display(Image(data=figure_png(figure)), summary_frame(summary))
        return figure, summary

    return interactive(show, **{name: controls[name] for name in CONTROL_NAMES})
