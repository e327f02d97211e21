"""The README's examples run as written, and its quick start matches CI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_readme_python_example_runs(index: int, capsys: pytest.CaptureFixture[str]) -> None:
    block = PYTHON_BLOCKS[index]
    exec(compile(block, f"README.md[python block {index}]", "exec"), {})
    out = capsys.readouterr().out
    assert out  # every example shows its result
    # A `print(...)  # text` line promises that text in the output.
    for promised in re.findall(r"^print\(.*\)\s+#\s*([^:]+?)(?::.*)?$", block, flags=re.M):
        assert promised.strip() in out


def test_readme_quick_start_is_what_ci_runs() -> None:
    assert 'pip install -e ".[dev]" && pytest' in README
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert 'pip install -e ".[dev]"' in ci
    assert re.search(r"^pytest$", ci, flags=re.M)
