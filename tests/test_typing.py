"""Both packages ship ``py.typed``: their code must type-check, or users' type checkers inherit the errors."""

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
