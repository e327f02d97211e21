"""``ctxsim probe``: estimate a gateway's body cap by bisection with synthetic requests."""

from __future__ import annotations

import argparse
import dataclasses
import json

from ctxrecover.sizes import format_payload_size
from simulator.cli.common import EXIT_OK, CliError
from simulator.cli.proxy import size_arg
from simulator.proxy.probe import TEMPLATES, HttpProbe, ProbeError, ProbeStep, max_requests, probe_body_cap
from simulator.proxy.redact import redact_url

__all__ = ["register", "run"]

DESCRIPTION = (
    "Post synthetic requests of chosen sizes (for a model that does not exist, so a provider "
    "answers a cheap error) and bisect the size where the gateway starts refusing them "
    "(413/431/403 pages, drops): at most ceil(log2((max - min) / resolution)) requests."
)
ENDPOINTS = {
    "openai-chat": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/ctxsim-probe:generateContent",
    "bedrock-converse": "/model/ctxsim-probe/converse",
}


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME:VALUE, e.g. 'x-api-key: sk-…', got {text!r}")
    return name.strip(), value.strip()


def _check_range(low: int, high: int, resolution: int) -> None:
    """``--min`` below ``--max`` with room for ``--resolution``, before anything is printed or sent."""
    if low >= high:
        raise CliError(
            f"--min {format_payload_size(low)} must be smaller than --max {format_payload_size(high)}: "
            "--min is a size the gateway lets through, --max one it refuses"
        )
    if resolution >= high - low:
        raise CliError(
            f"--resolution {format_payload_size(resolution)} must be smaller than --max − --min "
            f"({format_payload_size(high - low)}): there is nothing to bisect"
        )


def run(args: argparse.Namespace) -> int:
    url = args.url if args.url.startswith(("http://", "https://")) else None
    if url is None:
        raise CliError(f"probe URL {args.url!r}: expected an http(s):// URL")
    _check_range(args.min, args.max, args.resolution)
    if url.rstrip("/").count("/") <= 2:  # no path: the format's endpoint
        url = url.rstrip("/") + ENDPOINTS[args.format]
    shown = redact_url(url)
    bound = max_requests(args.min, args.max, args.resolution)
    print(
        f"probing {shown} with {args.format} bodies of {format_payload_size(args.min)}–"
        f"{format_payload_size(args.max)}, to {args.resolution:,} B: at most {bound} requests"
    )
    probe = HttpProbe(url, fmt=args.format, headers=dict(args.header), timeout_s=args.timeout)

    def send(size: int) -> ProbeStep:
        step = probe(size)
        verdict = "refused" if step.refused else "passed"
        print(f"  {size:>12,} B → {step.what} — {verdict}", flush=True)
        return step

    try:
        result = probe_body_cap(send, low=args.min, high=args.max, resolution=args.resolution)
    except ProbeError as exc:
        raise CliError(str(exc)) from None
    finally:
        probe.close()
    if args.json:
        print(json.dumps({**dataclasses.asdict(result), "found": result.found, "estimate": result.estimate}))
    elif not any(step.refused for step in result.steps):
        print(f"no cap found: every probe up to {result.passed:,} B passed (try a larger --max)")
    elif not any(not step.refused for step in result.steps):
        print(f"every probe was refused, down to {result.refused:,} B (try a smaller --min)")
    else:
        print(
            f"body cap: between {result.passed:,} B (passed) and {result.refused:,} B (refused) — about "
            f"{format_payload_size(result.estimate)} — after {len(result.steps)} requests"
        )
    return EXIT_OK


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``probe`` subcommand to ``commands``."""
    parser = commands.add_parser(
        "probe", help="estimate a gateway's body cap by bisection", description=DESCRIPTION
    )
    parser.add_argument("url", help="the gateway URL (with the endpoint path, else the --format's)")
    parser.add_argument(
        "--format",
        choices=tuple(TEMPLATES),
        default="openai-chat",
        help="the wire format of the synthetic bodies (default openai-chat)",
    )
    parser.add_argument(
        "--min", type=size_arg, default=size_arg("1KB"), help="a size that passes (default 1KB)"
    )
    parser.add_argument(
        "--max", type=size_arg, default=size_arg("16MB"), help="a size refused (default 16MB)"
    )
    parser.add_argument(
        "--resolution",
        type=size_arg,
        default=size_arg("1KB"),
        help="stop when the cap is known to this many bytes (default 1KB)",
    )
    parser.add_argument(
        "--header",
        type=_header,
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="a request header, repeatable (credentials are never printed)",
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each answer (30)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler=run)
