"""``ctxsim report``: regenerate every figure and table of a run or sweep directory."""

from __future__ import annotations

import argparse
from pathlib import Path

from simulator.cli.common import (
    EXIT_OK,
    CliError,
    split_names,
)

__all__ = ["register", "run"]

REPORT_FORMATS = ("png", "svg", "pdf")


def run(args: argparse.Namespace) -> int:
    from simulator.research.report import write_report

    formats = split_names(args.formats)
    unknown = [fmt for fmt in formats if fmt not in REPORT_FORMATS]
    if unknown or not formats:
        raise CliError(f"--formats {args.formats!r}: use one or more of {', '.join(REPORT_FORMATS)}")
    try:
        written = write_report(args.run_dir, formats=formats, out_dir=args.out)
    except (FileNotFoundError, ValueError) as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        where = args.out or args.run_dir
        raise CliError(f"{where}: cannot write the report: {exc.strerror or exc}") from None
    target = written[0].parent if written else args.out
    print(f"wrote {len(written)} files to {target}/")
    return EXIT_OK


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``reporting`` subcommand to ``commands``."""
    parser = commands.add_parser(
        "report",
        help="regenerate the figures and tables of a run or sweep",
        description="Regenerate every figure and table of a run or sweep "
        "directory from its attempts.csv, manifest.json and "
        "summary.csv.",
    )
    parser.add_argument(
        "run_dir", type=Path, metavar="RUN_DIR", help="a `ctxsim run` or `ctxsim sweep` directory"
    )
    parser.add_argument(
        "--formats", default="png", help=f"comma-separated, among {', '.join(REPORT_FORMATS)} (default png)"
    )
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: RUN_DIR/report)")
    parser.set_defaults(handler=run)
