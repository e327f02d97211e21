"""Fuzzing the parsers that read untrusted input: whatever they are given, they answer or fail cleanly.

- transcript loaders: arbitrary bytes, JSON and JSONL (also forced to each format)
  give a :class:`Transcript` or a :class:`TranscriptError` naming the file (and the
  line, for line formats) — never another exception;
- the schedule parser: arbitrary documents and fault specs give a
  :class:`Scenario`/fault or a :class:`ScenarioError`;
- ``parse_payload_size``: any text gives an int >= 0;
- recall: any text gives 16-hex keys and a :class:`RecallResult`;
- ``classify``: exception chains of any depth and shape, with hostile attributes
  (the flat cases are fuzzed in tests/ctxrecover/test_classify.py).
"""

from __future__ import annotations

import json
import re
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ctxrecover.archive import MemoryArchive, RecallResult, marker, parse_recall_keys, recall
from ctxrecover.classify import Failure, FailureKind, classify
from ctxrecover.sizes import parse_payload_size
from simulator.proxy.fault_specs import parse_fault_spec
from simulator.proxy.faults import FAULT_KINDS, Fault
from simulator.proxy.scenario import (
    EXPECT_KEYS,
    PROVIDER_KEYS,
    SUMMARIZER_KEYS,
    TOP_LEVEL_KEYS,
    WORKLOAD_KEYS,
    Scenario,
    ScenarioError,
    load_scenario,
    scenario_from_document,
)
from simulator.transcripts.loaders import FORMATS, Transcript, TranscriptError, load_runs

KEY_RE = re.compile(r"[0-9a-f]{16}")
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DEEP = 5_000  # nesting past the interpreter's recursion limit (1000)

# -- shared strategies ---------------------------------------------------------------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(
        [
            "user",
            "assistant",
            "tool",
            "system",
            "text",
            "tool_use",
            "tool_result",
            "image",
            "base64",
            "url",
            "data:image/png;base64,AAAA",
            "{}",
            "[1]",
            "5MB",
            "128KB",
        ]
    ),
)
MESSAGE_KEYS = st.sampled_from(
    [
        "role",
        "content",
        "type",
        "text",
        "tool_calls",
        "function",
        "name",
        "arguments",
        "id",
        "tool_call_id",
        "tool_call_ids",
        "tool_use_id",
        "source",
        "data",
        "url",
        "image_url",
        "input",
        "is_error",
        "messages",
        "system",
        "history",
        "info",
        "trajectory",
        "traj",
        "task_id",
        "reward",
        "trial",
        "message",
        "_meta",
        "facts",
        "metadata",
        "kind",
        "value",
        "message_index",
        "images",
        "media_type",
        "system_parts",
        "summary_of",
        "preserve_verbatim",
        "sessionId",
        "uuid",
        "isMeta",
        "isSidechain",
        "model",
        "refusal",
        "input_text",
        "output_text",
    ]
)


def json_values(keys: st.SearchStrategy[str]) -> st.SearchStrategy[object]:
    return st.recursive(
        SCALARS,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5),
        max_leaves=30,
    )


JSON_VALUES = json_values(MESSAGE_KEYS | st.text(max_size=6))


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


# -- transcripts -----------------------------------------------------------------------------------


def _check_load(path: Path, data: bytes, *, format: str | None = None) -> None:
    """Load ``data`` as ``path``: a Transcript list, or a TranscriptError that names the file (and line)."""
    path.write_bytes(data)
    try:
        loaded = load_runs(path, format=format)
    except TranscriptError as exc:
        text = str(exc)
        assert exc.path == str(path), text
        assert text.startswith(str(path)), text
        if exc.line is not None:
            assert text.startswith(f"{path}:{exc.line}"), text
            assert 1 <= exc.line <= data.count(b"\n") + 1, text
        return
    assert loaded and all(isinstance(t, Transcript) and t.messages for t in loaded)


@FUZZ
@given(data=st.binary(max_size=400))
@example(data=b"\xff\xfe\x00garbage")
@example(data=b"[" * DEEP)
@example(data=b'{"messages": ' + b"[" * DEEP)
@example(data=b'{"role": "user", "content": "x"}\n' + b"{" * DEEP)
def test_arbitrary_bytes_load_or_raise_a_transcript_error(fuzz_dir: Path, data: bytes) -> None:
    _check_load(fuzz_dir / "bytes.json", data)


@FUZZ
@given(doc=JSON_VALUES, format=st.none() | st.sampled_from(FORMATS))
def test_arbitrary_json_documents_load_or_raise_a_transcript_error(
    fuzz_dir: Path, doc: object, format: str | None
) -> None:
    _check_load(fuzz_dir / "doc.json", _dumps(doc).encode("utf-8", "surrogatepass"), format=format)


@FUZZ
@given(
    lines=st.lists(JSON_VALUES | st.text(max_size=20), min_size=1, max_size=6),
    format=st.none() | st.sampled_from(["jsonl", "claude-code"]),
    blank_lines=st.booleans(),
)
def test_arbitrary_jsonl_loads_or_raises_a_transcript_error_with_its_line(
    fuzz_dir: Path, lines: list[object], format: str | None, blank_lines: bool
) -> None:
    rendered = [line if isinstance(line, str) else _dumps(line) for line in lines]
    separator = "\n\n" if blank_lines else "\n"
    _check_load(
        fuzz_dir / "lines.jsonl", separator.join(rendered).encode("utf-8", "surrogatepass"), format=format
    )


MESSAGE_DICTS = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool", "system", "developer", "bot"]) | SCALARS},
    optional={
        "content": JSON_VALUES,
        "tool_calls": st.lists(st.dictionaries(MESSAGE_KEYS, JSON_VALUES, max_size=4) | SCALARS, max_size=3),
        "tool_call_id": SCALARS,
        "images": st.lists(st.dictionaries(MESSAGE_KEYS, SCALARS, max_size=3) | SCALARS, max_size=2),
        "system_parts": JSON_VALUES,
        "summary_of": SCALARS,
        "name": SCALARS,
    },
)


@FUZZ
@given(
    messages=st.lists(MESSAGE_DICTS, min_size=1, max_size=5),
    as_document=st.booleans(),
    format=st.none() | st.sampled_from(FORMATS),
)
def test_message_shaped_input_loads_or_raises_a_transcript_error(
    fuzz_dir: Path, messages: list[dict[str, object]], as_document: bool, format: str | None
) -> None:
    if as_document:
        data = _dumps({"messages": messages})
    else:
        data = "\n".join(_dumps(m) for m in messages)
    _check_load(fuzz_dir / "messages.json", data.encode("utf-8", "surrogatepass"), format=format)


# -- schedules -----------------------------------------------------------------------------------

SCHEDULE_KEYS = st.sampled_from(
    sorted(
        {
            *TOP_LEVEL_KEYS,
            *PROVIDER_KEYS,
            *SUMMARIZER_KEYS,
            *WORKLOAD_KEYS,
            *EXPECT_KEYS,
            "kind",
            "limit",
            "min_bytes",
            "n_bytes",
            "probability",
            "from_turn",
            "until_turn",
            "page",
            "response",
            "delay_s",
            "retry_after",
            "fmt",
            "payload_cap",
            "keep_recent",
            "budget_ratio",
        }
    )
)
SCHEDULE_VALUES = json_values(SCHEDULE_KEYS) | st.sampled_from(sorted(FAULT_KINDS))


def _fault_tables() -> st.SearchStrategy[dict[str, object]]:
    return st.fixed_dictionaries(
        {"kind": st.sampled_from(sorted(FAULT_KINDS)) | SCALARS},
        optional={
            name: SCHEDULE_VALUES
            for name in (
                "limit",
                "min_bytes",
                "n_bytes",
                "probability",
                "from_turn",
                "until_turn",
                "page",
                "response",
                "delay_s",
                "retry_after",
                "fmt",
                "bogus",
            )
        },
    )


SCENARIO_DOCUMENTS = st.fixed_dictionaries(
    {},
    optional={
        "description": st.text(max_size=10) | SCALARS,
        "seed": SCALARS,
        "name": SCALARS,
        "provider": st.fixed_dictionaries(
            {},
            optional={
                "format": st.sampled_from(["openai-chat", "anthropic", "gemini", "nope"]) | SCALARS,
                "model": SCALARS,
                "context_window": SCALARS,
                "max_output_tokens_cap": SCALARS,
            },
        )
        | SCHEDULE_VALUES,
        "fault": st.lists(_fault_tables() | SCHEDULE_VALUES, max_size=3) | SCHEDULE_VALUES,
        "summarizer": st.dictionaries(st.sampled_from(SUMMARIZER_KEYS), SCHEDULE_VALUES) | SCHEDULE_VALUES,
        "workload": st.dictionaries(st.sampled_from(WORKLOAD_KEYS), SCHEDULE_VALUES) | SCHEDULE_VALUES,
        "policy": st.dictionaries(SCHEDULE_KEYS, SCHEDULE_VALUES, max_size=3) | SCHEDULE_VALUES,
        "expect": st.fixed_dictionaries(
            {},
            optional={
                "outcome": st.sampled_from(["recovered", "ok", "bad"]) | SCALARS,
                "failure_kind": SCALARS,
                "compaction_level": SCALARS,
                "floor_warning": SCALARS,
            },
        )
        | SCHEDULE_VALUES,
        "bogus": SCALARS,
    },
)


@FUZZ
@given(document=SCENARIO_DOCUMENTS | st.dictionaries(SCHEDULE_KEYS, SCHEDULE_VALUES, max_size=6))
@example(
    document={
        "description": "x",
        "provider": {"format": "anthropic"},
        "expect": {"outcome": "ok"},
        "fault": [{"kind": "body-cap", "limit": "1e400KB"}],
    }
)
@example(
    document={
        "description": "x",
        "provider": {"format": "anthropic", "context_window": 10**400},
        "expect": {"outcome": "ok"},
        "workload": {"history_bytes": "1e308GB"},
    }
)
def test_arbitrary_scenario_documents_give_a_scenario_or_a_scenario_error(
    document: dict[str, object],
) -> None:
    try:
        scenario = scenario_from_document(document, name="fuzz")
    except ScenarioError as exc:
        assert str(exc).startswith("scenario 'fuzz': "), str(exc)
        return
    assert isinstance(scenario, Scenario)
    assert all(isinstance(fault, Fault) for fault in scenario.faults)
    scenario.apply_policy()  # the validated overrides apply


SCENARIO_TEXT = st.one_of(
    st.text(max_size=200),
    SCENARIO_DOCUMENTS.map(_dumps),
    st.sampled_from(
        [
            "",
            "[",
            "a = [" + "[" * DEEP,
            "[" * DEEP,
            '{"a": ' * DEEP,
            "description = 1\n[[fault]]\n",
            'description = "x"\n[provider]\nformat = "gemini"\n[expect]\noutcome = "ok"\n',
        ]
    ),
)


@FUZZ
@given(text=SCENARIO_TEXT, suffix=st.sampled_from([".toml", ".json"]))
@example(text="a = [" + "[" * DEEP, suffix=".toml")
@example(text="[" * DEEP, suffix=".json")
def test_arbitrary_scenario_files_give_a_scenario_or_a_scenario_error(
    fuzz_dir: Path, text: str, suffix: str
) -> None:
    path = fuzz_dir / f"scenario{suffix}"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        scenario = load_scenario(path)
    except ScenarioError as exc:
        assert str(exc).startswith(str(path)), str(exc)
        return
    assert isinstance(scenario, Scenario)


FAULT_SPEC_PARTS = st.sampled_from(
    [
        *FAULT_KINDS,
        "128KB",
        "1MB",
        "0B",
        "5",
        "-1KB",
        "nan",
        "inf",
        "1e999KB",
        "nginx",
        "envoy",
        "akamai",
        "cloudflare",
        "waf-403-html",
        "reset-after",
        "probability=0.5",
        "probability=2",
        "from_turn=3",
        "until_turn=1",
        "min_bytes=10KB",
        "min_bytes=",
        "=",
        "limit=1",
        "bogus=1",
        "n_bytes=-3",
        "delay_s=0",
        "retry_after=x",
        "fmt=gemini",
        "fmt=nope",
        "",
    ]
) | st.text(alphabet=string.printable, max_size=8)


@FUZZ
@given(spec=st.lists(FAULT_SPEC_PARTS, min_size=1, max_size=5).map(":".join) | st.text(max_size=40))
@example(spec="body-cap:1e400KB")
@example(spec="body-cap:1e308GB:waf-403-html")
@example(spec="reset-after:1e308G")
def test_arbitrary_fault_specs_give_a_fault_or_a_scenario_error(spec: str) -> None:
    try:
        fault = parse_fault_spec(spec)
    except ScenarioError as exc:
        assert str(exc).startswith("fault spec "), str(exc)
        return
    assert isinstance(fault, Fault)
    assert fault.kind in FAULT_KINDS


# -- sizes and recall ------------------------------------------------------------------------------

SIZE_TEXT = st.text(max_size=30) | st.builds(
    lambda number, space, unit: f"{number}{space}{unit}",
    st.floats(allow_nan=True, allow_infinity=True).map(repr)
    | st.integers().map(str)
    | st.sampled_from(["1e308", "1.8e308", "9" * 400, "1_000", "٣", "１２", "-0", ".5", "5."]),
    st.sampled_from(["", " ", "\t"]),
    st.sampled_from(["", "B", "K", "KB", "kb", "M", "MB", "G", "GB", "gb", "TB", "KiB"]),
)


@FUZZ
@given(text=SIZE_TEXT)
@example(text="1e308GB")
@example(text="1.7976931348623157e308K")
@example(text="9" * 400)
def test_parse_payload_size_gives_a_non_negative_int_for_any_text(text: str) -> None:
    size = parse_payload_size(text)
    assert isinstance(size, int) and size >= 0


KEYISH = st.text(alphabet="0123456789abcdefABCDEF", min_size=15, max_size=17)
RECALL_TEXT = st.one_of(
    st.text(max_size=200),
    st.lists(
        st.one_of(KEYISH, KEYISH.map(marker), KEYISH.map(lambda k: f"ccr:{k}"), st.text(max_size=8)),
        max_size=6,
    ).map(" ".join),
    json_values(
        st.sampled_from(["key", "keys", "marker", "markers", "ccr", "id", "other"]) | st.text(max_size=4)
    ).map(_dumps),
)


@FUZZ
@given(query=RECALL_TEXT)
@example(query="[" * DEEP)
@example(query='{"keys": ' + "[" * DEEP)
def test_recall_keys_are_16_hex_and_recall_answers_any_text(query: str) -> None:
    keys = parse_recall_keys(query)
    assert all(KEY_RE.fullmatch(key) for key in keys)
    assert len(keys) == len(set(keys))
    store = MemoryArchive()
    held = {store.put(f"entry {index}") for index in range(3)}
    found = recall(store, query + " " + " ".join(marker(k) for k in sorted(held)))
    assert isinstance(found, RecallResult)
    assert held <= set(found.found)
    assert all(KEY_RE.fullmatch(key) for key in found.missing)
    assert isinstance(found.text, str)


# -- classify over exception chains --------------------------------------------------------------

WEIRD_VALUES = st.one_of(
    SCALARS,
    st.binary(max_size=20),
    st.sampled_from([float("nan"), 10**400, -1, 413, 403, "413", b"403", (), [], {}, object()]),
    st.builds(lambda: _Explodes()),
)
WEIRD_ATTRIBUTES = (
    "status_code",
    "status",
    "code",
    "body",
    "response",
    "message",
    "text",
    "headers",
    "request_bytes",
    "args",
    "errno",
    "__notes__",
    "request",
    "content",
    "error",
)


class _Explodes:
    """A value whose every attribute, str and repr raise."""

    def __getattr__(self, name: str) -> object:
        raise RuntimeError(f"no {name}")

    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def __bool__(self) -> bool:
        raise RuntimeError("no bool")


class _Response:
    def __init__(self, status_code: object, text: object, headers: object) -> None:
        self.status_code = status_code
        self.text = text
        self.headers = headers


def _error(kind: int, text: str, attributes: dict[str, object]) -> BaseException:
    exc: BaseException
    if kind == 0:
        exc = RuntimeError(text)
    elif kind == 1:
        exc = OSError(104, text)
    elif kind == 2:
        exc = type("ReadError", (Exception,), {"__module__": "httpx"})(text)
    elif kind == 3:
        exc = type("APIStatusError", (Exception,), {"__module__": "openai._exceptions"})(text)
    else:
        exc = ExceptionGroup(text or "group", [ValueError(text)])
    for name, value in attributes.items():
        try:
            setattr(exc, name, value)
        except (AttributeError, TypeError):
            pass
    return exc


LINKS = st.lists(
    st.tuples(
        st.integers(0, 4),
        st.text(max_size=40)
        | st.sampled_from(
            [
                "413 Payload Too Large",
                "connection reset by peer",
                "blocked by firewall",
                "prompt is too long",
                "EOF",
            ]
        ),
        st.dictionaries(
            st.sampled_from(WEIRD_ATTRIBUTES),
            WEIRD_VALUES | st.builds(_Response, WEIRD_VALUES, WEIRD_VALUES, WEIRD_VALUES),
            max_size=3,
        ),
        st.sampled_from(["cause", "context", "group"]),
    ),
    min_size=1,
    max_size=8,
)


def _chain(links: list[tuple[int, str, dict[str, object], str]], loop: bool) -> BaseException:
    errors = [_error(kind, text, attributes) for kind, text, attributes, _ in links]
    head = errors[0]
    for (_, _, _, how), outer, inner in zip(links, errors, errors[1:], strict=False):
        if how == "cause":
            outer.__cause__ = inner
        elif how == "context":
            outer.__context__ = inner
        else:
            outer.__context__ = ExceptionGroup("members", [inner])
    if loop:
        errors[-1].__context__ = head
    return head


@FUZZ
@given(links=LINKS, loop=st.booleans(), history_chars=st.none() | st.integers() | st.floats())
def test_classify_never_raises_on_weird_exception_chains(
    links: list[tuple[int, str, dict[str, object], str]], loop: bool, history_chars: object
) -> None:
    failure = classify(_chain(links, loop), history_chars=history_chars)  # type: ignore[arg-type]
    assert isinstance(failure, Failure)
    assert isinstance(failure.kind, FailureKind)


def test_classify_survives_chains_and_groups_deeper_than_the_recursion_limit() -> None:
    deep = RuntimeError("connection reset by peer")
    for index in range(DEEP // 10):
        outer = RuntimeError(f"wrapper {index}")
        outer.__cause__ = deep
        deep = outer
    nested: BaseException = ValueError("413 Payload Too Large")
    for _ in range(DEEP // 10):
        nested = ExceptionGroup("nested", [nested])
    for error in (deep, nested):
        assert isinstance(classify(error, history_chars=10**6), Failure)
