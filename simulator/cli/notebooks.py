"""``ctxsim notebooks``: the research notebooks as a regression matrix, run by papermill."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from simulator.cli.common import EXIT_EXPECTATION_MISSED, EXIT_OK, CliError, run_dir, seed_arg, split_names

__all__ = ["register", "run"]

REPO_NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def _parameter(text: str) -> tuple[str, object]:
    name, sep, raw = (part.strip() for part in text.partition("="))
    if not sep or not name.isidentifier():
        raise CliError(f"-p {text!r}: expected NAME=VALUE (VALUE as JSON, e.g. TRIALS=4)")
    try:
        return name, json.loads(raw)
    except json.JSONDecodeError:
        return name, raw  # a bare word is a string


def run(args: argparse.Namespace) -> int:
    from simulator.research.matrix import matrix_entry, parameterised_notebooks, run_matrix, summary_frame
    from simulator.research.report import markdown_table

    directory = args.dir or REPO_NOTEBOOKS
    if not directory.is_dir():
        raise CliError(f"--dir {directory}: no notebooks directory (the notebooks ship with the repository)")
    available = {path.stem: path for path in parameterised_notebooks(directory)}
    wanted = split_names(args.notebooks)
    unknown = [name for name in wanted if name.removesuffix(".ipynb") not in available]
    if unknown:
        raise CliError(
            f"--notebooks {', '.join(unknown)}: parameterised notebooks here: {', '.join(available)}"
        )
    notebooks = (
        [available[name.removesuffix(".ipynb")] for name in wanted] if wanted else list(available.values())
    )
    if not args.matrix:
        raise CliError("give at least one --matrix scenario set or recorded gateway (.jsonl)")
    out = run_dir(args.out)
    out.mkdir(parents=True, exist_ok=True)
    entries = [matrix_entry(spec, out) for spec in args.matrix]
    parameters = dict(_parameter(text) for text in args.parameter)
    cells = run_matrix(notebooks, entries, out, seed=args.seed, parameters=parameters)
    table = summary_frame(cells).drop(columns=["output"])
    print(markdown_table(table))
    print(f"\nwrote {out}/: summary.csv, summary.md and {len(cells)} executed notebooks")
    return EXIT_OK if all(cell.status == "ok" for cell in cells) else EXIT_EXPECTATION_MISSED


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``notebooks`` subcommand to ``commands``."""
    parser = commands.add_parser(
        "notebooks",
        help="run the research notebooks × scenario sets or recorded gateways (papermill)",
        description="Execute each parameterised research notebook (a cell tagged 'parameters' assigning "
        "SCENARIOS) once per --matrix entry with papermill; the executed copies and a summary table go "
        "to OUT. Exits 1 when a notebook raised. The committed notebooks are untouched (nbval guards them).",
    )
    parser.add_argument(
        "--matrix",
        action="append",
        default=[],
        metavar="SCENARIOS|RECORDING.jsonl",
        help="comma-separated scenario names or files, or a gateway recorded by ctxsim proxy --record "
        "(inferred into a scenario); repeatable",
    )
    parser.add_argument(
        "--notebooks", default="", help="comma-separated notebook names (default: every parameterised one)"
    )
    parser.add_argument(
        "-p",
        "--parameter",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="another parameter for every run, VALUE as JSON (e.g. -p TRIALS=4)",
    )
    parser.add_argument("--seed", type=seed_arg, default=0, help="SEED passed to every notebook (default 0)")
    parser.add_argument(
        "--dir", type=Path, default=None, help="notebooks directory (default: the repository's)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="matrix directory (default: runs/<UTC timestamp>)"
    )
    parser.set_defaults(handler=run)
