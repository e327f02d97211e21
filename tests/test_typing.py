"""Both packages ship ``py.typed``: their code must type-check, or users' type checkers inherit the errors;
the library strictly, and all of it formatted and lint-clean as CI checks it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_library_and_the_simulator_type_check_with_mypy(tmp_path: Path) -> None:
    cache = str(tmp_path / "mypy-cache")
    command = [sys.executable, "-m", "mypy", "--cache-dir", cache, "ctxrecover", "simulator"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("Success: no issues found")


def test_the_library_type_checks_strictly(tmp_path: Path) -> None:
    # ctxrecover is the API users build on: every public name fully typed, no implicit Any (issue 20)
    cache = str(tmp_path / "mypy-cache")
    command = [sys.executable, "-m", "mypy", "--strict", "--cache-dir", cache, "ctxrecover"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("Success: no issues found")


def test_the_code_is_formatted_and_lint_clean() -> None:
    for command in (["format", "--check", "."], ["check", "."]):
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *command], cwd=ROOT, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"ruff {' '.join(command)}:\n{done.stdout}{done.stderr}"
