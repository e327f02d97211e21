"""ctxsim: the simulator's command line (``python -m simulator`` or ``ctxsim``).

==========  ========================================================================
``run``       replay transcripts under scenarios, print a summary table, write a run
              directory (``attempts.csv``, ``manifest.json``; PNG figures with ``--figures``)
``replay``    one replay with its turn log (every event and notice, per turn/attempt)
``proxy``     a real loopback HTTP middlebox in front of a mock provider or a real URL
``gateway``   a real gateway (nginx, HAProxy, Apache/nginx + ModSecurity + CRS, Squid, Caddy) on loopback
``fault``     list, add or remove faults on a running ``proxy --admin`` (toxiproxy-style)
``infer``     a scenario (TOML) that reproduces a gateway recorded by ``proxy --record``
``probe``     estimate a gateway's body cap by bisection with synthetic requests
``sweep``     policies (presets and peer baselines) × knob grids × scenarios, cached and
              resumable, on processes or Dask; writes a sweep directory with its report
``tune``      search policies with optuna against the default (multi-objective, constrained,
              pruned, resumable); writes the Pareto front and the chosen policy (TOML, env file)
``report``    regenerate every figure and table of a run, sweep or tune directory
``notebooks`` the research notebooks × scenario sets or recorded gateways (papermill)
``classify``  classify an error body or message (``ctxrecover.classify``)
``generate``  write a seeded synthetic transcript
==========  ========================================================================

Exit codes: 0 ok; 1 a run missed its scenario's ``[expect]`` (``run`` and ``replay``;
``--report-only`` reports without failing); 2 bad input — an unreadable or malformed
transcript, an unknown scenario or fault, a malformed schedule, a bad size or policy, or a
missing optional extra — after one ``ctxsim: error: …`` line on stderr. Anything else is a
bug and raises.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from ctxrecover.errors import ConfigError
from simulator.cli import (
    classify,
    fault,
    gateway,
    generate,
    infer,
    notebooks,
    probe,
    proxy,
    replay,
    report,
    run,
    sweep,
    tune,
)
from simulator.cli.common import EXIT_OK, EXIT_USAGE, PROG, CliError, Parser, missing_extra, package_version
from simulator.proxy.scenario import ScenarioError
from simulator.transcripts.loaders import TranscriptError
from simulator.workloads import ReplayError

__all__ = ["build_parser", "main"]

SUBCOMMANDS = (
    run,
    replay,
    sweep,
    tune,
    report,
    notebooks,
    proxy,
    gateway,
    fault,
    infer,
    probe,
    classify,
    generate,
)

# The validation errors that mean "bad input": one line on stderr, exit code 2.
INPUT_ERRORS: tuple[type[Exception], ...] = (
    CliError,
    ConfigError,
    ReplayError,
    ScenarioError,
    TranscriptError,
)


def build_parser() -> argparse.ArgumentParser:
    """The ``ctxsim`` argument parser."""
    parser = Parser(prog=PROG, description="Fault-injection simulator for ctxrecover.")
    parser.add_argument("--version", action="version", version=f"{PROG} {package_version()}")
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
    except ModuleNotFoundError as error:
        hint = missing_extra(error)
        if hint is None:
            raise
        print(f"{PROG}: error: {hint}", file=sys.stderr)
        return EXIT_USAGE
