"""``ctxsim infer``: a scenario (TOML) that reproduces a gateway recorded with ``ctxsim proxy --record``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simulator.cli.common import EXIT_OK, CliError
from simulator.providers.mock import FORMATS
from simulator.proxy.infer import infer_scenario, load_recording, scenario_toml

__all__ = ["EXIT_NOT_REPRODUCED", "register", "run"]

EXIT_NOT_REPRODUCED = 1
DESCRIPTION = (
    "Read a `ctxsim proxy --record FILE` recording and write a scenario (TOML, like "
    "fixtures/scenarios/*.toml) whose faults give the same outcomes: caps, pages, statuses, "
    "resets. Exit 1 when some recorded outcome is not reproduced (listed)."
)


def run(args: argparse.Namespace) -> int:
    header, observed = load_recording(args.file)
    inference = infer_scenario(observed, fmt=args.format, seed=args.seed)
    text = scenario_toml(inference, source=args.file.name, upstream=str(header.get("upstream", "")))
    summary = sys.stderr if args.out is None else sys.stdout
    if args.out is None:
        print(text, end="")
    else:
        try:
            args.out.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise CliError(f"--out {args.out}: cannot write: {exc.strerror or exc}") from None
        print(f"wrote {args.out}", file=summary)
    for fault, evidence in inference.faults:
        print(f"  {fault.kind}: {evidence}", file=summary)
    print(f"reproduces {inference.reproduced} of {inference.total} recorded outcomes", file=summary)
    for note in inference.notes:
        print(f"  differs: {note}", file=summary)
    return EXIT_OK if inference.reproduced == inference.total else EXIT_NOT_REPRODUCED


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``infer`` subcommand to ``commands``."""
    parser = commands.add_parser(
        "infer", help="a scenario reproducing a gateway recorded by proxy --record", description=DESCRIPTION
    )
    parser.add_argument("file", type=Path, help="the record file")
    parser.add_argument("--out", type=Path, default=None, help="write the scenario here (default: stdout)")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="the wire format of the mock provider (default: from the recorded paths)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the replayed middlebox (probabilities)")
    parser.set_defaults(handler=run)
