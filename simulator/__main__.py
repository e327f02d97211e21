"""ctxsim: the simulator's command line (``python -m simulator`` or ``ctxsim``).

==========  ========================================================================
``run``       replay transcripts under scenarios, print a summary table, write a run
              directory (``attempts.csv``, ``manifest.json``, PNG figures)
``replay``    one replay with its turn log (every event and notice, per turn/attempt)
``proxy``     a real loopback HTTP middlebox in front of a mock provider or a real URL
``sweep``     policies (presets and peer baselines) × knob grids × scenarios, cached and
              resumable, on processes or Dask; writes a sweep directory with its report
``report``    regenerate every figure and table of a run or sweep directory
``classify``  classify an error body or message (``ctxrecover.classify``)
``generate``  write a seeded synthetic transcript
==========  ========================================================================

Bad input — an unreadable or malformed transcript, an unknown scenario or fault, a
malformed schedule, a bad size or policy — prints one ``ctxsim: error: …`` line on
stderr and exits with 2; anything else is a bug and raises.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import NoReturn

from ctxrecover.classify import classify
from ctxrecover.errors import ConfigError
from ctxrecover.policy import CHAT_POLICY, DEFAULT_POLICY, Policy
from ctxrecover.sizes import parse_payload_size
from simulator.cli_output import (
    ATTEMPTS_CSV,
    MANIFEST_JSON,
    event_line,
    format_summary,
    manifest,
    run_line,
    write_attempts_csv,
    write_figures,
    write_manifest,
)
from simulator.replay import (
    FIXTURE_TRANSCRIPTS_DIR,
    TRANSPORTS,
    ReplayError,
    ReplayEvent,
    ReplayResult,
    expectation_problems,
    load_named_transcript,
    replay,
)
from simulator.schedule import DEFAULT_CONTEXT_WINDOWS, ScenarioError, list_scenarios, load_scenario
from simulator.sweep import Uniform
from simulator.transcripts import Transcript, TranscriptError
from simulator.transport import LoopbackServer

__all__ = ["POLICY_PRESETS", "build_parser", "main", "policy_from_spec"]

PROG = "ctxsim"
EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
RANGE_SEPARATOR = ".."  # --grid NAME=LOW..HIGH: a range for --random
REPORT_FORMATS = ("png", "svg", "pdf")
RUNS_DIR = Path("runs")
RUN_DIR_FORMAT = "%Y%m%d-%H%M%S"
WORKLOAD = "workload"  # --transcripts value: each scenario's own [workload] transcript
ALL = "all"

POLICY_PRESETS: MappingProxyType[str, Policy] = MappingProxyType(
    {"default": DEFAULT_POLICY, "chat": CHAT_POLICY}
)
POLICY_SIZE_FIELDS = frozenset({"assumed_payload_cap", "payload_cap", "uncapped_warning_bytes"})
NONE_WORDS = frozenset({"none", "null"})
BOOL_WORDS: MappingProxyType[str, bool] = MappingProxyType({"true": True, "false": False})

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



class CliError(ValueError):
    """Bad command-line input; the message names the option or file."""


# The validation errors that mean "bad input": one line on stderr, exit code 2.
INPUT_ERRORS: tuple[type[Exception], ...] = (
    CliError, ConfigError, ReplayError, ScenarioError, TranscriptError
)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


# -- argument types ----------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


# -- policies ------------------------------------------------------------------------------------


def _coerce_policy_value(name: str, raw: str, annotation: str, option: str = "--policy") -> object:
    text = raw.strip()
    if text.lower() in NONE_WORDS and "None" in annotation:
        return None
    base = annotation.replace(" | None", "")
    try:
        if name in POLICY_SIZE_FIELDS and not text.isdigit():
            size = parse_payload_size(text)
            if size <= 0:
                raise ValueError(text)
            return size
        if base == "int":
            return int(text)
        if base == "float":
            return float(text)
        if base == "bool":
            return BOOL_WORDS[text.lower()]
    except (KeyError, ValueError):
        kind = {"int": "an integer", "float": "a number", "bool": "true or false"}.get(base, base)
        hint = ' or a size such as "5MB"' if name in POLICY_SIZE_FIELDS else ""
        raise ConfigError(f"{option} field {name}: expected {kind}{hint}, got {raw!r}") from None
    return text


def policy_from_spec(spec: str) -> tuple[Policy, str]:
    """A policy and its name from ``default``, ``chat``, a JSON file or ``key=value,...``.

    A JSON file holds an object of Policy field overrides (``"base": "chat"`` picks
    the preset they apply to); ``key=value`` pairs override the default policy.
    Raises :class:`~ctxrecover.errors.ConfigError` naming the file or field.

    >>> policy_from_spec("keep_recent=4,payload_cap=512KB")[0].payload_cap
    524288
    """
    spec = spec.strip()
    if spec in POLICY_PRESETS:
        return POLICY_PRESETS[spec], spec
    fields = {f.name: str(f.type) for f in dataclasses.fields(Policy) if f.name != "env_problems"}
    if "=" in spec:
        overrides: dict[str, object] = {}
        for pair in filter(None, (p.strip() for p in spec.split(","))):
            key, sep, value = (s.strip() for s in pair.partition("="))
            if not sep or key not in fields:
                raise ConfigError(
                    f"--policy {pair!r}: expected key=value with a Policy field as key "
                    "(e.g. keep_recent=4,payload_cap=512KB)"
                )
            overrides[key] = _coerce_policy_value(key, value, fields[key])
        return DEFAULT_POLICY.replace(**overrides), spec
    path = Path(spec)
    if path.suffix != ".json" and not path.is_file():
        raise ConfigError(
            f"unknown --policy {spec!r}: use {', '.join(POLICY_PRESETS)}, a .json file of Policy fields, "
            "or key=value,... overrides"
        )
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read policy file: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: a policy file must hold a JSON object of Policy fields")
    base = document.pop("base", "default")
    if base not in POLICY_PRESETS:
        raise ConfigError(f"{path}: base must be one of {', '.join(POLICY_PRESETS)}, got {base!r}")
    unknown = sorted(set(document) - set(fields))
    if unknown:
        raise ConfigError(f"{path}: unknown Policy field {unknown[0]!r}")
    try:
        return POLICY_PRESETS[base].replace(**document), path.stem
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: {exc}") from None


# -- run and replay --------------------------------------------------------------------------------


def _run_dir(out: Path | None) -> Path:
    if out is not None:
        return out
    stamp = datetime.now(UTC).strftime(RUN_DIR_FORMAT)
    candidate, suffix = RUNS_DIR / stamp, 1
    while candidate.exists():
        suffix += 1
        candidate = RUNS_DIR / f"{stamp}-{suffix}"
    return candidate


def _fixture_names() -> list[str]:
    """Every bundled fixture transcript, smallest first."""
    fixtures = sorted(FIXTURE_TRANSCRIPTS_DIR.glob("*.jsonl"), key=lambda p: p.stat().st_size)
    return [p.stem for p in fixtures]


def _transcripts(spec: str) -> list[Transcript | None]:
    names = _names(spec)
    if names == [WORKLOAD]:
        return [None]
    if names == [ALL]:
        names = _fixture_names()
    if not names:
        raise CliError(f"--transcripts is empty; give names or paths, {WORKLOAD!r} or {ALL!r}")
    return [load_named_transcript(name) for name in names]


def _cmd_run(args: argparse.Namespace) -> int:
    policy, policy_name = policy_from_spec(args.policy)
    scenarios = [load_scenario(name) for name in (_names(args.scenarios) or list_scenarios())]
    transcripts = _transcripts(args.transcripts)
    out = _run_dir(args.out)
    jobs = [(transcript, scenario) for scenario in scenarios for transcript in transcripts]
    from tqdm.auto import tqdm

    results: list[ReplayResult] = []
    with tqdm(total=len(jobs), desc=PROG, unit="replay", disable=None) as progress:
        for transcript, scenario in jobs:
            progress.set_postfix_str(scenario.name, refresh=False)
            results.append(replay(transcript, scenario, policy=policy, seed=args.seed,
                                  transport=args.transport, policy_name=policy_name))
            progress.update()
    try:
        out.mkdir(parents=True, exist_ok=True)
        files = [write_attempts_csv(results, out / ATTEMPTS_CSV, timing=not args.no_timing)]
        if not args.no_figures:
            files += write_figures(results, out)
        names = [p.name for p in files] + [MANIFEST_JSON]
        document = manifest(results, policy=policy, policy_name=policy_name, seed=args.seed,
                            transport=args.transport, files=names)
        write_manifest(out / MANIFEST_JSON, document)
    except OSError as exc:
        raise CliError(f"{out}: cannot write the run directory: {exc.strerror or exc}") from None
    print(format_summary(results))
    unmet = [run_line(r) for r in results if expectation_problems(r)]
    if unmet:
        print("\nruns that miss their scenario's [expect]:")
        print("\n".join(f"  {line}" for line in unmet))
    print(f"\nwrote {out}/: {', '.join(names)}")
    return EXIT_OK


def _cmd_replay(args: argparse.Namespace) -> int:
    policy, policy_name = policy_from_spec(args.policy)
    scenario = load_scenario(args.scenario)
    transcript = None if args.transcript is None else load_named_transcript(args.transcript)

    def show(event: ReplayEvent) -> None:
        print(event_line(event), flush=True)

    result = replay(transcript, scenario, policy=policy, seed=args.seed, transport=args.transport,
                    on_event=show, policy_name=policy_name)
    print()
    if result.error:
        print(f"the replay ended at turn {result.turns_completed}: {result.error}")
    print(run_line(result))
    return EXIT_OK


# -- sweep and report ------------------------------------------------------------------------------------


def _grid_option(text: str) -> tuple[str, list[object] | Uniform]:
    """``NAME=V1,V2,...`` (values) or ``NAME=LOW..HIGH`` (a range for --random), typed by the Policy field."""
    name, sep, raw = (part.strip() for part in text.partition("="))
    if not sep or not name or not raw:
        raise CliError(f"--grid {text!r}: expected NAME=V1,V2,... (e.g. budget_ratio=0.5,0.6) "
                       f"or NAME=LOW{RANGE_SEPARATOR}HIGH with --random")
    fields = {f.name: str(f.type) for f in dataclasses.fields(Policy) if f.name in Policy.fields()}
    if name not in fields:
        raise ConfigError(f"--grid {name!r} is not a Policy field; valid fields: {', '.join(fields)}")
    if RANGE_SEPARATOR in raw:
        low, _, high = raw.partition(RANGE_SEPARATOR)
        bounds = [_coerce_policy_value(name, v, fields[name], "--grid") for v in (low, high)]
        if not all(isinstance(b, int | float) and not isinstance(b, bool) for b in bounds):
            raise ConfigError(f"--grid {name}: a range needs numbers, got {raw!r}")
        return name, Uniform(bounds[0], bounds[1])  # type: ignore[arg-type]
    return name, [_coerce_policy_value(name, v, fields[name], "--grid") for v in raw.split(",")]


def _grid(options: Sequence[str]) -> dict[str, list[object] | Uniform]:
    grid: dict[str, list[object] | Uniform] = {}
    for text in options:
        name, values = _grid_option(text)
        if name in grid:
            raise CliError(f"--grid {name} is given twice; put all its values in one option (NAME=A,B,C)")
        grid[name] = values
    return grid


def _cmd_sweep(args: argparse.Namespace) -> int:
    from simulator.report import comparison_table, markdown_table
    from simulator.sweep import CACHE_DIR, sweep

    grid = _grid(args.grid)
    transcripts = _names(args.transcripts)
    if transcripts == [ALL]:
        transcripts = _fixture_names()
    out = _run_dir(args.out)
    try:
        frame = sweep(
            grid=grid, random=args.random, seed=args.seed,
            scenarios=_names(args.scenarios) or None,
            transcripts=None if transcripts == [WORKLOAD] else transcripts,
            policies=args.policies, seeds=_seed_list(args.seeds), workers=args.workers, dask=args.dask,
            cache_dir=args.cache, out_dir=out, figures=not args.no_figures,
        )
    except KeyboardInterrupt:
        cache = args.cache or out / CACHE_DIR
        print(f"{PROG}: interrupted; finished runs are cached in {cache} — run the same command to resume",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as exc:
        raise CliError(f"{out}: cannot write the sweep directory: {exc.strerror or exc}") from None
    print(markdown_table(comparison_table(frame)))
    computed, cached = frame.attrs["computed"], frame.attrs["from_cache"]
    print(f"\n{len(frame)} runs: {computed} computed, {cached} from the cache")
    print(f"wrote {out}/")
    return EXIT_OK


def _seed_list(text: str) -> list[int]:
    try:
        return [_seed(name) for name in _names(text)]
    except argparse.ArgumentTypeError as exc:
        raise CliError(f"--seeds {text!r}: {exc}") from None


def _cmd_report(args: argparse.Namespace) -> int:
    from simulator.report import write_report

    formats = _names(args.formats)
    unknown = [fmt for fmt in formats if fmt not in REPORT_FORMATS]
    if unknown or not formats:
        raise CliError(f"--formats {args.formats!r}: use one or more of {', '.join(REPORT_FORMATS)}")
    try:
        written = write_report(args.run_dir, formats=formats, out_dir=args.out)
    except (FileNotFoundError, ValueError) as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        where = args.out or args.run_dir
        raise CliError(f"{where}: cannot write the report: {exc.strerror or exc}") from None
    target = written[0].parent if written else args.out
    print(f"wrote {len(written)} files to {target}/")
    return EXIT_OK


# -- proxy --------------------------------------------------------------------------------------------


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise CliError(f"--listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8080 (port 0: any free port)")
    return host.strip("[]"), int(port)


def _cmd_proxy(args: argparse.Namespace) -> int:
    from simulator.middlebox import Middlebox
    from simulator.providers import MockProvider
    from simulator.schedule import parse_fault_spec

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


# -- classify and generate ------------------------------------------------------------------------------


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise CliError(f"--header {text!r}: expected NAME:VALUE, e.g. content-type:text/html")
    return name.strip(), value.strip()


def _cmd_classify(args: argparse.Namespace) -> int:
    headers = dict(_header(h) for h in args.header)
    if args.file == "-":
        body = sys.stdin.read()
    else:
        try:
            body = Path(args.file).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise CliError(f"{args.file}: cannot read: {exc.strerror or exc}") from None
    failure = classify(status=args.status, body=body, headers=headers or None,
                       request_bytes=args.request_bytes)
    width = max(len(label) for label, _ in CLASSIFY_FIELDS)
    for label, name in CLASSIFY_FIELDS:
        value = getattr(failure, name)
        if isinstance(value, bool):
            value = "yes" if value else "no"
        print(f"{label + ':':{width + 1}} {'—' if value is None or value == '' else value}")
    return EXIT_OK


def _cmd_generate(args: argparse.Namespace) -> int:
    from simulator.generate import generate_to_file

    try:
        transcript = generate_to_file(args.seed, args.turns, args.out)
    except OSError as exc:
        raise CliError(f"{args.out}: cannot write: {exc.strerror or exc}") from None
    size = Path(args.out).stat().st_size
    print(f"wrote {args.out}: {len(transcript.messages)} messages, {len(transcript.facts)} facts, "
          f"{size:,} bytes, sha256 {transcript.sha256}")
    return EXIT_OK


# -- parser -------------------------------------------------------------------------------------------------


def _add_replay_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", default="default",
                        help="default (the default), chat, a .json file of Policy fields, or key=value,...")
    parser.add_argument("--seed", type=_seed, default=None,
                        help="seed of the middlebox and the mock provider (default: the scenario's seed)")
    parser.add_argument("--transport", choices=TRANSPORTS, default="inprocess",
                        help="inprocess (httpx.MockTransport) or loopback (real TCP on 127.0.0.1)")


def build_parser() -> argparse.ArgumentParser:
    """The ``ctxsim`` argument parser."""
    parser = _Parser(prog=PROG, description="Fault-injection simulator for ctxrecover.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    run = commands.add_parser("run", help="replay transcripts under scenarios and write a run directory",
                              description="Replay transcripts under scenarios with one policy; print a "
                                          "per-scenario summary and write attempts.csv, manifest.json and "
                                          "PNG figures.")
    run.add_argument("--transcripts", default=WORKLOAD,
                     help=f"comma-separated names or paths; {WORKLOAD!r} (default) replays each scenario's "
                          f"own [workload] transcript, {ALL!r} every bundled fixture")
    run.add_argument("--scenarios", default="",
                     help="comma-separated scenario names or files (default: every bundled scenario)")
    _add_replay_options(run)
    run.add_argument("--out", type=Path, default=None, help="run directory (default: runs/<UTC timestamp>)")
    run.add_argument("--no-timing", action="store_true",
                     help="leave elapsed_ms out of attempts.csv (byte-identical files for a seed)")
    run.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    run.set_defaults(handler=_cmd_run)

    one = commands.add_parser("replay", help="one replay with its turn log",
                              description="Replay one transcript under one scenario and print every event "
                                          "and notice as the library emits it, then a summary.")
    one.add_argument("--transcript", default=None,
                     help="a transcript path or bundled name (default: the scenario's [workload] transcript)")
    one.add_argument("--scenario", required=True, help="a bundled scenario name or a .toml/.json file")
    _add_replay_options(one)
    one.set_defaults(handler=_cmd_replay)

    sweeping = commands.add_parser(
        "sweep", help="policies × knob grids × scenarios, cached and resumable; writes a sweep directory",
        description="Replay every policy (presets and peer baselines) at every knob point under every "
                    "scenario; runs are cached per input in OUT/cache, so a rerun computes only what "
                    "changed and an interrupted sweep resumes. Writes attempts.csv, summary.csv, "
                    "manifest.json and the report, and prints the comparison table.")
    sweeping.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2,...",
                          help="a Policy field and its values, repeatable (the cartesian product is run); "
                               f"NAME=LOW{RANGE_SEPARATOR}HIGH draws from a range with --random")
    sweeping.add_argument("--random", type=_positive_int, default=None, metavar="N",
                          help="seeded random search: N points drawn from the --grid values or ranges")
    sweeping.add_argument("--seed", type=_seed, default=0, help="seed of the random search (default 0)")
    sweeping.add_argument("--scenarios", default="",
                          help="comma-separated scenario names or files (default: every bundled scenario)")
    sweeping.add_argument("--transcripts", default=WORKLOAD,
                          help=f"comma-separated names or paths; {WORKLOAD!r} (default) replays each "
                               f"scenario's own [workload] transcript, {ALL!r} every bundled fixture")
    sweeping.add_argument("--policies", default="default",
                          help="comma-separated presets (default, chat), baseline names, or 'baselines' "
                               "for all of them (default: default)")
    sweeping.add_argument("--seeds", default="0", help="comma-separated replay seeds (default 0)")
    where = sweeping.add_mutually_exclusive_group()
    where.add_argument("--workers", type=_positive_int, default=None,
                       help="worker processes (default: one per CPU; 1 runs in this process)")
    where.add_argument("--dask", default=None, metavar="ADDRESS|local",
                       help="run on a Dask cluster: a scheduler address, or 'local' for a LocalCluster")
    sweeping.add_argument("--out", type=Path, default=None,
                          help="sweep directory (default: runs/<UTC timestamp>)")
    sweeping.add_argument("--cache", type=Path, default=None, help="cache directory (default: OUT/cache)")
    sweeping.add_argument("--no-figures", action="store_true", help="skip the report figures")
    sweeping.set_defaults(handler=_cmd_sweep)

    reporting = commands.add_parser("report", help="regenerate the figures and tables of a run or sweep",
                                    description="Regenerate every figure and table of a run or sweep "
                                                "directory from its attempts.csv, manifest.json and "
                                                "summary.csv.")
    reporting.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                           help="a `ctxsim run` or `ctxsim sweep` directory")
    reporting.add_argument("--formats", default="png",
                           help=f"comma-separated, among {', '.join(REPORT_FORMATS)} (default png)")
    reporting.add_argument("--out", type=Path, default=None, help="where to write (default: RUN_DIR/report)")
    reporting.set_defaults(handler=_cmd_report)

    proxy = commands.add_parser("proxy", help="a loopback HTTP middlebox in front of a mock or a real URL",
                                description="Serve a fault-injecting middlebox on a loopback port in front "
                                            "of a mock provider or a real upstream URL, until Ctrl-C.")
    proxy.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT on loopback (default 127.0.0.1:0)")
    proxy.add_argument("--upstream", default="mock:openai",
                       help=f"mock:FORMAT ({', '.join(MOCK_FORMATS)}) or an http(s):// URL")
    proxy.add_argument("--fault", action="append", default=[],
                       help="a fault spec, repeatable, e.g. body-cap:128KB:waf-403-html")
    proxy.add_argument("--context-window", type=_positive_int, default=None,
                       help="the mock provider's context window in tokens (default: per format)")
    proxy.add_argument("--seed", type=_seed, default=0, help="seed of the middlebox and the mock")
    proxy.add_argument("--max-seconds", type=_seconds, default=None, help="stop after this many seconds")
    proxy.set_defaults(handler=_cmd_proxy)

    check = commands.add_parser("classify", help="classify an error body or message",
                                description="Classify an error body or message (ctxrecover.classify) and "
                                            "print kind, reason, reason text, provider and evidence.")
    check.add_argument("file", nargs="?", default="-", help="a file holding the body, - for stdin (default)")
    check.add_argument("--status", type=int, default=None, help="the HTTP status of the answer")
    check.add_argument("--header", action="append", default=[], help="response header NAME:VALUE, repeatable")
    check.add_argument("--request-bytes", type=_positive_int, default=None,
                       help="size of the rejected request body")
    check.set_defaults(handler=_cmd_classify)

    generate = commands.add_parser("generate", help="write a seeded synthetic transcript",
                                   description="Write a seeded synthetic agent session as our JSONL.")
    generate.add_argument("--seed", type=_seed, default=0, help="the seed (default 0)")
    generate.add_argument("--turns", type=_positive_int, required=True, help="user turns")
    generate.add_argument("--out", type=Path, required=True, help="the JSONL file to write")
    generate.set_defaults(handler=_cmd_generate)
    return parser


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``ctxsim`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)
    except SystemExit as exit_:  # --help, or an argparse error already printed
        return exit_.code if isinstance(exit_.code, int) else EXIT_OK
    except INPUT_ERRORS as error:
        print(f"{PROG}: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
