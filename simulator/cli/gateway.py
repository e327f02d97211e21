"""``ctxsim gateway ENGINE``: a real gateway from the system's packages in front of a mock provider or a URL.

The engine runs on a loopback port under a generated configuration in a temp dir, with the knobs
given (``--cap``, ``--header-cap``, ``--deny``; ``--crs`` and ``--threshold`` for the ModSecurity
engines), until Ctrl-C or SIGTERM; the output says how to point a client at it, as ``ctxsim proxy``
does, and which mock faults imitate it. A missing engine is one line naming the Debian packages.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack

from simulator.cli.common import EXIT_OK, PROG, CliError, positive_int_arg, seconds_arg, seed_arg
from simulator.cli.proxy import MOCK_HOSTS, MOCK_PREFIX, SDK_HINTS, mock_host, serve_until_stopped
from simulator.engines import ENGINES, MODSECURITY_ENGINES, Engine, EngineError, engine_class
from simulator.proxy.fault_specs import fault_spec
from simulator.proxy.scenario import DEFAULT_CONTEXT_WINDOWS

__all__ = ["register", "run"]

DESCRIPTION = (
    "Run a real gateway (nginx, HAProxy, Apache or nginx with ModSecurity and the OWASP CRS, Squid, "
    "Caddy) from the system's packages on a loopback port, in front of a mock provider or an http:// "
    "URL, until Ctrl-C or SIGTERM."
)


def _engine(args: argparse.Namespace, upstream: str) -> Engine:
    cls = engine_class(args.engine)
    knobs: dict[str, object] = {"upstream": upstream, "port": args.port}
    if args.cap is not None:
        knobs["body_cap"] = cls.read_size("--cap", args.cap)
    if args.header_cap is not None:
        knobs["header_cap"] = cls.read_size("--header-cap", args.header_cap)
    if args.deny:
        knobs["deny"] = tuple(args.deny)
    modsecurity = {"crs_paranoia": args.crs, "inbound_threshold": args.threshold}
    given = {name: value for name, value in modsecurity.items() if value is not None}
    if given and cls.name not in MODSECURITY_ENGINES:
        option = "--crs" if "crs_paranoia" in given else "--threshold"
        raise CliError(f"{option} needs a ModSecurity engine ({', '.join(sorted(MODSECURITY_ENGINES))})")
    return cls(**knobs, **given)  # type: ignore[arg-type]


def run(args: argparse.Namespace) -> int:
    from simulator.providers.service import HOSTS, MockService
    from simulator.proxy.loopback import LoopbackServer

    engine_class(args.engine).check_available()
    upstream = args.upstream or MOCK_PREFIX + "openai"
    with ExitStack() as stack:
        fmt: str | None = None
        if upstream.startswith(MOCK_PREFIX):
            host = mock_host(upstream)
            fmt = HOSTS[host][0][0]
            window = args.context_window or DEFAULT_CONTEXT_WINDOWS[fmt]
            service = MockService.for_host(host, context_window=window, seed=args.seed)
            mock = stack.enter_context(LoopbackServer(service, max_body_bytes=64 * 1024 * 1024))
            url, target = (
                mock.base_url,
                f"mock {upstream.removeprefix(MOCK_PREFIX)} provider on {mock.base_url}",
            )
        else:
            url, target = upstream, upstream
        engine = _engine(args, url)
        stack.enter_context(engine)
        _announce(engine, target, fmt, args)
        reason = serve_until_stopped(args.max_seconds)
        if reason:
            print(f"stopping ({reason})", file=sys.stderr)
    print(f"stopped {engine.name}")
    return EXIT_OK


def _announce(engine: Engine, target: str, fmt: str | None, args: argparse.Namespace) -> None:
    print(f"{PROG} gateway {engine.name} {engine.version()} listening on {engine.url} → {target}")
    print(f"  {engine.describe()}")
    faults = [fault_spec(fault) for fault in engine.imitation()]
    print(f"  the mock that imitates it: {PROG} proxy " + " ".join(f"--fault {spec}" for spec in faults))
    print("point a client at it:")
    hints = SDK_HINTS[fmt] if fmt else (f"send requests to {engine.url}<path>",)
    for hint in hints:
        print("  " + hint.format(url=engine.url))
    print(f"record it for {PROG} infer: {PROG} proxy --upstream {engine.url} --record gateway.jsonl")
    until = f" (or after {args.max_seconds:g} s)" if args.max_seconds else ""
    print(f"stop with Ctrl-C or SIGTERM{until}", flush=True)


def _guarded(args: argparse.Namespace) -> int:
    try:
        return run(args)
    except EngineError as error:
        raise CliError(str(error)) from None


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``gateway`` subcommand to ``commands``."""
    parser = commands.add_parser(
        "gateway", help="a real gateway (nginx, HAProxy, …) on loopback", description=DESCRIPTION
    )
    parser.add_argument(
        "engine", choices=list(ENGINES), metavar="ENGINE", help=f"one of {', '.join(ENGINES)}"
    )
    parser.add_argument(
        "--cap", default=None, metavar="SIZE", help="the body cap, read as the engine reads sizes (128KB)"
    )
    parser.add_argument("--header-cap", default=None, metavar="SIZE", help="the request header cap (8KB)")
    parser.add_argument(
        "--deny",
        action="append",
        default=[],
        metavar="PREFIX",
        help="refuse paths under PREFIX ('/': all), repeatable",
    )
    parser.add_argument(
        "--crs",
        type=int,
        choices=(1, 2, 3, 4),
        default=None,
        metavar="PL",
        help="CRS paranoia level (ModSecurity engines; default 1)",
    )
    parser.add_argument(
        "--threshold", type=positive_int_arg, default=None, help="CRS inbound anomaly threshold (default 5)"
    )
    parser.add_argument(
        "--upstream",
        default=None,
        help=f"mock:FORMAT ({', '.join(MOCK_HOSTS)}) or an http://HOST:PORT URL (default mock:openai)",
    )
    parser.add_argument("--port", type=int, default=0, help="the loopback port (default: a free one)")
    parser.add_argument(
        "--context-window", type=positive_int_arg, default=None, help="the mock's context window in tokens"
    )
    parser.add_argument("--seed", type=seed_arg, default=0, help="seed of the mock provider")
    parser.add_argument("--max-seconds", type=seconds_arg, default=None, help="stop after this many seconds")
    parser.set_defaults(handler=_guarded)
