"""ctxsim notebooks --matrix: research notebooks × scenario sets through papermill, with a summary."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pandas as pd
import pytest

pytest.importorskip("papermill", reason="needs the notebooks extra: pip install 'ctxrecover[notebooks]'")

from ctxrecover.errors import ConfigError  # noqa: E402
from simulator.cli import main  # noqa: E402
from simulator.proxy.fault_specs import ScenarioError  # noqa: E402
from simulator.research.matrix import MatrixEntry, matrix_entry, parameterised_notebooks, run_matrix  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow  # each notebook run starts a kernel


def tiny_notebook(directory: Path, *, parameters: bool = True) -> Path:
    cells = [
        nbformat.v4.new_code_cell('SCENARIOS = ["openai-128k-overflow"]\nSEED = 0'),
        nbformat.v4.new_code_cell(
            "from simulator import load_scenario\n"
            "windows = [load_scenario(name).provider.context_window for name in SCENARIOS]\n"
            "if SEED == 13:\n    raise ValueError(f'unlucky seed for {SCENARIOS}')\n"
            "print(windows)"
        ),
    ]
    if parameters:
        cells[0].metadata["tags"] = ["parameters"]
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = directory / ("tiny.ipynb" if parameters else "plain.ipynb")
    nbformat.write(notebook, path)
    return path


def test_the_repository_notebooks_that_take_a_scenario_set_are_in_the_matrix() -> None:
    assert [path.name for path in parameterised_notebooks(ROOT / "notebooks")] == ["07_policy_tuning.ipynb"]


def test_one_research_notebook_times_one_small_set_runs_and_is_summarised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "matrix"
    code = main(
        [
            "notebooks",
            "--matrix",
            "openai-128k-overflow",
            "--notebooks",
            "07_policy_tuning",
            "-p",
            "TRIALS=2",
            "--out",
            str(out),
        ]
    )
    stdout = capsys.readouterr().out
    assert code == 0
    summary = pd.read_csv(out / "summary.csv")
    assert summary[["notebook", "entry", "status"]].to_dict("records") == [
        {"notebook": "07_policy_tuning.ipynb", "entry": "openai-128k-overflow", "status": "ok"}
    ]
    assert "| 07_policy_tuning.ipynb | openai-128k-overflow |" in stdout
    executed = json.loads(
        (out / "openai-128k-overflow" / "07_policy_tuning.ipynb").read_text(encoding="utf-8")
    )
    (injected,) = [c for c in executed["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    source = "".join(injected["source"])
    assert (
        'SCENARIOS = ["openai-128k-overflow"]' in source and "TRIALS = 2" in source and "SEED = 0" in source
    )
    printed = "".join("".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", []))
    assert "beats the default" in printed or "the default is on the front" in printed
    committed = json.loads((ROOT / "notebooks" / "07_policy_tuning.ipynb").read_text(encoding="utf-8"))
    assert not [c for c in committed["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]


def test_a_notebook_that_raises_is_an_error_cell_with_its_one_line(tmp_path: Path) -> None:
    notebook = tiny_notebook(tmp_path)
    entries = [MatrixEntry("small", ("openai-128k-overflow",))]
    (good,) = run_matrix([notebook], entries, tmp_path / "a", seed=0)
    (bad,) = run_matrix([notebook], entries, tmp_path / "b", seed=13)
    assert (good.status, good.error) == ("ok", None)
    assert bad.status == "error" and bad.error == "ValueError: unlucky seed for ['openai-128k-overflow']"
    assert pd.read_csv(tmp_path / "b" / "summary.csv")["status"].tolist() == ["error"]
    assert (
        main(
            [
                "notebooks",
                "--dir",
                str(tmp_path),
                "--matrix",
                "openai-128k-overflow",
                "--seed",
                "13",
                "--out",
                str(tmp_path / "c"),
            ]
        )
        == 1
    )


def test_bad_entries_and_unparameterised_notebooks_are_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no-such-scenario"):
        matrix_entry("openai-128k-overflow,no-such-scenario", tmp_path)
    with pytest.raises(ConfigError, match="give comma-separated scenarios or a recorded gateway"):
        matrix_entry(" , ", tmp_path)
    plain = tiny_notebook(tmp_path, parameters=False)
    with pytest.raises(ConfigError, match="plain.ipynb: no cell tagged 'parameters' assigns SCENARIOS"):
        run_matrix([plain], [MatrixEntry("x", ("openai-128k-overflow",))], tmp_path)
    entry = matrix_entry(
        f"openai-128k-overflow,{ROOT / 'fixtures' / 'scenarios' / 'rate-limit-429.toml'}", tmp_path
    )
    assert entry.label == "openai-128k-overflow_rate-limit-429"
    assert entry.scenarios[0] == "openai-128k-overflow" and Path(entry.scenarios[1]).is_absolute()
