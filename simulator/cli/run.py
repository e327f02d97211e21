"""``ctxsim run``: replay transcripts under scenarios, print the summary table, write a run directory."""

from __future__ import annotations

import argparse
from contextlib import nullcontext
from pathlib import Path

from simulator.cli.common import (
    ALL,
    EXIT_EXPECTATION_MISSED,
    EXIT_OK,
    PROG,
    WORKLOAD,
    CliError,
    add_json_option,
    add_replay_options,
    add_report_only_option,
    policy_from_spec,
    print_json,
    run_dir,
    split_names,
    transcripts_option,
)
from simulator.cli.output import format_archive_sources, format_summary, run_document, run_line, scenario_rows
from simulator.proxy.scenario import Scenario, list_scenarios, load_scenario
from simulator.replay import ReplayResult, expectation_problems, replay
from simulator.research.run_files import (
    ATTEMPTS_CSV,
    MANIFEST_JSON,
    FigureWriter,
    manifest,
    write_attempts_csv,
    write_manifest,
)

__all__ = ["register", "run"]


def run(args: argparse.Namespace) -> int:
    policy, policy_name = policy_from_spec(args.policy)
    scenarios = [load_scenario(name) for name in (split_names(args.scenarios) or list_scenarios())]
    if args.engines == "real":
        _check_engines(scenarios)
    transcripts = transcripts_option(args.transcripts)
    out = run_dir(args.out)
    jobs = [(transcript, scenario) for scenario in scenarios for transcript in transcripts]
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"{out}: cannot write the run directory: {exc.strerror or exc}") from None
    from tqdm.auto import tqdm

    # Figures are drawn on demand (ctxsim report RUN_DIR, or --figures): drawing them costs about as much
    # CPU as the replays. With --figures a worker starts first and draws each budget curve while the
    # next replays run.
    figures = FigureWriter(out) if args.figures else None

    results: list[ReplayResult] = []
    with figures or nullcontext(), tqdm(total=len(jobs), desc=PROG, unit="replay", disable=None) as progress:
        for transcript, scenario in jobs:
            progress.set_postfix_str(scenario.name, refresh=False)
            result = replay(
                transcript,
                scenario,
                policy=policy,
                seed=args.seed,
                transport=args.transport,
                policy_name=policy_name,
                engines=args.engines,
            )
            results.append(result)
            if figures is not None:
                figures.add(result)
            progress.update()
        try:
            files = [write_attempts_csv(results, out / ATTEMPTS_CSV, timing=not args.no_timing)]
            if figures is not None:
                files += figures.finish(results)
            names = [p.name for p in files] + [MANIFEST_JSON]
            document = manifest(
                results,
                policy=policy,
                policy_name=policy_name,
                seed=args.seed,
                transport=args.transport,
                files=names,
            )
            write_manifest(out / MANIFEST_JSON, document)
        except OSError as exc:
            raise CliError(f"{out}: cannot write the run directory: {exc.strerror or exc}") from None
    missed = any(expectation_problems(r) for r in results)
    if args.json:
        print_json(
            {
                "run_dir": str(out),
                "files": names,
                "expectations_met": not missed,
                "scenarios": scenario_rows(results),
                "runs": [run_document(r) for r in results],
            }
        )
    else:
        _print_report(results, out, names)
    return EXIT_EXPECTATION_MISSED if missed and not args.report_only else EXIT_OK


def _check_engines(scenarios: list[Scenario]) -> None:
    """Every engine the scenarios name is installed (else one line naming its Debian packages)."""
    from simulator.engines import EngineError, engine_class

    for name in dict.fromkeys(s.engine for s in scenarios if s.engine is not None):
        try:
            engine_class(name).check_available()
        except (EngineError, ValueError) as error:
            raise CliError(str(error)) from None


def _print_report(results: list[ReplayResult], out: Path, names: list[str]) -> None:
    print(format_summary(results))
    sources = format_archive_sources(results)
    if sources is not None:
        print("\nchars archived by source:")
        print(sources)
    notes = [f"{r.scenario.name} × {r.transcript.name}: {note}" for r in results for note in r.notes]
    if notes:
        print("\nnotes:")
        print("\n".join(f"  {line}" for line in notes))
    unmet = [run_line(r) for r in results if expectation_problems(r)]
    if unmet:
        print("\nruns that miss their scenario's [expect]:")
        print("\n".join(f"  {line}" for line in unmet))
    print(f"\nwrote {out}/: {', '.join(names)}")
    if not any(name.endswith(".png") for name in names):
        print(f"figures: {PROG} report {out}")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``run`` subcommand to ``commands``."""
    parser = commands.add_parser(
        "run",
        help="replay transcripts under scenarios and write a run directory",
        description="Replay transcripts under scenarios with one policy; print a "
        "per-scenario summary and write attempts.csv and manifest.json "
        "(ctxsim report RUN_DIR draws the figures; --figures draws a "
        "budget curve per run and the outcome matrix while the replays "
        "run). Exits 1 when a run misses its scenario's [expect].",
    )
    parser.add_argument(
        "--transcripts",
        default=WORKLOAD,
        help=f"comma-separated names or paths; {WORKLOAD!r} (default) replays each "
        f"scenario's own [workload] transcript, {ALL!r} every bundled fixture",
    )
    parser.add_argument(
        "--scenarios",
        default="",
        help="comma-separated scenario names or files (default: every bundled scenario)",
    )
    add_replay_options(parser)
    parser.add_argument(
        "--engines",
        choices=("mock", "real"),
        default="mock",
        help="mock (default): the scenarios' mock faults; real: a scenario that names an engine "
        '(engine = "haproxy") replays through that real program on loopback — a slower tier',
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="run directory (default: runs/<UTC timestamp>)"
    )
    parser.add_argument(
        "--no-timing",
        action="store_true",
        help="leave elapsed_ms out of attempts.csv (byte-identical files for a seed)",
    )
    parser.add_argument(
        "--figures",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="draw a budget curve per run and the outcome matrix as PNG files, in a worker "
        "process while the replays run (default: no; ctxsim report RUN_DIR draws them "
        "on demand)",
    )
    add_json_option(parser, "the per-scenario and per-run numbers")
    add_report_only_option(parser)
    parser.set_defaults(handler=run)
