"""The README's examples run as written and print what the README says they print.

The main command's table in the README is checked against a real ``python -m simulator run``;
after a change of behaviour, regenerate it with ``UPDATE_README=1 pytest tests/test_readme.py``.
Every ``ctxsim`` command, fault spec and exit code the README shows is checked against the code.
"""

from __future__ import annotations

import io
import os
import re
import shlex
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from simulator.cli import build_parser, main, policy_from_spec
from simulator.cli.common import EXIT_EXPECTATION_MISSED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from simulator.proxy.fault_specs import parse_fault_spec
from simulator.proxy.faults import FAULT_KINDS
from simulator.proxy.pages import BODY_CAP_PAGES, UPSTREAM_ERROR_PAGES, WAF_PAGES
from simulator.proxy.scenario import load_scenario
from simulator.workloads import find_transcript

ROOT = Path(__file__).resolve().parents[1]
README_PATH = ROOT / "README.md"
README = README_PATH.read_text(encoding="utf-8")
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)
TEXT_BLOCKS = re.findall(r"```text\n(.*?)```", README, flags=re.S)
BASH_BLOCKS = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
RUN_TABLE = re.compile(
    r"(<!-- ctxsim run table: begin -->\n```\n)(.*?)(```\n<!-- ctxsim run table: end -->)", re.S
)
PROGRAMS = ("ctxsim ", "python -m simulator ")
UPDATE = os.environ.get("UPDATE_README") == "1"


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
    assert 'pip install -e ".[dev]" && python -m simulator run' in README
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert 'pip install -e ".[dev]"' in ci
    assert re.search(r"^pytest$", ci, flags=re.M)


# -- the main command's table ---------------------------------------------------------------------


def printed_table(stdout: str) -> str:
    """The summary table: the output's first block (header, rule, one line per scenario)."""
    return stdout.split("\n\n", 1)[0].rstrip("\n") + "\n"


def test_readme_run_table_is_what_the_main_command_prints(tmp_path: Path) -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["run", "--no-figures", "--no-timing", "--out", str(tmp_path / "run")])
    table = printed_table(out.getvalue())
    found = RUN_TABLE.search(README)
    assert found is not None, "README.md lost its <!-- ctxsim run table --> markers"
    if UPDATE:
        README_PATH.write_text(RUN_TABLE.sub(lambda m: m[1] + table + m[3], README), encoding="utf-8")
    else:
        assert found[2] == table, "regenerate with: UPDATE_README=1 pytest tests/test_readme.py"
    assert code == EXIT_OK  # every bundled scenario meets its [expect]


# -- commands, fault specs and exit codes -----------------------------------------------------------


def readme_commands() -> list[str]:
    """Every ``ctxsim …`` / ``python -m simulator …`` command in inline code or a bash block."""
    inline = re.findall(r"`([^`\n]+)`", README)
    lines = [line.strip() for block in BASH_BLOCKS for line in block.splitlines()]
    parts = [part.strip() for line in lines for part in line.split("&&")]
    return [text for text in inline + parts if text.startswith(PROGRAMS)]


def test_the_readme_shows_commands_to_check() -> None:
    commands = readme_commands()
    assert len(commands) >= 8 and "python -m simulator run" in commands


@pytest.mark.parametrize("command", readme_commands())
def test_every_readme_command_parses_and_names_what_exists(command: str) -> None:
    argv = shlex.split(command)[1:] if command.startswith("ctxsim") else shlex.split(command)[3:]
    try:
        with redirect_stdout(io.StringIO()):
            args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help and --version exit 0; a rejected command exits 2
        assert exc.code == 0, f"{command!r} does not parse"
        return
    for name in [*(getattr(args, "scenarios", "") or "").split(","), getattr(args, "scenario", None)]:
        if name:
            load_scenario(name)
    transcripts = [*(getattr(args, "transcripts", "") or "").split(","), getattr(args, "transcript", None)]
    for name in transcripts:
        if name and name not in ("workload", "all"):
            find_transcript(name)
    for spec in getattr(args, "fault", None) or []:
        parse_fault_spec(spec)
    if getattr(args, "policy", None):
        policy_from_spec(args.policy)


def command_table() -> list[str]:
    section = README.split("| command | what it does |", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^\| `ctxsim (\w+)", section, flags=re.M)


def test_the_command_table_lists_every_subcommand_once() -> None:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if a.dest == "command"]  # the subparsers action
    assert sorted(command_table()) == sorted(commands.choices)


def fault_rows() -> list[list[str]]:
    section = README.split("| fault | example | what the middlebox does |", 1)[1].split("\n\n", 1)[0]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in section.strip().splitlines()[1:]]


def test_the_fault_table_documents_every_fault_kind_with_an_example_that_parses() -> None:
    rows = fault_rows()
    assert sorted(kind for kind, _example, _what in rows) == sorted(FAULT_KINDS)
    for kind, example, _what in rows:
        assert parse_fault_spec(example.strip("`")).kind == kind


@pytest.mark.parametrize(
    ("kind", "pages"),
    [
        ("body-cap", BODY_CAP_PAGES),
        ("waf-403-html", WAF_PAGES),
        ("upstream-error", UPSTREAM_ERROR_PAGES),
    ],
)
def test_the_page_names_in_the_fault_table_are_the_pages_the_code_serves(kind: str, pages: object) -> None:
    (what,) = [what for row_kind, _example, what in fault_rows() if row_kind == kind]
    named = [name for name in re.findall(r"`([a-z0-9-]+)`", what) if name not in FAULT_KINDS]
    assert sorted(named) == sorted(pages)  # type: ignore[call-overload]
    for name in named:
        spec = f"body-cap:128KB:{name}" if kind == "body-cap" else f"{kind}:{name}"
        parse_fault_spec(spec)


def test_the_exit_code_table_is_the_cli_s() -> None:
    section = README.split("| code | meaning |", 1)[1].split("\n\n", 1)[0]
    codes = [int(code) for code in re.findall(r"^\| (\d+) \|", section, flags=re.M)]
    assert codes == [EXIT_OK, EXIT_EXPECTATION_MISSED, EXIT_USAGE, EXIT_INTERRUPTED]
