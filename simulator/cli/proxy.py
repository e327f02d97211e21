"""``ctxsim proxy``: a fault-injecting loopback middlebox in front of a mock provider or a real URL."""

from __future__ import annotations

import argparse
import sys
import time
from types import MappingProxyType

from simulator.cli.common import (
    EXIT_OK,
    PROG,
    CliError,
    positive_int_arg,
    seconds_arg,
    seed_arg,
)
from simulator.proxy.loopback import LoopbackServer
from simulator.proxy.scenario import DEFAULT_CONTEXT_WINDOWS

__all__ = ["register", "run"]

MOCK_PREFIX = "mock:"
MOCK_FORMATS: MappingProxyType[str, str] = MappingProxyType(
    {
        "openai": "openai-chat",
        "openai-chat": "openai-chat",
        "openai-responses": "openai-responses",
        "anthropic": "anthropic",
        "gemini": "gemini",
        "bedrock": "bedrock-converse",
        "bedrock-converse": "bedrock-converse",
    }
)
# How to point a client at the proxy, per wire format ({url} is the proxy's base URL).
SDK_HINTS: MappingProxyType[str, tuple[str, ...]] = MappingProxyType(
    {
        "openai-chat": (
            "export OPENAI_BASE_URL={url}/v1",
            'openai.OpenAI(base_url="{url}/v1", api_key="sk-test", max_retries=0)',
        ),
        "openai-responses": (
            "export OPENAI_BASE_URL={url}/v1",
            'openai.OpenAI(base_url="{url}/v1", api_key="sk-test", max_retries=0).responses.create(...)',
        ),
        "anthropic": (
            "export ANTHROPIC_BASE_URL={url}",
            'anthropic.Anthropic(base_url="{url}", api_key="sk-test", max_retries=0)',
        ),
        "gemini": ('HttpxSender("gemini", base_url="{url}", model="gemini-2.5-pro")',),
        "bedrock-converse": (
            'HttpxSender("bedrock-converse", base_url="{url}", '
            'model="anthropic.claude-3-5-sonnet-20241022-v2:0")',
        ),
    }
)
PROXY_POLL_S = 0.1


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise CliError(f"--listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8080 (port 0: any free port)")
    return host.strip("[]"), int(port)


def run(args: argparse.Namespace) -> int:
    from simulator.providers.mock import MockProvider
    from simulator.proxy.fault_specs import parse_fault_spec
    from simulator.proxy.middlebox import Middlebox

    host, port = _listen(args.listen)
    faults = [parse_fault_spec(spec) for spec in args.fault]
    upstream_url: str | None = None
    fmt: str | None = None
    if args.upstream.startswith(MOCK_PREFIX):
        fmt = MOCK_FORMATS.get(args.upstream.removeprefix(MOCK_PREFIX))
        if fmt is None:
            raise CliError(f"--upstream {args.upstream!r}: unknown mock; use one of "
                           + ", ".join(MOCK_PREFIX + name for name in MOCK_FORMATS))
        window = args.context_window or DEFAULT_CONTEXT_WINDOWS[fmt]
        box = Middlebox(MockProvider(fmt, context_window=window, seed=args.seed), faults, seed=args.seed)
        target = f"mock {fmt} provider (context window {window:,} tokens)"
    elif args.upstream.startswith(("http://", "https://")):
        upstream_url = args.upstream
        box = Middlebox(None, faults, seed=args.seed)
        target = upstream_url
    else:
        raise CliError(f"--upstream {args.upstream!r}: expected mock:FORMAT ({', '.join(MOCK_FORMATS)}) "
                       "or an http(s):// URL")
    try:
        server = LoopbackServer(box, host=host, port=port, upstream=upstream_url)
    except ValueError as exc:
        raise CliError(f"--listen {args.listen!r}: {exc}") from None
    with server:
        url = server.base_url
        print(f"{PROG} proxy listening on {url} → {target}")
        for fault in faults:
            print(f"  fault: {fault}")
        hints = SDK_HINTS[fmt] if fmt else (f"send requests to {url}<path> instead of {upstream_url}<path>",)
        print("point a client at it:")
        for hint in hints:
            print("  " + hint.format(url=url))
        until = f" (or after {args.max_seconds:g} s)" if args.max_seconds else ""
        print(f"stop with Ctrl-C{until}", flush=True)
        _serve(server, args.max_seconds)
    print(f"served {len(server.records)} request(s)")
    return EXIT_OK


def _serve(server: LoopbackServer, max_seconds: float | None) -> None:
    """Print each exchange as it happens until Ctrl-C or ``max_seconds``."""
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    shown = 0
    try:
        while deadline is None or time.monotonic() < deadline:
            time.sleep(PROXY_POLL_S)
            records = server.records
            for record in records[shown:]:
                status = f" {record.status}" if record.status is not None else ""
                print(f"  turn {record.turn}: {record.method} {record.path} {record.body_bytes:,} B → "
                      f"{record.outcome}{status}", flush=True)
            shown = len(records)
    except KeyboardInterrupt:
        print("stopping", file=sys.stderr)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``proxy`` subcommand to ``commands``."""
    parser = commands.add_parser("proxy", help="a loopback HTTP middlebox in front of a mock or a real URL",
                                 description="Serve a fault-injecting middlebox on a loopback port in front "
                                             "of a mock provider or a real upstream URL, until Ctrl-C.")
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT on loopback (default 127.0.0.1:0)")
    parser.add_argument("--upstream", default="mock:openai",
                        help=f"mock:FORMAT ({', '.join(MOCK_FORMATS)}) or an http(s):// URL")
    parser.add_argument("--fault", action="append", default=[],
                        help="a fault spec, repeatable, e.g. body-cap:128KB:waf-403-html")
    parser.add_argument("--context-window", type=positive_int_arg, default=None,
                        help="the mock provider's context window in tokens (default: per format)")
    parser.add_argument("--seed", type=seed_arg, default=0, help="seed of the middlebox and the mock")
    parser.add_argument("--max-seconds", type=seconds_arg, default=None, help="stop after this many seconds")
    parser.set_defaults(handler=run)
