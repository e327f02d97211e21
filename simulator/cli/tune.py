"""``ctxsim tune``: search the policy space with optuna for the best policies against the default."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simulator.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    PROG,
    CliError,
    add_executor_options,
    add_scenario_options,
    positive_int_arg,
    run_dir,
    seed_arg,
    seed_list,
    split_names,
    transcript_names,
)

__all__ = ["register", "run"]


def run(args: argparse.Namespace) -> int:
    from simulator.research.objectives import OBJECTIVES
    from simulator.research.report import markdown_table
    from simulator.research.tune import tune

    out = run_dir(args.out)
    try:
        result = tune(
            trials=args.trials,
            scenarios=split_names(args.scenarios) or None,
            transcripts=transcript_names(args.transcripts),
            seeds=seed_list(args.seeds),
            space=split_names(args.space) or None,
            seed=args.seed,
            workers=args.workers,
            dask=args.dask,
            prune=not args.no_prune,
            out_dir=out,
            figures=not args.no_figures,
        )
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; the study is in {out} — run the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as exc:
        raise CliError(f"{out}: cannot write the tune directory: {exc.strerror or exc}") from None
    front = result.front[[c for c in ["number", "role", *OBJECTIVES] if c in result.front.columns]]
    print("Pareto front (feasible trials no other beats):")
    print(markdown_table(front.set_index("number")))
    default = ", ".join(f"{OBJECTIVES[name].label} {value:.4g}" for name, value in result.default.items())
    print(f"\ndefault: {default}")
    print(result.verdict)
    chosen = "the chosen policy" if result.chosen is not None else "the default (on the front)"
    print(f"{chosen}: {out / 'policy.toml'} (--policy), {out / 'policy.env'}")
    print(f"wrote {out}/")
    return EXIT_OK


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``tune`` subcommand to ``commands``."""
    parser = commands.add_parser(
        "tune",
        help="search policies with optuna (multi-objective, constrained, pruned, resumable)",
        description="Search the policy space for policies that beat the default on summarizer USD, "
        "fact survival, rejected requests and failed turns, with no char lost and a recovery rate at "
        "least the default's. The study is stored in OUT/study.journal: the same command resumes it, "
        "more --trials extend it. Writes the Pareto front, the chosen policy (policy.toml for --policy, "
        "policy.env), knob importances and a report.",
    )
    parser.add_argument("--trials", type=positive_int_arg, default=20, help="trials besides the default (20)")
    add_scenario_options(parser)
    parser.add_argument("--seeds", default="0", help="comma-separated replay seeds per trial (default 0)")
    parser.add_argument(
        "--space",
        default="",
        help="comma-separated Policy fields to search (default: every field of the search space)",
    )
    parser.add_argument("--seed", type=seed_arg, default=0, help="seed of the sampler (default 0)")
    add_executor_options(parser)
    parser.add_argument("--no-prune", action="store_true", help="run every trial to its end")
    parser.add_argument(
        "--out", type=Path, default=None, help="tune directory (default: runs/<UTC timestamp>)"
    )
    parser.add_argument("--no-figures", action="store_true", help="skip the report figures")
    parser.set_defaults(handler=run)
