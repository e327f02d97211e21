"""``ctxsim replay``: one replay with its turn log, every event and notice as the library emits it."""

from __future__ import annotations

import argparse

from simulator.cli.common import (
    EXIT_EXPECTATION_MISSED,
    EXIT_OK,
    add_json_option,
    add_replay_options,
    add_report_only_option,
    policy_from_spec,
    print_json,
)
from simulator.cli.output import event_line, run_document, run_line
from simulator.proxy.scenario import load_scenario
from simulator.recorder import ReplayEvent
from simulator.replay import expectation_problems, replay
from simulator.workloads import load_named_transcript

__all__ = ["register", "run"]


def run(args: argparse.Namespace) -> int:
    policy, policy_name = policy_from_spec(args.policy)
    scenario = load_scenario(args.scenario)
    transcript = None if args.transcript is None else load_named_transcript(args.transcript)

    def show(event: ReplayEvent) -> None:
        line = event_line(event)
        if line is not None:
            print(line, flush=True)

    result = replay(
        transcript,
        scenario,
        policy=policy,
        seed=args.seed,
        transport=args.transport,
        on_event=None if args.json else show,
        policy_name=policy_name,
    )
    if args.json:
        print_json(
            {
                "run": run_document(result),
                "notices": result.notices,
                "attempts": [record.to_row() for record in result.records],
            }
        )
    else:
        print()
        if result.error:
            print(f"the replay ended at turn {result.turns_completed}: {result.error}")
        print(run_line(result))
    missed = bool(expectation_problems(result))
    return EXIT_EXPECTATION_MISSED if missed and not args.report_only else EXIT_OK


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``replay`` subcommand to ``commands``."""
    parser = commands.add_parser(
        "replay",
        help="one replay with its turn log",
        description="Replay one transcript under one scenario and print every event "
        "and notice as the library emits it, then a summary.",
    )
    parser.add_argument(
        "--transcript",
        default=None,
        help="a transcript path or bundled name (default: the scenario's [workload] transcript)",
    )
    parser.add_argument("--scenario", required=True, help="a bundled scenario name or a .toml/.json file")
    add_replay_options(parser)
    add_json_option(parser, "the run, its notices and every attempt")
    add_report_only_option(parser)
    parser.set_defaults(handler=run)
