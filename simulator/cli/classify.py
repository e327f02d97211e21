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
from simulator.resources import data_dir

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
# A page shipped with the package (fixtures/pages/, inside the wheel too): ``bundled:403-cloudflare``.
BUNDLED_PREFIX = "bundled:"
STDIN = "-"


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise CliError(f"--header {text!r}: expected NAME:VALUE, e.g. content-type:text/html")
    return name.strip(), value.strip()


def _plain(value: object) -> object:
    """A field as a JSON value: enums by their value, the rest as is."""
    return getattr(value, "value", value)


def bundled_pages() -> dict[str, Path]:
    """The fault pages shipped with the package, by name (the file name without its suffix)."""
    return {path.stem: path for path in sorted(data_dir("pages").iterdir()) if path.is_file()}


def _page_path(spec: str) -> Path:
    """The file ``spec`` names: a path, or ``bundled:NAME`` for a page shipped with the package."""
    if not spec.startswith(BUNDLED_PREFIX):
        return Path(spec)
    name = spec.removeprefix(BUNDLED_PREFIX)
    pages = bundled_pages()
    if name not in pages:
        raise CliError(
            f"{spec}: no bundled page named {name!r}; `ctxsim classify --list-pages` lists them "
            f"(e.g. {BUNDLED_PREFIX}{next(iter(pages))})"
        )
    return pages[name]


def _read_body(spec: str) -> str:
    if spec == STDIN:
        return sys.stdin.read()
    try:
        return _page_path(spec).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise CliError(f"{spec}: cannot read: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    if args.list_pages:
        for name in bundled_pages():
            print(BUNDLED_PREFIX + name)
        return EXIT_OK
    headers = dict(_header(h) for h in args.header)
    body = _read_body(args.file)
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
    """Add the ``classify`` subcommand to ``commands``."""
    parser = commands.add_parser(
        "classify",
        help="classify an error body or message",
        description="Classify an error body or message (ctxrecover.classify) and "
        "print kind, reason, reason text, provider and evidence.",
    )
    parser.add_argument(
        "file",
        nargs="?",
        default=STDIN,
        help=f"a file holding the body, {BUNDLED_PREFIX}NAME for a page shipped with the package "
        f"(see --list-pages), or {STDIN} for stdin (default)",
    )
    parser.add_argument(
        "--list-pages",
        action="store_true",
        help=f"list the bundled fault pages ({BUNDLED_PREFIX}NAME) and exit",
    )
    parser.add_argument("--status", type=int, default=None, help="the HTTP status of the answer")
    parser.add_argument(
        "--header", action="append", default=[], help="response header NAME:VALUE, repeatable"
    )
    parser.add_argument(
        "--request-bytes", type=positive_int_arg, default=None, help="size of the rejected request body"
    )
    add_json_option(parser, "the classification")
    parser.set_defaults(handler=run)
