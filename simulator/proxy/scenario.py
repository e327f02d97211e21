"""Fault schedules as data: named scenarios in TOML (or JSON).

A scenario says which provider sits behind which middlebox faults, how the
summarizer behaves, what workload to replay and what outcome to expect::

    description = "Bedrock behind a corporate WAF that blocks bodies of 128 000 bytes or more"
    seed = 0

    [provider]
    format = "bedrock-converse"
    model = "anthropic.claude-3-5-sonnet-20241022-v2:0"
    context_window = 200000

    [[fault]]
    kind = "bedrock-html-403"
    min_bytes = "125KB"           # sizes: integers are bytes; strings need a unit (parse_payload_size)
    from_turn = 1
    probability = 1.0

    [summarizer]
    behaviour = "extractive"      # extractive | refusing | too-short | slow | failing | overflowing

    [workload]                    # hints for the replay (all optional)
    transcript = "generated"
    system_prompt_bytes = "96KB"
    plant_text = "SELECT * FROM users WHERE id = '' OR 1=1 --"  # at the head of the newest message
    plant_turn = 12                                              # before the 12th reply

    [policy]                      # ctxrecover Policy overrides (validated by Policy.replace)
    context_window = 8000

    engine = "nginx"              # the real program these faults imitate (ctxsim run --engines real);
                                  # or [engine] with name = "…" and knobs (body_cap = "128KB", …)

    [expect]                      # simulator.proxy.expectation documents every field
    outcome = "recovered"         # see OUTCOMES
    failure_kind = "waf_rejection"
    rejected_requests = [1]       # per failure episode: one rejection, then the run goes on
    cap_learned = true
    notices = ["ℹ Gateway rejected a %s request — payload cap set to %s"]  # a SPEC text; %s: any value

:func:`load_scenario` takes a bundled name (``fixtures/scenarios/<name>.toml``)
or a path; :func:`list_scenarios` lists the bundled names. Every problem raises
:class:`ScenarioError` naming the file, the section or fault, and the field.
:func:`~simulator.proxy.fault_specs.parse_fault_spec` reads the compact CLI form
(``ctxsim proxy --fault body-cap:128KB:waf-403-html``).

>>> from simulator.proxy.fault_specs import parse_fault_spec
>>> parse_fault_spec("body-cap:1MB:envoy")
BodyCap(probability=1.0, from_turn=1, until_turn=None, min_bytes=0, limit=1048576, response='envoy')
"""

from __future__ import annotations

import dataclasses
import json
import time
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ctxrecover.errors import ConfigError
from ctxrecover.policy import DEFAULT_POLICY, Policy
from simulator.providers.mock import FORMATS, MockProvider, Script
from simulator.proxy.expectation import (
    EXPECT_FIELDS,
    FAILURE_KINDS,
    OUTCOMES,
    Expectation,
    expectation_from_table,
)
from simulator.proxy.fault_specs import (
    FieldProblem,
    ScenarioError,
    coerce_field,
    dataclass_fields,
    fault_from_table,
    parse_size,
)
from simulator.proxy.faults import Fault
from simulator.proxy.middlebox import Handler, Middlebox
from simulator.resources import data_dir

__all__ = [
    "Expectation",
    "FAILURE_KINDS",
    "MOVED_FAULT_NOTE",
    "MOVED_PLANT_NOTE",
    "OUTCOMES",
    "ProviderSpec",
    "SCENARIOS_DIR",
    "SUMMARIZER_BEHAVIOURS",
    "Scenario",
    "SummarizerSpec",
    "Workload",
    "list_scenarios",
    "load_scenario",
    "scenario_from_document",
]


SCENARIOS_DIR = data_dir("scenarios")  # the checkout's fixtures/scenarios, or the wheel's copy
SCENARIO_SUFFIXES: tuple[str, ...] = (".toml", ".json")
TOP_LEVEL_KEYS: tuple[str, ...] = (
    "description",
    "engine",
    "expect",
    "fault",
    "name",
    "policy",
    "provider",
    "seed",
    "summarizer",
    "workload",
)
PROVIDER_KEYS: tuple[str, ...] = ("context_window", "format", "max_output_tokens_cap", "model")
SUMMARIZER_KEYS: tuple[str, ...] = ("behaviour", "context_window")
WORKLOAD_KEYS: tuple[str, ...] = (
    "history_bytes",
    "max_tokens",
    "plant_text",
    "plant_turn",
    "reply_tokens",
    "system_prompt_bytes",
    "transcript",
    "turns",
)
EXPECT_KEYS: tuple[str, ...] = tuple(EXPECT_FIELDS)
SUMMARIZER_BEHAVIOURS: tuple[str, ...] = (
    "extractive",
    "refusing",
    "too-short",
    "slow",
    "failing",
    "overflowing",
)
DEFAULT_MODELS: Mapping[str, str] = MappingProxyType(
    {
        "openai-chat": "gpt-4o",
        "openai-responses": "gpt-4o",
        "anthropic": "claude-sonnet-4-20250514",
        "gemini": "gemini-2.5-pro",
        "bedrock-converse": "anthropic.claude-3-5-sonnet-20241022-v2:0",
    }
)
DEFAULT_CONTEXT_WINDOWS: Mapping[str, int] = MappingProxyType(
    {
        "openai-chat": 128_000,
        "openai-responses": 128_000,
        "anthropic": 200_000,
        "gemini": 1_000_000,
        "bedrock-converse": 200_000,
    }
)
WORKLOAD_SIZE_FIELDS = frozenset({"history_bytes", "system_prompt_bytes"})
# What Scenario.fitted says when a planted turn lies beyond the transcript it replays.
MOVED_PLANT_NOTE = "[workload] plant_turn %d is beyond the transcript's %d turns: planted before turn %d"
MOVED_FAULT_NOTE = "fault #%d (%s) from_turn %d is beyond the transcript's %d turns: it starts at turn %d"
POLICY_SIZE_FIELDS = frozenset({"assumed_payload_cap", "payload_cap"})
TOO_DEEP = "arrays or tables nested too deeply"


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    """The mock provider behind the middlebox."""

    format: str
    model: str
    context_window: int
    max_output_tokens_cap: int | None = None


@dataclass(frozen=True, slots=True)
class SummarizerSpec:
    """How the mock summarizer behaves (and its own window, for ``overflowing``)."""

    behaviour: str = "extractive"
    context_window: int | None = None


@dataclass(frozen=True, slots=True)
class Workload:
    """Hints for the replay: transcript, system prompt size, history size, max_tokens, reply length,
    and text planted at the head of the newest message before a turn (``plant_text``, ``plant_turn``)."""

    transcript: str | None = None
    system_prompt_bytes: int = 0
    history_bytes: int = 0
    max_tokens: int | None = None
    reply_tokens: int | None = None
    turns: int | None = None
    plant_text: str | None = None
    plant_turn: int | None = None


@dataclass(frozen=True, slots=True)
class Scenario:
    """One named fault scenario: provider, faults, summarizer, workload, policy and expectation."""

    name: str
    description: str
    provider: ProviderSpec
    faults: tuple[Fault, ...]
    expect: Expectation
    summarizer: SummarizerSpec = SummarizerSpec()
    workload: Workload = Workload()
    policy: tuple[tuple[str, Any], ...] = ()
    seed: int = 0
    source: Path | None = None
    engine: str | None = None
    engine_knobs: tuple[tuple[str, Any], ...] = ()

    def policy_overrides(self) -> dict[str, Any]:
        """The ``[policy]`` overrides as keyword arguments for ``Policy.replace``."""
        return dict(self.policy)

    def apply_policy(self, base: Policy = DEFAULT_POLICY) -> Policy:
        """``base`` with this scenario's policy overrides."""
        return base.replace(**self.policy_overrides())

    def build_middlebox(
        self,
        upstream: Handler | None,
        seed: int | None = None,
        *,
        sleep: Callable[[float], object] = time.sleep,
    ) -> Middlebox:
        """A :class:`Middlebox` with this scenario's faults (seed defaults to the scenario's)."""
        return Middlebox(upstream, self.faults, seed=self.seed if seed is None else seed, sleep=sleep)

    def fitted(self, turns: int) -> tuple[Scenario, tuple[str, ...]]:
        """This scenario on a transcript of ``turns`` turns, and what had to move to fit it.

        A planted turn the transcript does not reach — ``[workload] plant_turn``, a fault's
        ``from_turn`` — moves to the nearest turn that exists, the last one (a fault's window
        starts there; an ``until_turn`` beyond it ends there too), so a scenario applies to any
        workload. Each move is one note (:data:`MOVED_PLANT_NOTE`, :data:`MOVED_FAULT_NOTE`);
        a scenario that fits is returned as is, with no notes.
        """
        if turns < 1:
            raise ScenarioError(
                f"scenario {self.name!r}: a transcript of {turns} turns has nothing to replay"
            )
        notes: list[str] = []
        workload = self.workload
        if workload.plant_turn is not None and workload.plant_turn > turns:
            notes.append(MOVED_PLANT_NOTE % (workload.plant_turn, turns, turns))
            workload = dataclasses.replace(workload, plant_turn=turns)
        faults = list(self.faults)
        for index, fault in enumerate(faults):
            if fault.from_turn > turns:
                notes.append(MOVED_FAULT_NOTE % (index + 1, fault.kind, fault.from_turn, turns, turns))
                until = None if fault.until_turn is None else turns
                faults[index] = dataclasses.replace(fault, from_turn=turns, until_turn=until)
        if not notes:
            return self, ()
        return dataclasses.replace(self, workload=workload, faults=tuple(faults)), tuple(notes)

    def build_provider(self, script: Script | None = None, *, seed: int | None = None) -> MockProvider:
        """A :class:`MockProvider` as the ``[provider]`` section describes."""
        return MockProvider(
            self.provider.format,
            context_window=self.provider.context_window,
            script=script,
            max_output_tokens_cap=self.provider.max_output_tokens_cap,
            seed=self.seed if seed is None else seed,
        )


class _Reader:
    """Reads the sections of one scenario document, failing with the file's name."""

    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, message: str) -> ScenarioError:
        return ScenarioError(f"{self.file}: {message}")

    def section(self, document: Mapping[str, Any], name: str, keys: tuple[str, ...]) -> dict[str, Any]:
        table = document.get(name, {})
        if not isinstance(table, dict):
            raise self.fail(f"[{name}] must be a table, got {table!r}")
        unknown = sorted(set(table) - set(keys))
        if unknown:
            raise self.fail(f"[{name}] has unknown key {unknown[0]!r}; valid keys: {', '.join(keys)}")
        return table

    def typed(
        self, section: str, table: Mapping[str, Any], cls: type, *, sizes: frozenset[str] = frozenset()
    ) -> dict[str, Any]:
        fields = dataclass_fields(cls)
        values: dict[str, Any] = {}
        for key, value in table.items():
            try:
                values[key] = coerce_field(key, value, fields[key], sizes)
            except FieldProblem as exc:
                raise self.fail(f"[{section}] {exc}") from None
        return values

    def choice(self, section: str, name: str, value: object, choices: tuple[str, ...]) -> None:
        if value not in choices:
            raise self.fail(f"[{section}] {name} must be one of {', '.join(choices)}, got {value!r}")

    def positive(self, section: str, name: str, value: int | None) -> None:
        if value is not None and value <= 0:
            raise self.fail(f"[{section}] {name} must be > 0, got {value}")


def _provider(reader: _Reader, document: Mapping[str, Any]) -> ProviderSpec:
    if "provider" not in document:
        raise reader.fail(f"[provider] section is missing; it needs format = one of {', '.join(FORMATS)}")
    values = reader.typed("provider", reader.section(document, "provider", PROVIDER_KEYS), ProviderSpec)
    if "format" not in values:
        raise reader.fail(f"[provider] format is missing; valid formats: {', '.join(FORMATS)}")
    reader.choice("provider", "format", values["format"], FORMATS)
    values.setdefault("model", DEFAULT_MODELS[values["format"]])
    values.setdefault("context_window", DEFAULT_CONTEXT_WINDOWS[values["format"]])
    reader.positive("provider", "context_window", values["context_window"])
    reader.positive("provider", "max_output_tokens_cap", values.get("max_output_tokens_cap"))
    return ProviderSpec(**values)


def _expectation(reader: _Reader, document: Mapping[str, Any]) -> Expectation:
    if "expect" not in document:
        raise reader.fail(f"[expect] section is missing; it needs outcome = one of {', '.join(OUTCOMES)}")
    table = document["expect"]
    if not isinstance(table, dict):
        raise reader.fail(f"[expect] must be a table, got {table!r}")
    return expectation_from_table(table, f"{reader.file}: [expect]")


def _policy(reader: _Reader, document: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    table = document.get("policy", {})
    if not isinstance(table, dict):
        raise reader.fail(f"[policy] must be a table, got {table!r}")
    overrides: dict[str, Any] = {}
    for key, value in table.items():
        try:
            overrides[key] = parse_size(key, value) if key in POLICY_SIZE_FIELDS else value
        except FieldProblem as exc:
            raise reader.fail(f"[policy] {exc}") from None
    try:
        DEFAULT_POLICY.replace(**overrides)
    except (ConfigError, TypeError, ValueError) as exc:
        raise reader.fail(f"[policy] {exc}") from None
    return tuple(sorted(overrides.items()))


ENGINE_SIZE_KNOBS = frozenset({"body_cap", "header_cap", "request_body_limit"})


def _engine(reader: _Reader, value: object) -> tuple[str | None, tuple[tuple[str, Any], ...]]:
    """``engine = "NAME"``, or an ``[engine]`` table with ``name`` and the engine's knobs (sizes parsed);
    the name and knobs are checked against the engines when a replay starts one."""
    if value is None:
        return None, ()
    table = {"name": value} if isinstance(value, str) else value
    if not isinstance(table, dict) or not isinstance(table.get("name"), str) or not table["name"]:
        raise reader.fail(f'engine must be a name such as "nginx" or a table with name = "…", got {value!r}')
    knobs: dict[str, Any] = {}
    for key, knob in table.items():
        if key == "name":
            continue
        try:
            knobs[key] = parse_size(key, knob) if key in ENGINE_SIZE_KNOBS else knob
        except FieldProblem as exc:
            raise reader.fail(f"[engine] {exc}") from None
    return table["name"], tuple(sorted(knobs.items()))


def scenario_from_document(document: Mapping[str, Any], *, name: str, source: Path | None = None) -> Scenario:
    """Validate a parsed scenario document (the TOML/JSON mapping) into a :class:`Scenario`."""
    reader = _Reader(str(source) if source is not None else f"scenario {name!r}")
    unknown = sorted(set(document) - set(TOP_LEVEL_KEYS))
    if unknown:
        raise reader.fail(f"unknown top-level key {unknown[0]!r}; valid keys: {', '.join(TOP_LEVEL_KEYS)}")
    description = document.get("description")
    if not isinstance(description, str) or not description.strip():
        raise reader.fail("description is missing; add one line saying what the scenario shows")
    seed = document.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise reader.fail(f"seed must be an integer >= 0, got {seed!r}")
    fault_tables = document.get("fault", [])
    if not isinstance(fault_tables, list) or not all(isinstance(t, dict) for t in fault_tables):
        raise reader.fail("fault must be an array of tables ([[fault]] in TOML)")
    summarizer = reader.typed(
        "summarizer", reader.section(document, "summarizer", SUMMARIZER_KEYS), SummarizerSpec
    )
    reader.choice("summarizer", "behaviour", summarizer.get("behaviour", "extractive"), SUMMARIZER_BEHAVIOURS)
    reader.positive("summarizer", "context_window", summarizer.get("context_window"))
    workload = reader.typed(
        "workload", reader.section(document, "workload", WORKLOAD_KEYS), Workload, sizes=WORKLOAD_SIZE_FIELDS
    )
    for key in ("max_tokens", "reply_tokens", "turns", "plant_turn"):
        reader.positive("workload", key, workload.get(key))
    if "plant_turn" in workload and not workload.get("plant_text"):
        raise reader.fail("[workload] plant_turn needs plant_text, the text to plant")
    engine, engine_knobs = _engine(reader, document.get("engine"))
    return Scenario(
        engine=engine,
        engine_knobs=engine_knobs,
        name=str(document.get("name") or name),
        description=description.strip(),
        provider=_provider(reader, document),
        faults=tuple(
            fault_from_table(t, f"{reader.file}: fault #{i}") for i, t in enumerate(fault_tables, start=1)
        ),
        expect=_expectation(reader, document),
        summarizer=SummarizerSpec(**summarizer),
        workload=Workload(**workload),
        policy=_policy(reader, document),
        seed=seed,
        source=source,
    )


def list_scenarios() -> list[str]:
    """Names of the bundled scenarios (``fixtures/scenarios/*.toml|json``), sorted."""
    if not SCENARIOS_DIR.is_dir():
        return []
    return sorted(p.stem for p in SCENARIOS_DIR.iterdir() if p.suffix in SCENARIO_SUFFIXES)


def _resolve(name_or_path: str | Path) -> Path:
    path = Path(name_or_path)
    if isinstance(name_or_path, Path) or path.suffix in SCENARIO_SUFFIXES or len(path.parts) > 1:
        if not path.is_file():
            raise ScenarioError(f"{path}: no such scenario file")
        return path
    for suffix in SCENARIO_SUFFIXES:
        candidate = SCENARIOS_DIR / f"{name_or_path}{suffix}"
        if candidate.is_file():
            return candidate
    raise ScenarioError(
        f"unknown scenario {str(name_or_path)!r}; bundled scenarios: {', '.join(list_scenarios())} "
        "(or pass the path of a .toml or .json file)"
    )


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load a bundled scenario by name, or a scenario file (``.toml`` or ``.json``) by path."""
    path = _resolve(name_or_path)
    try:
        if path.suffix == ".json":
            document = json.loads(path.read_text(encoding="utf-8"))
        else:
            document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        kind = "JSON" if path.suffix == ".json" else "TOML"
        reason = TOO_DEEP if isinstance(exc, RecursionError) else exc
        raise ScenarioError(f"{path}: invalid {kind}: {reason}") from None
    if not isinstance(document, dict):
        raise ScenarioError(f"{path}: a scenario must be a JSON object")
    return scenario_from_document(document, name=path.stem, source=path)
