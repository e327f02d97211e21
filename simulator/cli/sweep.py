"""``ctxsim sweep``: policies × knob grids × scenarios, cached and resumable, on processes or Dask."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from ctxrecover.errors import ConfigError
from ctxrecover.policy import Policy
from simulator.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    PROG,
    CliError,
    add_executor_options,
    add_scenario_options,
    coerce_policy_value,
    positive_int_arg,
    run_dir,
    seed_arg,
    seed_list,
    split_names,
    transcript_names,
)
from simulator.research.grid import Uniform

__all__ = ["register", "run"]

RANGE_SEPARATOR = ".."  # --grid NAME=LOW..HIGH: a range for --random


def _grid_option(text: str) -> tuple[str, list[object] | Uniform]:
    """``NAME=V1,V2,...`` (values) or ``NAME=LOW..HIGH`` (a range for --random), typed by the Policy field."""
    name, sep, raw = (part.strip() for part in text.partition("="))
    if not sep or not name or not raw:
        raise CliError(
            f"--grid {text!r}: expected NAME=V1,V2,... (e.g. budget_ratio=0.5,0.6) "
            f"or NAME=LOW{RANGE_SEPARATOR}HIGH with --random"
        )
    fields = {f.name: str(f.type) for f in dataclasses.fields(Policy) if f.name in Policy.fields()}
    if name not in fields:
        raise ConfigError(f"--grid {name!r} is not a Policy field; valid fields: {', '.join(fields)}")
    if RANGE_SEPARATOR in raw:
        low, _, high = raw.partition(RANGE_SEPARATOR)
        bounds = [coerce_policy_value(name, v, fields[name], "--grid") for v in (low, high)]
        if not all(isinstance(b, int | float) and not isinstance(b, bool) for b in bounds):
            raise ConfigError(f"--grid {name}: a range needs numbers, got {raw!r}")
        return name, Uniform(bounds[0], bounds[1])  # type: ignore[arg-type]
    return name, [coerce_policy_value(name, v, fields[name], "--grid") for v in raw.split(",")]


def _grid(options: Sequence[str]) -> dict[str, list[object] | Uniform]:
    grid: dict[str, list[object] | Uniform] = {}
    for text in options:
        name, values = _grid_option(text)
        if name in grid:
            raise CliError(f"--grid {name} is given twice; put all its values in one option (NAME=A,B,C)")
        grid[name] = values
    return grid


def run(args: argparse.Namespace) -> int:
    from simulator.research.report import comparison_table, markdown_table
    from simulator.research.sweep import CACHE_DIR, sweep

    grid = _grid(args.grid)
    out = run_dir(args.out)
    try:
        frame = sweep(
            grid=grid,
            random=args.random,
            seed=args.seed,
            scenarios=split_names(args.scenarios) or None,
            transcripts=transcript_names(args.transcripts),
            policies=args.policies,
            seeds=seed_list(args.seeds),
            workers=args.workers,
            dask=args.dask,
            cache_dir=args.cache,
            out_dir=out,
            figures=not args.no_figures,
        )
    except KeyboardInterrupt:
        cache = args.cache or out / CACHE_DIR
        print(
            f"{PROG}: interrupted; finished runs are cached in {cache} — run the same command to resume",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except OSError as exc:
        raise CliError(f"{out}: cannot write the sweep directory: {exc.strerror or exc}") from None
    print(markdown_table(comparison_table(frame)))
    computed, cached = frame.attrs["computed"], frame.attrs["from_cache"]
    print(f"\n{len(frame)} runs: {computed} computed, {cached} from the cache")
    print(f"wrote {out}/")
    return EXIT_OK


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``sweeping`` subcommand to ``commands``."""
    parser = commands.add_parser(
        "sweep",
        help="policies × knob grids × scenarios, cached and resumable; writes a sweep directory",
        description="Replay every policy (presets and peer baselines) at every knob point under every "
        "scenario; runs are cached per input in OUT/cache, so a rerun computes only what "
        "changed and an interrupted sweep resumes. Writes attempts.csv, summary.csv, "
        "manifest.json and the report, and prints the comparison table.",
    )
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="NAME=V1,V2,...",
        help="a Policy field and its values, repeatable (the cartesian product is run); "
        f"NAME=LOW{RANGE_SEPARATOR}HIGH draws from a range with --random",
    )
    parser.add_argument(
        "--random",
        type=positive_int_arg,
        default=None,
        metavar="N",
        help="seeded random search: N points drawn from the --grid values or ranges",
    )
    parser.add_argument("--seed", type=seed_arg, default=0, help="seed of the random search (default 0)")
    add_scenario_options(parser)
    parser.add_argument(
        "--policies",
        default="default",
        help="comma-separated presets (default, chat), baseline names, or 'baselines' "
        "for all of them (default: default)",
    )
    parser.add_argument("--seeds", default="0", help="comma-separated replay seeds (default 0)")
    add_executor_options(parser)
    parser.add_argument(
        "--out", type=Path, default=None, help="sweep directory (default: runs/<UTC timestamp>)"
    )
    parser.add_argument("--cache", type=Path, default=None, help="cache directory (default: OUT/cache)")
    parser.add_argument("--no-figures", action="store_true", help="skip the report figures")
    parser.set_defaults(handler=run)
