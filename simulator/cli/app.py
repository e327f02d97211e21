"""ctxsim: the simulator's command line (``python -m simulator`` or ``ctxsim``).

==========  ========================================================================
``run``       replay transcripts under scenarios, print a summary table, write a run
              directory (``attempts.csv``, ``manifest.json``, PNG figures)
``replay``    one replay with its turn log (every event and notice, per turn/attempt)
``proxy``     a real loopback HTTP middlebox in front of a mock provider or a real URL
``fault``     list, add or remove faults on a running ``proxy --admin`` (toxiproxy-style)
``infer``     a scenario (TOML) that reproduces a gateway recorded by ``proxy --record``
``probe``     estimate a gateway's body cap by bisection with synthetic requests
``sweep``     policies (presets and peer baselines) × knob grids × scenarios, cached and
              resumable, on processes or Dask; writes a sweep directory with its report
``report``    regenerate every figure and table of a run or sweep directory
``classify``  classify an error body or message (``ctxrecover.classify``)
``generate``  write a seeded synthetic transcript
==========  ========================================================================

Bad input — an unreadable or malformed transcript, an unknown scenario or fault, a
malformed schedule, a bad size or policy — prints one ``ctxsim: error: …`` line on
stderr and exits with 2; anything else is a bug and raises.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from ctxrecover.errors import ConfigError
from simulator.cli import classify, fault, generate, infer, probe, proxy, replay, report, run, sweep
from simulator.cli.common import EXIT_OK, EXIT_USAGE, PROG, CliError, Parser
from simulator.proxy.scenario import ScenarioError
from simulator.transcripts.loaders import TranscriptError
from simulator.workloads import ReplayError

__all__ = ["build_parser", "main"]

SUBCOMMANDS = (run, replay, sweep, report, proxy, fault, infer, probe, classify, generate)

# The validation errors that mean "bad input": one line on stderr, exit code 2.
INPUT_ERRORS: tuple[type[Exception], ...] = (
    CliError, ConfigError, ReplayError, ScenarioError, TranscriptError
)


def build_parser() -> argparse.ArgumentParser:
    """The ``ctxsim`` argument parser."""
    parser = Parser(prog=PROG, description="Fault-injection simulator for ctxrecover.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)

    for command in SUBCOMMANDS:
        command.register(commands)
    return parser


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``ctxsim`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)
    except SystemExit as exit_:  # --help, or an argparse error already printed
        return exit_.code if isinstance(exit_.code, int) else EXIT_OK
    except INPUT_ERRORS as error:
        print(f"{PROG}: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_USAGE
