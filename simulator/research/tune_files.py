"""What ``ctxsim tune`` writes: the trials, the Pareto front (table and figure), the chosen policy as an
env file and as TOML, each knob's importance, and a sweep-shaped run directory for ``ctxsim report``.

In that run directory the default's runs are labelled ``default`` and each trial's ``trial-N`` (the
run cache keeps the knob labels), so the report compares them by name.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ctxrecover.policy import DEFAULT_POLICY, ENV_VARIABLES
from simulator.research.objectives import CONSTRAINTS, OBJECTIVES
from simulator.research.plotting import new_figure
from simulator.research.report import SAVE_METADATA, markdown_table, write_report
from simulator.research.report import TUNE_DEFAULT as DEFAULT_LABEL
from simulator.research.report import TUNE_TRIAL as TRIAL_LABEL
from simulator.research.sweep import RunSpec, Transcripts, knob_column, rows_frame, write_outputs

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = [
    "FRONT_STYLES",
    "TUNE_FILES",
    "env_file",
    "front_figure",
    "policy_toml",
    "trial_label",
    "write_tune_files",
]

TUNE_FILES: Mapping[str, str] = MappingProxyType(
    {
        "journal": "study.journal",
        "trials": "trials",
        "front": "front",
        "importance": "importance",
        "env": "policy.env",
        "toml": "policy.toml",
    }
)

ENV_OF_FIELD: Mapping[str, str] = {field: variable for variable, field in ENV_VARIABLES.items()}
NO_VARIABLE = "# {name} = {value}: no CHATCLI_ variable; load policy.toml with --policy"
FRONT_STYLES: Mapping[str, tuple[str, str, str, float]] = {  # kind → (label, colour, marker, size)
    "dominated": ("feasible, dominated", "tab:gray", "o", 18.0),
    "front": ("Pareto front", "tab:green", "o", 30.0),
    "infeasible": ("infeasible (chars lost or recovers less)", "tab:red", "x", 22.0),
    "default": ("default", "black", "*", 90.0),
    "chosen": ("chosen", "tab:purple", "D", 45.0),
}
PANEL_SIZE = 3.2  # inches per panel of the front figure


def trial_label(row: Mapping[str, Any]) -> str:
    """How the run directory names a trial's runs: ``default``, or ``trial-N``."""
    return DEFAULT_LABEL if row["role"] == DEFAULT_LABEL else TRIAL_LABEL.format(number=int(row["number"]))


def _value(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def env_file(knobs: Mapping[str, Any], header: str) -> str:
    """``CHATCLI_*=value`` lines for the knobs that have a variable; a comment for the others."""
    lines = [f"# {header}"]
    for name, value in knobs.items():
        value = _value(value)
        variable = ENV_OF_FIELD.get(name)
        lines.append(f"{variable}={value}" if variable else NO_VARIABLE.format(name=name, value=value))
    return "\n".join(lines) + "\n"


def policy_toml(knobs: Mapping[str, Any], header: str) -> str:
    """A TOML policy file (``base`` and Policy fields) that ``--policy FILE.toml`` loads."""
    lines = [f"# {header}", f'base = "{DEFAULT_LABEL}"']
    for name, value in knobs.items():
        lines.append(f"{name} = {json.dumps(_value(value))}")
    return "\n".join(lines) + "\n"


def _kind(row: pd.Series, chosen: int | None) -> str:
    if row["role"] == DEFAULT_LABEL:
        return "default"
    if chosen is not None and int(row["number"]) == chosen:
        return "chosen"
    if not row["feasible"]:
        return "infeasible"
    return "front" if row["on_front"] else "dominated"


def front_figure(trials: pd.DataFrame, *, chosen: int | None = None) -> Figure:
    """Every pair of objectives, one panel each: the finished trials, the front, the default, the choice."""
    complete = trials[trials["state"] == "complete"]
    pairs = list(itertools.combinations(OBJECTIVES, 2))
    columns = 3
    rows = -(-len(pairs) // columns)
    figure = new_figure(PANEL_SIZE * columns + 1.5, PANEL_SIZE * rows)
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    kinds = [_kind(row, chosen) for _, row in complete.iterrows()]
    for ax, (x_name, y_name) in zip(axes, pairs, strict=False):
        for kind, (label, colour, marker, size) in FRONT_STYLES.items():
            chosen_rows = complete[[k == kind for k in kinds]]
            if len(chosen_rows):
                ax.scatter(
                    chosen_rows[x_name], chosen_rows[y_name], c=colour, marker=marker, s=size, label=label
                )
        ax.set_xlabel(OBJECTIVES[x_name].label, fontsize="x-small")
        ax.set_ylabel(OBJECTIVES[y_name].label, fontsize="x-small")
        ax.tick_params(labelsize="x-small")
    for ax in axes[len(pairs) :]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside right upper", fontsize="x-small", frameon=False)
    figure.suptitle("tune: trials on every pair of objectives (front: no feasible trial beats it)")
    return figure


def _relabelled(payload: Mapping[str, Any], label: str) -> dict[str, Any]:
    copied = copy.deepcopy(dict(payload))
    copied["row"]["policy"] = label
    copied["run"]["policy"] = label
    for attempt in copied["attempts"]:
        attempt["policy"] = label
    return copied


def _write_table(frame: pd.DataFrame, stem: Path) -> list[Path]:
    csv_path, md_path = stem.with_suffix(".csv"), stem.with_suffix(".md")
    frame.to_csv(csv_path, index=frame.index.name is not None, lineterminator="\n")
    md_path.write_text(markdown_table(frame) + "\n", encoding="utf-8")
    return [csv_path, md_path]


def write_tune_files(
    out: Path,
    *,
    trials: pd.DataFrame,
    front: pd.DataFrame,
    importance: pd.DataFrame,
    chosen: pd.Series | None,
    verdict: str,
    space: Mapping[str, Any],
    payloads: Mapping[str, dict[str, Any]],
    specs_for: Callable[[Mapping[str, Any]], list[RunSpec]],
    figures: bool,
    definition: Mapping[str, Any],
    code: str,
    loaded: Transcripts,
) -> list[Path]:
    """Write everything a tune leaves in ``out`` (module doc); returns the paths, the report's included."""
    complete = trials[trials["state"] == "complete"]
    specs: list[RunSpec] = []
    labelled: dict[str, dict[str, Any]] = {}
    for _, row in complete.iterrows():
        knobs = {name: _value(row[name]) for name in space}
        for spec in specs_for(knobs):
            if spec.key in payloads:
                renamed = RunSpec(
                    f"{spec.key}:{row['number']}",
                    trial_label(row),
                    "default",
                    spec.knobs,
                    spec.scenario,
                    spec.transcript,
                    spec.seed,
                )
                specs.append(renamed)
                labelled[renamed.key] = _relabelled(payloads[spec.key], trial_label(row))
    knob_columns = [knob_column(name) for name in space]
    frame = rows_frame(specs, labelled, knob_columns)
    summary = {
        "objectives": {name: {"label": o.label, "direction": o.direction} for name, o in OBJECTIVES.items()},
        "constraints": dict(CONSTRAINTS),
        "verdict": verdict,
        "chosen_trial": None if chosen is None else int(chosen["number"]),
    }
    write_outputs(
        out,
        frame,
        specs,
        labelled,
        knob_columns,
        False,
        definition=dict(definition),
        code=code,
        resolved=[("default", DEFAULT_POLICY, None)],
        loaded=loaded,
        kind="tune",
        extra=summary,
    )
    written = [out / name for name in ("attempts.csv", "summary.csv", "manifest.json")]
    written += _write_table(trials.set_index("number"), out / TUNE_FILES["trials"])
    written += _write_table(front.set_index("number"), out / TUNE_FILES["front"])
    if len(importance.columns):
        written += _write_table(importance, out / TUNE_FILES["importance"])
    source = chosen if chosen is not None else complete[complete["role"] == DEFAULT_LABEL].iloc[0]
    knobs = {name: source[name] for name in space}
    header = f"ctxsim tune ({out}): {verdict}"
    (out / TUNE_FILES["env"]).write_text(env_file(knobs, header), encoding="utf-8")
    (out / TUNE_FILES["toml"]).write_text(policy_toml(knobs, header), encoding="utf-8")
    written += [out / TUNE_FILES["env"], out / TUNE_FILES["toml"]]
    figure = front_figure(trials, chosen=None if chosen is None else int(chosen["number"]))
    front_png = out / f"{TUNE_FILES['front']}.png"
    figure.savefig(front_png, format="png", metadata=dict(SAVE_METADATA["png"]))
    written.append(front_png)
    if figures:
        written += write_report(out)
    return written
