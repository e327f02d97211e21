"""What the ``ctxsim`` subcommands share: exit codes, parser, argument types, policies, run folders."""

from __future__ import annotations

import argparse
import dataclasses
import json
import tomllib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import NoReturn, TypeVar

from ctxrecover.errors import ConfigError
from ctxrecover.policy import CHAT_POLICY, DEFAULT_POLICY, Policy
from ctxrecover.sizes import parse_payload_size
from simulator.replay import TRANSPORTS
from simulator.transcripts.loaders import Transcript
from simulator.workloads import bundled_transcripts, load_named_transcript

__all__ = ["POLICY_PRESETS", "CliError", "Parser", "missing_extra", "package_version", "policy_from_spec"]

PROG = "ctxsim"
# Exit codes (README "Exit codes"): 0 ok, 1 a run missed its scenario's [expect], 2 bad input.
EXIT_OK = 0
EXIT_EXPECTATION_MISSED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
PACKAGE = "ctxrecover"
# Modules of the optional extras: a missing one is a one-line hint naming the extra, not a traceback.
EXTRA_OF_MODULE: MappingProxyType[str, str] = MappingProxyType(
    {
        "faker": "sim",
        "matplotlib": "sim",
        "numpy": "sim",
        "pandas": "sim",
        "respx": "sim",
        "tqdm": "sim",
        "IPython": "notebooks",
        "ipywidgets": "notebooks",
        "anthropic": "sdks",
        "openai": "sdks",
        "dask": "dask",
        "distributed": "dask",
        "optuna": "tune",
        "papermill": "notebooks",
        "nbformat": "notebooks",
        "opentelemetry": "otel",
    }
)
RUNS_DIR = Path("runs")
RUN_DIR_FORMAT = "%Y%m%d-%H%M%S"
WORKLOAD = "workload"  # --transcripts value: each scenario's own [workload] transcript
ALL = "all"

POLICY_PRESETS: MappingProxyType[str, Policy] = MappingProxyType(
    {"default": DEFAULT_POLICY, "chat": CHAT_POLICY}
)
POLICY_SIZE_FIELDS = frozenset({"assumed_payload_cap", "payload_cap", "uncapped_warning_bytes"})
NONE_WORDS = frozenset({"none", "null"})
POLICY_FILE_SUFFIXES = (".json", ".toml")
BOOL_WORDS: MappingProxyType[str, bool] = MappingProxyType({"true": True, "false": False})


class CliError(ValueError):
    """Bad command-line input; the message names the option or file."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage dump) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def package_version() -> str:
    """The installed distribution's version (the source tree's ``__version__`` when not installed)."""
    from importlib import metadata

    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        import ctxrecover

        return ctxrecover.__version__


def missing_extra(error: ModuleNotFoundError) -> str | None:
    """The one-line hint for a module of an optional extra that is not installed, else None."""
    root = (error.name or "").partition(".")[0]
    extra = EXTRA_OF_MODULE.get(root)
    if extra is None:
        return None
    return (
        f'this command needs the {extra!r} extra ({root} is not installed): pip install "{PACKAGE}[{extra}]"'
    )


def add_json_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--json", action="store_true", help=f"print {what} as one JSON document on stdout")


def add_report_only_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="exit 0 even when a run misses its scenario's [expect] (default: exit 1)",
    )


def print_json(document: object) -> None:
    print(json.dumps(document, indent=2, ensure_ascii=False, default=str))


_N = TypeVar("_N", int, float)


def _checked(text: str, parse: Callable[[str], _N], ok: Callable[[_N], bool], expected: str) -> _N:
    """``parse(text)`` when it parses and ``ok`` accepts it, else an argparse error naming ``expected``."""
    try:
        value = parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def positive_int_arg(text: str) -> int:
    return _checked(text, int, lambda value: value >= 1, "a positive integer")


def seed_arg(text: str) -> int:
    return _checked(text, int, lambda value: value >= 0, "an integer >= 0")


def seconds_arg(text: str) -> float:
    return _checked(text, float, lambda value: value > 0, "a number of seconds > 0")


def split_names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def coerce_policy_value(name: str, raw: str, annotation: str, option: str = "--policy") -> object:
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

    A JSON (or TOML) file holds an object of Policy field overrides (``"base": "chat"`` picks
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
            overrides[key] = coerce_policy_value(key, value, fields[key])
        return DEFAULT_POLICY.replace(**overrides), spec
    path = Path(spec)
    if path.suffix not in POLICY_FILE_SUFFIXES and not path.is_file():
        raise ConfigError(
            f"unknown --policy {spec!r}: use {', '.join(POLICY_PRESETS)}, a .json or .toml file of Policy "
            "fields, or key=value,... overrides"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read policy file: {exc.strerror or exc}") from None
    if path.suffix == ".toml":  # what `ctxsim tune` writes (policy.toml)
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    else:
        try:
            document = json.loads(text)
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


def run_dir(out: Path | None) -> Path:
    if out is not None:
        return out
    stamp = datetime.now(UTC).strftime(RUN_DIR_FORMAT)
    candidate, suffix = RUNS_DIR / stamp, 1
    while candidate.exists():
        suffix += 1
        candidate = RUNS_DIR / f"{stamp}-{suffix}"
    return candidate


def fixture_names() -> list[str]:
    """Every bundled fixture transcript (synthetic sessions and format fixtures), smallest first."""
    return bundled_transcripts()


def transcripts_option(spec: str) -> list[Transcript | None]:
    names = split_names(spec)
    if names == [WORKLOAD]:
        return [None]
    if names == [ALL]:
        names = fixture_names()
    if not names:
        raise CliError(f"--transcripts is empty; give names or paths, {WORKLOAD!r} or {ALL!r}")
    return [load_named_transcript(name) for name in names]


def add_replay_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--policy",
        default="default",
        help="default (the default), chat, a .json or .toml file of Policy fields (ctxsim tune writes "
        "policy.toml), or key=value,...",
    )
    parser.add_argument(
        "--seed",
        type=seed_arg,
        default=None,
        help="seed of the middlebox and the mock provider (default: the scenario's seed)",
    )
    parser.add_argument(
        "--transport",
        choices=TRANSPORTS,
        default="inprocess",
        help="inprocess (httpx.MockTransport) or loopback (real TCP on 127.0.0.1)",
    )


# -- what sweep and tune share ------------------------------------------------------------------------
def seed_list(text: str, option: str = "--seeds") -> list[int]:
    """Comma-separated replay seeds (each an integer >= 0)."""
    try:
        return [seed_arg(name) for name in split_names(text)]
    except argparse.ArgumentTypeError as exc:
        raise CliError(f"{option} {text!r}: {exc}") from None


def transcript_names(text: str) -> list[str] | None:
    """``--transcripts`` of a sweep or tune: names or paths, every bundled fixture for ``all``, None
    for ``workload`` (each scenario's own)."""
    names = split_names(text)
    if names == [ALL]:
        return fixture_names()
    return None if names == [WORKLOAD] else names


def add_scenario_options(parser: argparse.ArgumentParser) -> None:
    """``--scenarios`` and ``--transcripts``, as sweep and tune take them."""
    parser.add_argument(
        "--scenarios",
        default="",
        help="comma-separated scenario names or files (default: every bundled scenario)",
    )
    parser.add_argument(
        "--transcripts",
        default=WORKLOAD,
        help=f"comma-separated names or paths; {WORKLOAD!r} (default) replays each "
        f"scenario's own [workload] transcript, {ALL!r} every bundled fixture",
    )


def add_executor_options(parser: argparse.ArgumentParser) -> None:
    """``--workers`` or ``--dask``: where the replays run."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--workers",
        type=positive_int_arg,
        default=None,
        help="worker processes (default: one per CPU; 1 runs in this process)",
    )
    where.add_argument(
        "--dask",
        default=None,
        metavar="ADDRESS|local",
        help="run on a Dask cluster: a scheduler address, or 'local' for a LocalCluster",
    )
