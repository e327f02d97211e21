"""The ctxrecover fault-injection simulator: replay transcripts through a real Session behind mock
gateways and providers, and study the results (sweeps, the tuner, metrics, figures, widgets).

The public API in one namespace (notebooks and users import from here; the wings are the internals)::

    from simulator import load_scenario, replay, budget_curve

    result = replay(None, load_scenario("corporate-128k-waf"))
    figure = budget_curve(result.frame, provider_window=result.scenario.provider.context_window)

Every name is imported on first use (:data:`EXPORTS` says from where), so ``import simulator`` stays
cheap: pandas, matplotlib, optuna and ipywidgets load only with the functions that need them.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulator.cli.output import run_line
    from simulator.providers.mock import MockProvider, Reply
    from simulator.providers.service import MockService
    from simulator.proxy.fault_specs import ScenarioError, parse_fault_spec
    from simulator.proxy.faults import FAULT_KINDS
    from simulator.proxy.inprocess import mount_inprocess
    from simulator.proxy.loopback import LoopbackServer
    from simulator.proxy.middlebox import Middlebox
    from simulator.proxy.scenario import (
        Expectation,
        Scenario,
        list_scenarios,
        load_scenario,
        scenario_from_document,
    )
    from simulator.recorder import ReplayEvent, proxy_cap
    from simulator.replay import TRANSPORTS, ReplayResult, expectation_problems, observed, replay
    from simulator.research.baselines import BASELINES, Strategy
    from simulator.research.figures import (
        budget_curve,
        outcome_cells,
        outcome_matrix,
        rejected_per_episode,
        summarizer_cost,
    )
    from simulator.research.grid import Uniform
    from simulator.research.levels import compaction_step, outcome_words, recovery_step
    from simulator.research.metrics import (
        RUN_COLUMNS,
        AttemptRecord,
        episodes,
        records_to_frame,
        summarize_run,
    )
    from simulator.research.objectives import OBJECTIVES, knob_response, objective_values
    from simulator.research.pareto import cost_vs_fact_survival, front_table
    from simulator.research.report import (
        archived_by_source,
        comparison_table,
        failure_counts,
        load_run,
        markdown_table,
        policy_episodes,
        run_summaries,
        write_report,
    )
    from simulator.research.response import knob_response_figure
    from simulator.research.space import SEARCH_SPACE, Knob
    from simulator.research.sweep import sweep
    from simulator.research.tune import TuneResult, tune
    from simulator.research.tune_files import front_figure
    from simulator.research.widgets import (
        PAYLOAD_CAPS,
        POLICY_SLIDERS,
        figure_png,
        replay_controls,
        replay_dashboard,
        run_replay,
        summary_frame,
    )
    from simulator.summarizers import make_summarizer
    from simulator.transcripts.generator import generate_session
    from simulator.transcripts.loaders import (
        Transcript,
        TranscriptError,
        load_transcript,
        transcript_from_messages,
    )
    from simulator.workloads import bundled_transcripts, load_named_transcript, workload_transcript

__all__ = [
    "AttemptRecord",
    "BASELINES",
    "Expectation",
    "FAULT_KINDS",
    "Knob",
    "LoopbackServer",
    "Middlebox",
    "MockProvider",
    "MockService",
    "OBJECTIVES",
    "PAYLOAD_CAPS",
    "POLICY_SLIDERS",
    "RUN_COLUMNS",
    "ReplayEvent",
    "ReplayResult",
    "Reply",
    "SEARCH_SPACE",
    "Scenario",
    "ScenarioError",
    "Strategy",
    "TRANSPORTS",
    "Transcript",
    "TranscriptError",
    "TuneResult",
    "Uniform",
    "archived_by_source",
    "budget_curve",
    "bundled_transcripts",
    "compaction_step",
    "comparison_table",
    "cost_vs_fact_survival",
    "episodes",
    "expectation_problems",
    "failure_counts",
    "figure_png",
    "front_figure",
    "front_table",
    "generate_session",
    "knob_response",
    "knob_response_figure",
    "list_scenarios",
    "load_named_transcript",
    "load_run",
    "load_scenario",
    "load_transcript",
    "make_summarizer",
    "markdown_table",
    "mount_inprocess",
    "objective_values",
    "observed",
    "outcome_cells",
    "outcome_matrix",
    "outcome_words",
    "parse_fault_spec",
    "policy_episodes",
    "proxy_cap",
    "records_to_frame",
    "recovery_step",
    "rejected_per_episode",
    "replay",
    "replay_controls",
    "replay_dashboard",
    "run_line",
    "run_replay",
    "run_summaries",
    "scenario_from_document",
    "summarize_run",
    "summarizer_cost",
    "summary_frame",
    "sweep",
    "transcript_from_messages",
    "tune",
    "workload_transcript",
    "write_report",
]

#: Public name → the module that defines it.
EXPORTS: Mapping[str, str] = MappingProxyType(
    {
        "ReplayResult": "simulator.replay",
        "TRANSPORTS": "simulator.replay",
        "expectation_problems": "simulator.replay",
        "observed": "simulator.replay",
        "replay": "simulator.replay",
        "ReplayEvent": "simulator.recorder",
        "proxy_cap": "simulator.recorder",
        "Expectation": "simulator.proxy.scenario",
        "Scenario": "simulator.proxy.scenario",
        "list_scenarios": "simulator.proxy.scenario",
        "load_scenario": "simulator.proxy.scenario",
        "scenario_from_document": "simulator.proxy.scenario",
        "ScenarioError": "simulator.proxy.fault_specs",
        "parse_fault_spec": "simulator.proxy.fault_specs",
        "FAULT_KINDS": "simulator.proxy.faults",
        "Middlebox": "simulator.proxy.middlebox",
        "LoopbackServer": "simulator.proxy.loopback",
        "mount_inprocess": "simulator.proxy.inprocess",
        "MockProvider": "simulator.providers.mock",
        "Reply": "simulator.providers.mock",
        "MockService": "simulator.providers.service",
        "Transcript": "simulator.transcripts.loaders",
        "TranscriptError": "simulator.transcripts.loaders",
        "load_transcript": "simulator.transcripts.loaders",
        "transcript_from_messages": "simulator.transcripts.loaders",
        "generate_session": "simulator.transcripts.generator",
        "bundled_transcripts": "simulator.workloads",
        "load_named_transcript": "simulator.workloads",
        "workload_transcript": "simulator.workloads",
        "make_summarizer": "simulator.summarizers",
        "sweep": "simulator.research.sweep",
        "Uniform": "simulator.research.grid",
        "TuneResult": "simulator.research.tune",
        "tune": "simulator.research.tune",
        "front_figure": "simulator.research.tune_files",
        "Knob": "simulator.research.space",
        "SEARCH_SPACE": "simulator.research.space",
        "BASELINES": "simulator.research.baselines",
        "Strategy": "simulator.research.baselines",
        "AttemptRecord": "simulator.research.metrics",
        "RUN_COLUMNS": "simulator.research.metrics",
        "episodes": "simulator.research.metrics",
        "records_to_frame": "simulator.research.metrics",
        "summarize_run": "simulator.research.metrics",
        "archived_by_source": "simulator.research.report",
        "comparison_table": "simulator.research.report",
        "failure_counts": "simulator.research.report",
        "load_run": "simulator.research.report",
        "markdown_table": "simulator.research.report",
        "policy_episodes": "simulator.research.report",
        "run_summaries": "simulator.research.report",
        "write_report": "simulator.research.report",
        "budget_curve": "simulator.research.figures",
        "outcome_cells": "simulator.research.figures",
        "outcome_matrix": "simulator.research.figures",
        "rejected_per_episode": "simulator.research.figures",
        "summarizer_cost": "simulator.research.figures",
        "cost_vs_fact_survival": "simulator.research.pareto",
        "front_table": "simulator.research.pareto",
        "OBJECTIVES": "simulator.research.objectives",
        "knob_response": "simulator.research.objectives",
        "objective_values": "simulator.research.objectives",
        "knob_response_figure": "simulator.research.response",
        "compaction_step": "simulator.research.levels",
        "outcome_words": "simulator.research.levels",
        "recovery_step": "simulator.research.levels",
        "PAYLOAD_CAPS": "simulator.research.widgets",
        "POLICY_SLIDERS": "simulator.research.widgets",
        "figure_png": "simulator.research.widgets",
        "replay_controls": "simulator.research.widgets",
        "replay_dashboard": "simulator.research.widgets",
        "run_replay": "simulator.research.widgets",
        "summary_frame": "simulator.research.widgets",
        "run_line": "simulator.cli.output",
    }
)


def __getattr__(name: str) -> Any:
    module = EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'simulator' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Namespace(ModuleType):
    """The package, keeping a public function whose submodule has its name: importing the module
    ``simulator.replay`` (``sys.modules`` still holds it) leaves ``simulator.replay`` the function."""

    def __setattr__(self, name: str, value: object) -> None:
        if isinstance(value, ModuleType) and EXPORTS.get(name) == f"{__name__}.{name}":
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Namespace
