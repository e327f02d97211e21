"""``ctxsim generate``: write a seeded synthetic agent transcript as our JSONL."""

from __future__ import annotations

import argparse
from pathlib import Path

from simulator.cli.common import (
    EXIT_OK,
    CliError,
    positive_int_arg,
    seed_arg,
)

__all__ = ["register", "run"]


def run(args: argparse.Namespace) -> int:
    from simulator.transcripts.generator import generate_to_file

    try:
        transcript = generate_to_file(args.seed, args.turns, args.out)
    except OSError as exc:
        raise CliError(f"{args.out}: cannot write: {exc.strerror or exc}") from None
    size = Path(args.out).stat().st_size
    print(
        f"wrote {args.out}: {len(transcript.messages)} messages, {len(transcript.facts)} facts, "
        f"{size:,} bytes, sha256 {transcript.sha256}"
    )
    return EXIT_OK


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``generate`` subcommand to ``commands``."""
    parser = commands.add_parser(
        "generate",
        help="write a seeded synthetic transcript",
        description="Write a seeded synthetic agent session as our JSONL.",
    )
    parser.add_argument("--seed", type=seed_arg, default=0, help="the seed (default 0)")
    parser.add_argument("--turns", type=positive_int_arg, required=True, help="user turns")
    parser.add_argument("--out", type=Path, required=True, help="the JSONL file to write")
    parser.set_defaults(handler=run)
