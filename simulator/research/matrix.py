"""Notebooks as a regression matrix: each parameterised research notebook × each scenario set or
recorded gateway, executed by papermill, with a summary table (``ctxsim notebooks --matrix``).

A notebook joins the matrix by tagging one cell ``parameters`` that assigns ``SCENARIOS`` (a list of
bundled scenario names or scenario files) — papermill's convention: the values of a matrix entry
(and ``SEED``, and any ``-p NAME=VALUE``) are injected right after that cell. The committed notebooks
keep their stored outputs, which nbval guards; the matrix writes its executed copies elsewhere::

    OUT/<entry>/<notebook>.ipynb     one executed notebook per notebook × entry
    OUT/scenarios/<recording>.toml   the scenario inferred from each recorded gateway
    OUT/summary.csv, OUT/summary.md  notebook × entry → status, seconds, the error if any

A matrix entry is a comma-separated scenario set (``openai-128k-overflow,corporate-128k-waf``, files
allowed) or a gateway recorded by ``ctxsim proxy --record`` (``gateway.jsonl``), replaced by the
scenario ``ctxsim infer`` makes of it.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxrecover.errors import ConfigError
from simulator.proxy.scenario import list_scenarios, load_scenario

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "MATRIX_COLUMNS",
    "MatrixCell",
    "MatrixEntry",
    "matrix_entry",
    "parameterised_notebooks",
    "run_matrix",
    "summary_frame",
]

PARAMETERS_TAG = "parameters"
SCENARIOS_PARAMETER = "SCENARIOS"
SEED_PARAMETER = "SEED"
RECORDING_SUFFIX = ".jsonl"
INFERRED_DIR = "scenarios"
SUMMARY_STEM = "summary"
KERNEL_NAME = "python3"
CELL_TIMEOUT_S = 600
UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MATRIX_COLUMNS: tuple[str, ...] = ("notebook", "entry", "scenarios", "status", "seconds", "error", "output")


@dataclass(frozen=True, slots=True)
class MatrixEntry:
    """One column of the matrix: its ``label`` (a directory name) and the ``SCENARIOS`` it passes."""

    label: str
    scenarios: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MatrixCell:
    """One notebook × entry: ``ok`` or ``error`` (with the error's one line), its wall time, its output."""

    notebook: str
    entry: str
    scenarios: tuple[str, ...]
    status: str
    seconds: float
    error: str | None
    output: Path


def _label(text: str) -> str:
    return UNSAFE.sub("_", text).strip("_") or "entry"


def _infer(recording: Path, directory: Path) -> Path:
    from simulator.proxy.infer import infer_scenario, load_recording, scenario_toml

    header, observed = load_recording(recording)
    inference = infer_scenario(observed)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{_label(recording.stem)}.toml"
    path.write_text(
        scenario_toml(inference, source=recording.name, upstream=str(header.get("upstream", ""))),
        encoding="utf-8",
    )
    return path


def matrix_entry(spec: str, out_dir: Path) -> MatrixEntry:
    """A matrix entry from the command line: a scenario set, or a recorded gateway (inferred into
    ``out_dir/scenarios/``). Every scenario is loaded once here, so a bad one fails before anything runs."""
    text = spec.strip()
    if text.endswith(RECORDING_SUFFIX):
        recording = Path(text)
        scenario = _infer(recording, out_dir / INFERRED_DIR).resolve()
        load_scenario(scenario)
        return MatrixEntry(_label(recording.stem), (str(scenario),))
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ConfigError(f"--matrix {spec!r}: give comma-separated scenarios or a recorded gateway (.jsonl)")
    bundled = set(list_scenarios())
    resolved = [name if name in bundled else str(Path(name).resolve()) for name in names]
    for name in resolved:
        load_scenario(name)
    return MatrixEntry(_label("+".join(Path(name).stem for name in names)), tuple(resolved))


def _parameter_cell(notebook: Path) -> str | None:
    cells = json.loads(notebook.read_text(encoding="utf-8")).get("cells", [])
    for cell in cells:
        if PARAMETERS_TAG in cell.get("metadata", {}).get("tags", []):
            return "".join(cell.get("source", ""))
    return None


def parameterised_notebooks(directory: Path) -> list[Path]:
    """The notebooks of ``directory`` whose ``parameters`` cell assigns ``SCENARIOS``, sorted."""
    found = []
    for path in sorted(Path(directory).glob("*.ipynb")):
        source = _parameter_cell(path)
        if source is not None and re.search(rf"^{SCENARIOS_PARAMETER}\s*=", source, flags=re.M):
            found.append(path)
    return found


def _error_line(error: BaseException) -> str:
    name, value = getattr(error, "ename", type(error).__name__), getattr(error, "evalue", str(error))
    return " ".join(f"{name}: {value}".split())


def run_matrix(
    notebooks: Sequence[Path],
    entries: Sequence[MatrixEntry],
    out_dir: Path,
    *,
    seed: int = 0,
    parameters: Mapping[str, Any] | None = None,
    kernel_name: str = KERNEL_NAME,
) -> list[MatrixCell]:
    """Execute every notebook × entry with papermill into ``out_dir`` and write the summary table.

    A notebook that raises is an ``error`` cell (its executed copy shows where), never an exception
    here; ``parameters`` are injected into every run besides ``SCENARIOS`` and ``SEED``.
    """
    import papermill

    unparameterised = [path.name for path in notebooks if path not in parameterised_notebooks(path.parent)]
    if unparameterised:
        raise ConfigError(
            f"{', '.join(unparameterised)}: no cell tagged {PARAMETERS_TAG!r} assigns {SCENARIOS_PARAMETER}"
        )
    cells: list[MatrixCell] = []
    for notebook in notebooks:
        for entry in entries:
            output = out_dir / entry.label / notebook.name
            output.parent.mkdir(parents=True, exist_ok=True)
            values = {**(parameters or {}), SCENARIOS_PARAMETER: list(entry.scenarios), SEED_PARAMETER: seed}
            started = time.perf_counter()
            error: str | None = None
            try:
                papermill.execute_notebook(
                    str(notebook),
                    str(output),
                    parameters=values,
                    kernel_name=kernel_name,
                    cwd=str(notebook.parent),
                    progress_bar=False,
                    execution_timeout=CELL_TIMEOUT_S,
                )
            except papermill.PapermillExecutionError as failure:
                error = _error_line(failure)
            seconds = time.perf_counter() - started
            cells.append(
                MatrixCell(
                    notebook.name,
                    entry.label,
                    entry.scenarios,
                    "error" if error else "ok",
                    seconds,
                    error,
                    output,
                )
            )
    _write_summary(cells, out_dir)
    return cells


def summary_frame(cells: Sequence[MatrixCell]) -> pd.DataFrame:
    """The matrix as a table, :data:`MATRIX_COLUMNS`."""
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "notebook": cell.notebook,
                "entry": cell.entry,
                "scenarios": ", ".join(Path(s).name for s in cell.scenarios),
                "status": cell.status,
                "seconds": round(cell.seconds, 1),
                "error": cell.error,
                "output": str(cell.output),
            }
            for cell in cells
        ],
        columns=list(MATRIX_COLUMNS),
    )


def _write_summary(cells: Sequence[MatrixCell], out_dir: Path) -> None:
    from simulator.research.report import markdown_table

    table = summary_frame(cells)
    table.to_csv(out_dir / f"{SUMMARY_STEM}.csv", index=False, lineterminator="\n")
    (out_dir / f"{SUMMARY_STEM}.md").write_text(markdown_table(table) + "\n", encoding="utf-8")
