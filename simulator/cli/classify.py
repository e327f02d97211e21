"""``ctxsim classify``: classify an error body or message and print kind, reason and evidence."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ctxrecover.classify import classify
from simulator.cli.common import (
    EXIT_OK,
    CliError,
    add_json_option,
    positive_int_arg,
    print_json,
)

__all__ = ["register", "run"]

CLASSIFY_FIELDS: tuple[tuple[str, str], ...] = (
    ("kind", "kind"),
    ("reason", "reason"),
    ("reason text", "reason_text"),
    ("provider", "provider"),
    ("status", "status"),
    ("rejected bytes", "rejected_bytes"),
    ("recoverable", "recoverable"),
    ("evidence", "evidence"),
)


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise CliError(f"--header {text!r}: expected NAME:VALUE, e.g. content-type:text/html")
    return name.strip(), value.strip()


def _plain(value: object) -> object:
    """A field as a JSON value: enums by their value, the rest as is."""
    return getattr(value, "value", value)


def run(args: argparse.Namespace) -> int:
    headers = dict(_header(h) for h in args.header)
    if args.file == "-":
        body = sys.stdin.read()
    else:
        try:
            body = Path(args.file).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise CliError(f"{args.file}: cannot read: {exc.strerror or exc}") from None
    failure = classify(
        status=args.status, body=body, headers=headers or None, request_bytes=args.request_bytes
    )
    if args.json:
        print_json({name: _plain(getattr(failure, name)) for _label, name in CLASSIFY_FIELDS})
        return EXIT_OK
    width = max(len(label) for label, _ in CLASSIFY_FIELDS)
    for label, name in CLASSIFY_FIELDS:
        value = getattr(failure, name)
        if isinstance(value, bool):
            value = "yes" if value else "no"
        print(f"{label + ':':{width + 1}} {'—' if value is None or value == '' else value}")
    return EXIT_OK


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``check`` subcommand to ``commands``."""
    parser = commands.add_parser(
        "classify",
        help="classify an error body or message",
        description="Classify an error body or message (ctxrecover.classify) and "
        "print kind, reason, reason text, provider and evidence.",
    )
    parser.add_argument("file", nargs="?", default="-", help="a file holding the body, - for stdin (default)")
    parser.add_argument("--status", type=int, default=None, help="the HTTP status of the answer")
    parser.add_argument(
        "--header", action="append", default=[], help="response header NAME:VALUE, repeatable"
    )
    parser.add_argument(
        "--request-bytes", type=positive_int_arg, default=None, help="size of the rejected request body"
    )
    add_json_option(parser, "the classification")
    parser.set_defaults(handler=run)
