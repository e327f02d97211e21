"""``ctxsim run``: replay transcripts under scenarios, print the summary table, write a run directory."""

from __future__ import annotations

import argparse
from pathlib import Path

from simulator.cli.common import (
    ALL,
    EXIT_OK,
    PROG,
    WORKLOAD,
    CliError,
    add_replay_options,
    policy_from_spec,
    run_dir,
    split_names,
    transcripts_option,
)
from simulator.cli.output import format_summary, run_line
from simulator.proxy.scenario import list_scenarios, load_scenario
from simulator.replay import ReplayResult, expectation_problems, replay
from simulator.research.run_files import (
    ATTEMPTS_CSV,
    MANIFEST_JSON,
    manifest,
    write_attempts_csv,
    write_figures,
    write_manifest,
)

__all__ = ["register", "run"]

def run(args: argparse.Namespace) -> int:
    policy, policy_name = policy_from_spec(args.policy)
    scenarios = [load_scenario(name) for name in (split_names(args.scenarios) or list_scenarios())]
    transcripts = transcripts_option(args.transcripts)
    out = run_dir(args.out)
    jobs = [(transcript, scenario) for scenario in scenarios for transcript in transcripts]
    from tqdm.auto import tqdm

    results: list[ReplayResult] = []
    with tqdm(total=len(jobs), desc=PROG, unit="replay", disable=None) as progress:
        for transcript, scenario in jobs:
            progress.set_postfix_str(scenario.name, refresh=False)
            results.append(replay(transcript, scenario, policy=policy, seed=args.seed,
                                  transport=args.transport, policy_name=policy_name))
            progress.update()
    try:
        out.mkdir(parents=True, exist_ok=True)
        files = [write_attempts_csv(results, out / ATTEMPTS_CSV, timing=not args.no_timing)]
        if not args.no_figures:
            files += write_figures(results, out)
        names = [p.name for p in files] + [MANIFEST_JSON]
        document = manifest(results, policy=policy, policy_name=policy_name, seed=args.seed,
                            transport=args.transport, files=names)
        write_manifest(out / MANIFEST_JSON, document)
    except OSError as exc:
        raise CliError(f"{out}: cannot write the run directory: {exc.strerror or exc}") from None
    print(format_summary(results))
    unmet = [run_line(r) for r in results if expectation_problems(r)]
    if unmet:
        print("\nruns that miss their scenario's [expect]:")
        print("\n".join(f"  {line}" for line in unmet))
    print(f"\nwrote {out}/: {', '.join(names)}")
    return EXIT_OK


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``run`` subcommand to ``commands``."""
    parser = commands.add_parser("run", help="replay transcripts under scenarios and write a run directory",
                                 description="Replay transcripts under scenarios with one policy; print a "
                                             "per-scenario summary and write attempts.csv, manifest.json and "
                                             "PNG figures.")
    parser.add_argument("--transcripts", default=WORKLOAD,
                        help=f"comma-separated names or paths; {WORKLOAD!r} (default) replays each "
                             f"scenario's own [workload] transcript, {ALL!r} every bundled fixture")
    parser.add_argument("--scenarios", default="",
                        help="comma-separated scenario names or files (default: every bundled scenario)")
    add_replay_options(parser)
    parser.add_argument("--out", type=Path, default=None,
                        help="run directory (default: runs/<UTC timestamp>)")
    parser.add_argument("--no-timing", action="store_true",
                        help="leave elapsed_ms out of attempts.csv (byte-identical files for a seed)")
    parser.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    parser.set_defaults(handler=run)
