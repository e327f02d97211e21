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

TURNS_HELP = (
    "how many turns: a turn is one assistant reply — one request to the provider, one "
    "session.complete(), what `ctxsim replay` counts; a user task with its tool steps and "
    "answer spans several turns"
)


def run(args: argparse.Namespace) -> int:
    from simulator.transcripts.generator import generate_to_file

    try:
        transcript = generate_to_file(args.seed, None, args.out, replies=args.turns)
    except OSError as exc:
        raise CliError(f"{args.out}: cannot write: {exc.strerror or exc}") from None
    size = Path(args.out).stat().st_size
    print(
        f"wrote {args.out}: {len(transcript.messages)} messages in {args.turns} turns "
        f"({transcript.metadata['turns']} user tasks), {len(transcript.facts)} facts, "
        f"{size:,} bytes, sha256 {transcript.sha256}"
    )
    return EXIT_OK


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``generate`` subcommand to ``commands``."""
    parser = commands.add_parser(
        "generate",
        help="write a seeded synthetic transcript",
        description="Write a seeded synthetic agent session as our JSONL, with exactly --turns "
        "assistant replies (the turns a replay of it runs).",
    )
    parser.add_argument("--seed", type=seed_arg, default=0, help="the seed (default 0)")
    parser.add_argument("--turns", type=positive_int_arg, required=True, help=TURNS_HELP)
    parser.add_argument("--out", type=Path, required=True, help="the JSONL file to write")
    parser.set_defaults(handler=run)
