"""``ctxsim replay``: one replay with its turn log, every event and notice as the library emits it."""

from __future__ import annotations

import argparse

from simulator.cli.common import (
    EXIT_OK,
    add_replay_options,
    policy_from_spec,
)
from simulator.cli.output import event_line, run_line
from simulator.proxy.scenario import load_scenario
from simulator.recorder import ReplayEvent
from simulator.replay import replay
from simulator.workloads import load_named_transcript

__all__ = ["register", "run"]

def run(args: argparse.Namespace) -> int:
    policy, policy_name = policy_from_spec(args.policy)
    scenario = load_scenario(args.scenario)
    transcript = None if args.transcript is None else load_named_transcript(args.transcript)

    def show(event: ReplayEvent) -> None:
        print(event_line(event), flush=True)

    result = replay(transcript, scenario, policy=policy, seed=args.seed, transport=args.transport,
                    on_event=show, policy_name=policy_name)
    print()
    if result.error:
        print(f"the replay ended at turn {result.turns_completed}: {result.error}")
    print(run_line(result))
    return EXIT_OK


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``one`` subcommand to ``commands``."""
    parser = commands.add_parser("replay", help="one replay with its turn log",
                                 description="Replay one transcript under one scenario and print every event "
                                             "and notice as the library emits it, then a summary.")
    parser.add_argument("--transcript", default=None,
                        help="a transcript path or bundled name "
                             "(default: the scenario's [workload] transcript)")
    parser.add_argument("--scenario", required=True, help="a bundled scenario name or a .toml/.json file")
    add_replay_options(parser)
    parser.set_defaults(handler=run)
