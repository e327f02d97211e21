"""``ctxsim proxy``: a fault-injecting loopback middlebox in front of a mock provider or a real URL.

Faults come from ``--fault`` specs and ``--scenario``; with ``--admin`` they can be changed
while it runs (``ctxsim fault``). ``--log-json`` writes one JSON line per request;
``--record`` writes each exchange's shape for ``ctxsim infer``. Ctrl-C or SIGTERM stops it
with the same summary and exit code 0.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType, MappingProxyType
from typing import Any

from ctxrecover.sizes import parse_payload_size
from simulator.cli.common import EXIT_OK, PROG, CliError, positive_int_arg, seconds_arg, seed_arg
from simulator.proxy.journal import (
    RECORD_FORMAT,
    BackgroundWriter,
    ExchangeRecord,
    ExchangeTrace,
    JsonLines,
    log_entry,
    record_entry,
)
from simulator.proxy.loopback import TURN_HEADER, LoopbackServer, ServerStartError, loopback_host
from simulator.proxy.redact import redact_url
from simulator.proxy.scenario import DEFAULT_CONTEXT_WINDOWS

__all__ = ["build_app", "mock_host", "register", "run", "serve_until_stopped"]

MOCK_PREFIX = "mock:"
# mock:NAME → the host MockService.for_host mocks (mock:openai serves Chat Completions and Responses).
MOCK_HOSTS: MappingProxyType[str, str] = MappingProxyType(
    {
        "openai": "openai",
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
# Which option names which of the server's listening ports, and why a bind fails, in words.
OPTION_OF_LISTENER: MappingProxyType[str, str] = MappingProxyType({"server": "--listen", "admin": "--admin"})
BIND_FAILURES: MappingProxyType[int, str] = MappingProxyType(
    {
        errno.EADDRINUSE: "the port is in use (another program, or another ctxsim proxy, holds it)",
        errno.EACCES: "permission denied (ports below 1024 need privileges)",
        errno.EADDRNOTAVAIL: "no such address on this machine",
    }
)
KEEP_CALLS = 32  # a mock keeps its last calls only: a long-running proxy stays within bounded memory
KEEP_REJECTIONS = 256
POLL_S = 0.2
DESCRIPTION = (
    "Serve a fault-injecting middlebox on a loopback port in front of a mock provider or a real "
    "upstream URL, until Ctrl-C or SIGTERM."
)


def listen_address(option: str, text: str) -> tuple[str, int]:
    """HOST:PORT of a listening option (the host is checked for loopback by the server)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise CliError(f"{option} {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8080 (port 0: any free port)")
    return host.strip("[]"), int(port)


def size_arg(text: str) -> int:
    size = parse_payload_size(text)
    if size <= 0:
        raise argparse.ArgumentTypeError(f"expected a size such as 64MB or 512KB, got {text!r}")
    return size


def mock_host(upstream: str) -> str:
    """The mock host of a ``mock:NAME`` upstream (CliError listing the mocks otherwise)."""
    host = MOCK_HOSTS.get(upstream.removeprefix(MOCK_PREFIX))
    if host is None:
        raise CliError(
            f"--upstream {upstream!r}: unknown mock; use one of "
            + ", ".join(MOCK_PREFIX + name for name in MOCK_HOSTS)
        )
    return host


def build_app(args: argparse.Namespace) -> tuple[Any, str | None, str, str | None]:
    """The middlebox (with its mock, if any), the upstream URL, what it fronts, and the wire format."""
    from simulator.providers.service import HOSTS, MockService
    from simulator.proxy.fault_specs import parse_fault_spec
    from simulator.proxy.middlebox import Middlebox
    from simulator.proxy.scenario import load_scenario

    scenario = load_scenario(args.scenario) if args.scenario else None
    seed = args.seed if args.seed is not None else (scenario.seed if scenario else 0)
    faults = [*(scenario.faults if scenario else ()), *(parse_fault_spec(spec) for spec in args.fault)]
    upstream = args.upstream or MOCK_PREFIX + (scenario.provider.format if scenario else "openai")
    if upstream.startswith(MOCK_PREFIX):
        host = mock_host(upstream)
        fmt = HOSTS[host][0][0]
        window = args.context_window or (
            scenario.provider.context_window if scenario else DEFAULT_CONTEXT_WINDOWS[fmt]
        )
        service = MockService.for_host(host, context_window=window, seed=seed, keep_calls=KEEP_CALLS)
        box = Middlebox(service, faults, seed=seed, keep_rejections=KEEP_REJECTIONS)
        target = f"mock {upstream.removeprefix(MOCK_PREFIX)} provider (context window {window:,} tokens)"
        return box, None, target + "\n  serves: " + ", ".join(service.endpoints()), fmt
    if upstream.startswith(("http://", "https://")):
        box = Middlebox(None, faults, seed=seed, keep_rejections=KEEP_REJECTIONS)
        return box, upstream, redact_url(upstream), None
    raise CliError(
        f"--upstream {upstream!r}: expected mock:FORMAT ({', '.join(MOCK_HOSTS)}) or an http(s):// URL"
    )


class _Output:
    """Prints each exchange and writes the JSON log and the record, on a writer thread (not the server's)."""

    def __init__(self, log: JsonLines | None, record: JsonLines | None) -> None:
        self.log, self.record = log, record
        self.writer = BackgroundWriter()

    def __call__(self, entry: ExchangeRecord, trace: ExchangeTrace) -> None:
        status = f" {entry.status}" if entry.status is not None else ""
        fault = f" [{entry.fault_name}]" if entry.fault_name else ""
        line = (
            f"  turn {entry.turn}: {entry.method} {entry.path} {entry.body_bytes:,} B → "
            f"{entry.outcome}{status}{fault}"
        )
        self.writer.submit(_print, line)
        if self.log is not None:
            self.writer.submit(self.log.write, log_entry(entry))
        if self.record is not None:
            self.writer.submit(self.record.write, record_entry(entry, trace))

    def close(self) -> None:
        self.writer.close()
        for file in (self.log, self.record):
            if file is not None:
                file.close()


def _print(line: str) -> None:
    print(line, flush=True)


def _open(option: str, path: Path | None, header: dict[str, Any] | None = None) -> JsonLines | None:
    if path is None:
        return None
    try:
        return JsonLines(path, header)
    except OSError as exc:
        raise CliError(f"{option} {path}: cannot write: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    host, port = listen_address("--listen", args.listen)
    admin_port = None
    if args.admin is not None:
        admin_host, admin_port = listen_address("--admin", args.admin)
        try:
            same = loopback_host(admin_host, "the admin API") == loopback_host(host)
        except ValueError as exc:
            raise CliError(f"--admin {args.admin!r}: {exc}") from None
        if not same:
            raise CliError(f"--admin {args.admin!r}: the admin API listens on the --listen host ({host})")
        if admin_port == port != 0:
            raise CliError(
                f"--admin {args.admin}: that is the --listen address; the admin API needs a port of its "
                f"own, e.g. --admin {admin_host}:0 (any free port)"
            )
    box, upstream_url, target, fmt = build_app(args)
    log = _open("--log-json", args.log_json)
    record = _open(
        "--record",
        args.record,
        {
            "format": RECORD_FORMAT,
            "upstream": target.split("\n")[0],
            "record_bodies": args.record_bodies,
            "started_at": time.time(),
        },
    )
    output = _Output(log, record)
    try:
        server = LoopbackServer(
            box,
            host=host,
            port=port,
            upstream=upstream_url,
            admin_port=admin_port,
            on_exchange=output,
            record_bodies=args.record_bodies,
            **_limits(args),
        )
    except ValueError as exc:
        output.close()
        raise CliError(f"--listen {args.listen!r}: {exc}") from None
    try:
        server.start()
    except ServerStartError as exc:
        output.close()
        raise _start_error(exc) from None
    try:
        _announce(server, box, target, fmt, upstream_url, args)
        reason = serve_until_stopped(args.max_seconds)
        if reason:
            print(f"stopping ({reason})", file=sys.stderr)
    finally:
        server.stop()
        output.close()
    for problem in dict.fromkeys([*server.observer_errors, *output.writer.errors]):
        print(f"{PROG}: warning: could not write a log or record line: {problem}", file=sys.stderr)
    if output.writer.dropped:
        print(
            f"{PROG}: warning: {output.writer.dropped:,} output line(s) dropped: the console or the log "
            "file fell behind",
            file=sys.stderr,
        )
    print(f"served {server.served} request(s)")
    return EXIT_OK


def _start_error(exc: ServerStartError) -> CliError:
    """A port that could not be bound, named by its option and address."""
    option = OPTION_OF_LISTENER.get(exc.listener or "")
    if option is None:
        return CliError(f"cannot listen: {exc}")
    reason = BIND_FAILURES.get(exc.errno or 0) or (os.strerror(exc.errno) if exc.errno else str(exc))
    return CliError(
        f"{option} {exc.address}: cannot listen there: {reason}; "
        f"give {option} another port (0: any free port)"
    )


def _limits(args: argparse.Namespace) -> dict[str, Any]:
    names = {
        "max_body": "max_body_bytes",
        "max_inflight": "max_inflight_body_bytes",
        "max_connections": "max_connections",
        "head_timeout": "head_timeout_s",
        "body_timeout": "body_timeout_s",
        "min_body_rate": "min_body_rate",
        "handler_timeout": "handler_timeout_s",
    }
    return {
        keyword: getattr(args, option)
        for option, keyword in names.items()
        if getattr(args, option) is not None
    }


def _announce(
    server: LoopbackServer,
    box: Any,
    target: str,
    fmt: str | None,
    upstream: str | None,
    args: argparse.Namespace,
) -> None:
    url = server.base_url
    print(f"{PROG} proxy listening on {url} → {target}")
    for name, fault in box.named_faults:
        print(f"  fault {name}: {fault}")
    if args.admin is not None:
        print(
            f"  admin API on {server.admin_url} (GET/POST /faults, DELETE /faults/NAME, POST /reset); "
            f"try: {PROG} fault list --admin {server.admin_url}"
        )
    if args.log_json:
        print(f"  one JSON line per request → {args.log_json}")
    if args.record:
        bodies = "with" if args.record_bodies else "without"
        print(
            f"  recording each exchange ({bodies} bodies) → {args.record}; then: {PROG} infer {args.record}"
        )
    instead = redact_url(upstream or "")
    hints = SDK_HINTS[fmt] if fmt else (f"send requests to {url}<path> instead of {instead}<path>",)
    print("point a client at it:")
    for hint in hints:
        print("  " + hint.format(url=url))
    print(f"turns count requests across all clients; a client sets its own with the {TURN_HEADER}: N header")
    until = f" (or after {args.max_seconds:g} s)" if args.max_seconds else ""
    print(f"stop with Ctrl-C or SIGTERM{until}", flush=True)


@contextmanager
def _on_sigterm(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """Install ``handler`` for SIGTERM while serving (only the main thread may)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def serve_until_stopped(max_seconds: float | None) -> str:
    """Wait until Ctrl-C, SIGTERM or ``max_seconds``; the reason to stop ("" when the time ran out)."""
    stop = threading.Event()
    reasons: list[str] = []

    def terminate(signum: int, frame: FrameType | None) -> None:
        reasons.append("SIGTERM")
        stop.set()

    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    with _on_sigterm(terminate):
        try:
            while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
                stop.wait(POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic())))
        except KeyboardInterrupt:
            reasons.append("Ctrl-C")
    return reasons[0] if reasons else ""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``proxy`` subcommand to ``commands``."""
    parser = commands.add_parser(
        "proxy", help="a loopback HTTP middlebox in front of a mock or a real URL", description=DESCRIPTION
    )
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT on loopback (default 127.0.0.1:0)")
    parser.add_argument(
        "--upstream",
        default=None,
        help=f"mock:FORMAT ({', '.join(MOCK_HOSTS)}) or an http(s):// URL "
        "(default mock:openai, or the --scenario's provider)",
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        help="a fault spec, repeatable, e.g. body-cap:128KB:waf-403-html or latency:0.5",
    )
    parser.add_argument(
        "--scenario",
        default=None,
        help="a bundled scenario name or a .toml/.json file: its faults (and, without "
        "--upstream, its mock provider)",
    )
    parser.add_argument(
        "--admin",
        default=None,
        metavar="HOST:PORT",
        help="serve the JSON admin API here (GET/POST /faults, DELETE /faults/NAME, POST /reset)",
    )
    parser.add_argument(
        "--log-json",
        type=Path,
        default=None,
        metavar="FILE",
        help="write one JSON line per request (turn, sizes, fault, outcome, timings; redacted)",
    )
    parser.add_argument(
        "--record",
        type=Path,
        default=None,
        metavar="FILE",
        help="record each exchange's shape for ctxsim infer (headers without secrets, page "
        "fingerprints, timings)",
    )
    parser.add_argument(
        "--record-bodies", action="store_true", help="also record request and response bodies"
    )
    parser.add_argument(
        "--context-window",
        type=positive_int_arg,
        default=None,
        help="the mock provider's context window in tokens (default: per format)",
    )
    parser.add_argument("--seed", type=seed_arg, default=None, help="seed of the middlebox and the mock")
    parser.add_argument("--max-seconds", type=seconds_arg, default=None, help="stop after this many seconds")
    limits = parser.add_argument_group("limits (defaults in simulator.proxy.limits.ServerLimits)")
    limits.add_argument("--max-body", type=size_arg, default=None, metavar="SIZE", help="per request (64MB)")
    limits.add_argument(
        "--max-inflight",
        type=size_arg,
        default=None,
        metavar="SIZE",
        help="request bodies held at once, all clients together (256MB); beyond: 503",
    )
    limits.add_argument("--max-connections", type=positive_int_arg, default=None, help="(256)")
    limits.add_argument(
        "--head-timeout",
        type=seconds_arg,
        default=None,
        metavar="S",
        help="a request head must be complete this long after its first byte (10)",
    )
    limits.add_argument(
        "--body-timeout",
        type=seconds_arg,
        default=None,
        metavar="S",
        help="grace before --min-body-rate applies to a body (10)",
    )
    limits.add_argument(
        "--min-body-rate",
        type=size_arg,
        default=None,
        metavar="SIZE",
        help="bytes per second a body must average after its grace (16KB)",
    )
    limits.add_argument(
        "--handler-timeout",
        type=seconds_arg,
        default=None,
        metavar="S",
        help="the mock's or the upstream's answer, counted from the call (120)",
    )
    parser.set_defaults(handler=run)
