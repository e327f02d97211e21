"""The README's examples run as written and print what the README says they print."""

from __future__ import annotations

import io
import re
from contextlib import redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)
TEXT_BLOCKS = re.findall(r"```text\n(.*?)```", README, flags=re.S)


def run_block(block: str, index: int) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        exec(compile(block, f"README.md[python block {index}]", "exec"), {})
    return out.getvalue()


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_readme_python_example_runs(index: int) -> None:
    block = PYTHON_BLOCKS[index]
    out = run_block(block, index)
    assert out  # every example shows its result
    # A `print(...)  # text` line promises that text in the output.
    for promised in re.findall(r"^print\(.*\)\s+#\s*([^:]+?)(?::.*)?$", block, flags=re.M):
        assert promised.strip() in out


def test_readme_shown_output_is_real() -> None:
    printed = "".join(run_block(block, i) for i, block in enumerate(PYTHON_BLOCKS))
    for block in TEXT_BLOCKS:
        for line in block.strip().splitlines():
            assert line in printed


def test_readme_quick_start_is_what_ci_runs() -> None:
    assert 'pip install -e ".[dev]" && pytest' in README
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert 'pip install -e ".[dev]"' in ci
    assert re.search(r"^pytest$", ci, flags=re.M)
