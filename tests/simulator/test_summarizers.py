"""Mock summarizers: each behaviour, usage accounting, the quality gate and the factory."""

from __future__ import annotations

import math
import re
import threading
import time
from pathlib import Path

import pytest

from ctxrecover.archive import MemoryArchive, marker
from ctxrecover.classify import FailureKind, classify
from ctxrecover.errors import CompactionCancelled, ConfigError, SummarizerError
from ctxrecover.messages import Message, ToolCall
from ctxrecover.summarize import (
    SUMMARY_PROMPT,
    CancelToken,
    SummarizationFailed,
    Summarizer,
    build_prompt,
    check_summary,
    render_segment,
    summarize_with_gate,
)
from simulator.summarizers import (
    BEHAVIOURS,
    CALL_OUTCOMES,
    INSTANT_SUMMARY,
    REFUSAL_TEXT,
    SECTIONS,
    SEGMENT_HEADER,
    SUMMARIZER_PRICES,
    ExtractiveSummarizer,
    FailingSummarizer,
    InstantSummarizer,
    OverflowingSummarizer,
    RefusingSummarizer,
    SlowSummarizer,
    TooShortSummarizer,
    extractive_summary,
    make_summarizer,
)
from simulator.transcripts.loaders import load_transcript

TRANSCRIPTS = Path(__file__).parents[2] / "../shared/transcripts"
WINDOW_TOKENS = 128_000


def agent_segment() -> list[Message]:
    """A realistic agent exchange: read, edit, test run with a failure, fix."""
    traceback = "\n".join(
        [
            "$ pytest tests/test_parser.py -q",
            "F.",
            "Traceback (most recent call last):",
            '  File "src/parser.py", line 42, in parse_header',
            "KeyError: 'content-length'",
            "FAILED tests/test_parser.py::test_header - KeyError: 'content-length'",
            "1 failed, 1 passed in 0.12s",
        ]
    )
    source = "\n".join(f"    line {n}: value = compute({n})" for n in range(300))
    return [
        Message.user("The header parser crashes on lowercase headers. Please fix src/parser.py."),
        Message.assistant(
            "I will read the parser first.",
            tool_calls=[ToolCall("c1", "read_file", '{"path": "src/parser.py"}')],
        ),
        Message.tool("c1", f"src/parser.py (300 lines)\n{source}"),
        Message.assistant(
            "Running the tests to reproduce.", tool_calls=[ToolCall("c2", "bash", '{"cmd": "pytest"}')]
        ),
        Message.tool("c2", traceback),
        Message.assistant(
            "Header names must be case-insensitive; I edited src/parser.py to normalise them.",
            tool_calls=[ToolCall("c3", "write_file", '{"path": "src/parser.py"}')],
        ),
        Message.tool("c3", "wrote 12 lines to src/parser.py"),
        Message.user("Now also update docs/headers.md with the new behaviour."),
    ]


def prompt_for(segment: list[Message]) -> tuple[str, int]:
    """The build_prompt text of ``segment`` and the rendered segment's length (as the compactor does)."""
    prompt_chars = len(SUMMARY_PROMPT)
    text = render_segment(segment, archive=None, window_tokens=WINDOW_TOKENS, prompt_chars=prompt_chars)
    return build_prompt(text), len(text)


# -- extractive ------------------------------------------------------------------------------
def test_extractive_summary_of_a_realistic_segment_passes_the_quality_gate() -> None:
    prompt, segment_chars = prompt_for(agent_segment())
    result = ExtractiveSummarizer().summarize(prompt)
    assert check_summary(result.text, segment_chars) is None
    assert re.findall(r"^## (.+)$", result.text, re.MULTILINE) == list(SECTIONS)


def test_extractive_summary_copies_paths_commands_errors_and_requests_exactly() -> None:
    prompt, _ = prompt_for(agent_segment())
    text = ExtractiveSummarizer().summarize(prompt).text
    files_read = text.split("## Files Read\n")[1].split("\n\n")[0]
    files_modified = text.split("## Files Modified\n")[1].split("\n\n")[0]
    assert "- src/parser.py" in files_read
    assert "- docs/headers.md" in files_modified
    assert "- pytest tests/test_parser.py -q" in text
    assert "- read_file → src/parser.py (300 lines)" in text
    assert "\n- KeyError: 'content-length'\n" in text
    assert "- Pending: Now also update docs/headers.md with the new behaviour." in text
    assert "- Done: Header names must be case-insensitive; I edited src/parser.py to normalise them." in text


def test_extractive_summary_keeps_the_markers_of_archived_originals() -> None:
    store = MemoryArchive()
    key = store.put("x" * 50_000)
    stub = Message.tool("c1", f"big output, folded {marker(key)}")
    segment = [Message.user("read it"), Message.assistant("ok", tool_calls=[ToolCall("c1", "cat")]), stub]
    text = extractive_summary(f"[tool]: {stub.content}\n\n")
    assert marker(key) in text
    assert marker(key) in ExtractiveSummarizer().summarize(prompt_for(segment)[0]).text


def test_extractive_summary_is_capped_to_a_fraction_of_the_segment() -> None:
    segment = [
        Message.user(f"step {n}: inspect pkg/module_{n}.py and report Error E{n}") for n in range(2000)
    ]
    text = "".join(f"[user]: {m.content}\n\n" for m in segment)
    summary = extractive_summary(text, fraction=0.05)
    assert len(summary) <= 0.05 * len(text)
    assert re.findall(r"^## (.+)$", summary, re.MULTILINE) == [
        "Files Read",
        "Errors & Resolutions",
        "Current Task State",
    ]


def test_extractive_summary_is_deterministic_and_reads_the_segment_after_the_header() -> None:
    prompt, _ = prompt_for(agent_segment())
    assert build_prompt("abc").endswith(SEGMENT_HEADER + "abc")
    first, second = ExtractiveSummarizer(), ExtractiveSummarizer()
    assert first.summarize(prompt).text == second.summarize(prompt).text
    assert "note-taker" not in first.calls[0].text


def test_extractive_summary_of_an_empty_segment_still_says_something() -> None:
    assert check_summary(ExtractiveSummarizer().summarize(build_prompt("")).text, 0) is None


@pytest.mark.skipif(not TRANSCRIPTS.is_dir(), reason="shared transcripts not found at ../shared/transcripts")
def test_extractive_summary_of_a_real_swe_agent_segment_passes_the_gate() -> None:
    path = TRANSCRIPTS / "sweagent-fc__marshmallow-code__marshmallow-1867.traj"
    if not path.exists():
        pytest.skip(f"{path.name} not in ../shared/transcripts")
    messages = list(load_transcript(path).messages)
    segment = [m for m in messages if m.role != "system"][:40]
    prompt, segment_chars = prompt_for(segment)
    result = make_summarizer("extractive").summarize(prompt)  # type: ignore[union-attr]
    assert check_summary(result.text, segment_chars) is None
    assert "## Current Task State" in result.text
    assert len(result.text) <= max(400, 0.2 * segment_chars)


# -- usage and recording -----------------------------------------------------------------------
def test_usage_is_chars_over_four_priced_per_million_tokens() -> None:
    summarizer = ExtractiveSummarizer(model="mock-claude-3-5-haiku")
    prompt, _ = prompt_for(agent_segment())
    result = summarizer.summarize(prompt, instruction="focus on tests", timeout=5.0)
    price = SUMMARIZER_PRICES["mock-claude-3-5-haiku"]
    assert result.input_tokens == math.ceil(len(prompt) / 4)
    assert result.output_tokens == math.ceil(len(result.text) / 4)
    assert result.cost_usd == pytest.approx((result.input_tokens * 0.80 + result.output_tokens * 4.00) / 1e6)
    assert (price.input, price.output) == (0.80, 4.00)
    assert result.model == "mock-claude-3-5-haiku"
    call = summarizer.calls[0]
    assert (call.prompt, call.instruction, call.timeout, call.text, call.error) == (
        prompt,
        "focus on tests",
        5.0,
        result.text,
        None,
    )
    summarizer.summarize(prompt)
    assert summarizer.input_tokens == 2 * result.input_tokens
    assert summarizer.cost_usd == pytest.approx(2 * result.cost_usd)


def test_a_failed_call_is_recorded_without_usage() -> None:
    summarizer = FailingSummarizer()
    with pytest.raises(SummarizerError):
        summarizer.summarize("prompt")
    assert summarizer.calls[0].error is not None and summarizer.calls[0].text is None
    assert (summarizer.input_tokens, summarizer.output_tokens, summarizer.cost_usd) == (0, 0, 0.0)


@pytest.mark.parametrize("behaviour", [name for name, cls in BEHAVIOURS.items() if cls is not None])
def test_every_mock_is_a_summarizer(behaviour: str) -> None:
    summarizer = make_summarizer(behaviour)
    assert isinstance(summarizer, Summarizer)
    assert summarizer.window_tokens > 0


# -- gate rejections ---------------------------------------------------------------------------
def test_refusing_summarizer_is_rejected_twice_by_the_gate() -> None:
    prompt, segment_chars = prompt_for(agent_segment())
    summarizer = RefusingSummarizer()
    assert summarizer.summarize(prompt).text == REFUSAL_TEXT == "I'm sorry, I cannot help with that."
    with pytest.raises(SummarizationFailed) as failed:
        summarize_with_gate(summarizer, prompt, segment_chars)
    assert failed.value.calls == 2
    assert failed.value.rejections == ('refusal: "I\'m sorry, I cannot help with that."',) * 2
    assert failed.value.cost_usd == pytest.approx(summarizer.calls[1].cost_usd * 2)


def test_too_short_summarizer_is_rejected_for_a_long_segment() -> None:
    summarizer = TooShortSummarizer()
    assert summarizer.summarize("x").text == "ok"
    assert check_summary("ok", 100_000) == "too short: 2 chars for a 100000-char segment (minimum 80)"
    with pytest.raises(SummarizationFailed, match="too short"):
        summarize_with_gate(summarizer, "p", 100_000)


def test_instant_summarizer_passes_the_gate_for_any_segment() -> None:
    result = InstantSummarizer().summarize("whatever")
    assert result.text == INSTANT_SUMMARY
    assert check_summary(result.text, 10_000_000) is None


# -- slow: cancellation and timeout ----------------------------------------------------------------
def test_slow_summarizer_sleeps_its_delay_in_slices_then_answers() -> None:
    slept: list[float] = []
    summarizer = SlowSummarizer(1.0, sleep=slept.append, slice_s=0.25)
    prompt, segment_chars = prompt_for(agent_segment())
    result = summarizer.summarize(prompt)
    assert slept == [0.25] * 4
    assert check_summary(result.text, segment_chars) is None


def test_slow_summarizer_honours_cancel_between_slices() -> None:
    token = CancelToken()
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 3:
            token.cancel()

    summarizer = SlowSummarizer(10.0, sleep=sleep, slice_s=0.5)
    with pytest.raises(CompactionCancelled):
        summarizer.summarize("p", cancel=token)
    assert len(slept) == 3
    assert summarizer.calls[0].error == "compaction cancelled by the user"


def test_slow_summarizer_cancelled_from_another_thread_returns_promptly() -> None:
    token = CancelToken()
    timer = threading.Timer(0.05, token.cancel)
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(CompactionCancelled):
            summarize_with_gate(SlowSummarizer(30.0), "p", 10, cancel=token)
    finally:
        timer.cancel()
    assert time.monotonic() - started < 2.0


def test_slow_summarizer_times_out_like_an_http_summarizer() -> None:
    slept: list[float] = []
    summarizer = SlowSummarizer(10.0, sleep=slept.append, slice_s=0.25)
    with pytest.raises(SummarizerError, match=r"^summarizer mock-gpt-4o-mini timed out after 0.6s$"):
        summarizer.summarize("p", timeout=0.6)
    assert sum(slept) == pytest.approx(0.6)


def test_an_already_cancelled_token_stops_any_mock_before_it_answers() -> None:
    token = CancelToken()
    token.cancel()
    with pytest.raises(CompactionCancelled):
        InstantSummarizer().summarize("p", cancel=token)


# -- what each call did ----------------------------------------------------------------------------
def _outcome(summarizer: Summarizer, prompt: str, **options: object) -> str:
    try:
        summarizer.summarize(prompt, **options)  # type: ignore[arg-type]
    except (SummarizerError, CompactionCancelled):
        pass
    (call,) = summarizer.calls  # type: ignore[attr-defined]
    return str(call.outcome)


def test_each_call_records_what_it_did() -> None:
    long_prompt, _ = prompt_for(agent_segment())
    cancelled = CancelToken()
    cancelled.cancel()
    outcomes = [
        _outcome(ExtractiveSummarizer(), long_prompt),
        _outcome(RefusingSummarizer(), "p"),
        _outcome(TooShortSummarizer(), long_prompt),
        _outcome(FailingSummarizer(), "p"),
        _outcome(OverflowingSummarizer(), long_prompt),
        _outcome(SlowSummarizer(10.0, sleep=lambda _s: None), "p", timeout=0.5),
        _outcome(SlowSummarizer(10.0, sleep=lambda _s: None), "p", cancel=cancelled),
    ]
    assert tuple(outcomes) == CALL_OUTCOMES
    assert _outcome(InstantSummarizer(), "p") == "answered"
    assert _outcome(OverflowingSummarizer(window_tokens=WINDOW_TOKENS), long_prompt) == "answered"


# -- failing and overflowing -----------------------------------------------------------------------
def test_failing_summarizer_raises_like_an_http_500() -> None:
    with pytest.raises(SummarizerError, match=r"^summarizer HTTP 500: \{\"error\": .*server_error"):
        FailingSummarizer().summarize("p")
    with pytest.raises(SummarizationFailed) as failed:
        summarize_with_gate(FailingSummarizer(status=502, body="Bad Gateway"), "p", 10)
    assert str(failed.value) == "summarizer HTTP 502: Bad Gateway"
    assert failed.value.calls == 1


def test_overflowing_summarizer_raises_the_provider_overflow_text() -> None:
    prompt, _ = prompt_for(agent_segment())
    summarizer = OverflowingSummarizer()
    with pytest.raises(SummarizerError) as raised:
        summarizer.summarize(prompt)
    tokens = math.ceil(len(prompt) / 4)
    assert str(raised.value) == (
        f"summarizer request overflowed its own window (HTTP 400, {len(prompt)} prompt chars, "
        f"window 256 tokens): This model's maximum context length is 256 tokens. However, your "
        f"messages resulted in {tokens} tokens. Please reduce the length of the messages."
    )
    assert classify(raised.value).kind is FailureKind.CONTEXT_OVERFLOW
    assert summarizer.window_tokens == 256


def test_overflowing_summarizer_answers_a_prompt_that_fits_its_window() -> None:
    summarizer = OverflowingSummarizer(window_tokens=WINDOW_TOKENS)
    prompt, segment_chars = prompt_for(agent_segment())
    assert check_summary(summarizer.summarize(prompt).text, segment_chars) is None


# -- factory ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("behaviour", "cls"),
    [
        ("extractive", ExtractiveSummarizer),
        ("refusing", RefusingSummarizer),
        ("too-short", TooShortSummarizer),
        ("slow", SlowSummarizer),
        ("failing", FailingSummarizer),
        ("overflowing", OverflowingSummarizer),
        ("instant", InstantSummarizer),
    ],
)
def test_make_summarizer_builds_each_named_behaviour(behaviour: str, cls: type) -> None:
    assert type(make_summarizer(behaviour)) is cls


def test_make_summarizer_none_means_no_summarizer() -> None:
    assert make_summarizer("none") is None
    with pytest.raises(ConfigError, match="takes no options"):
        make_summarizer("none", delay_s=1)


def test_make_summarizer_passes_options() -> None:
    summarizer = make_summarizer("slow", delay_s=0.5, model="mock-local", window_tokens=8192)
    assert isinstance(summarizer, SlowSummarizer)
    assert (summarizer.delay_s, summarizer.model, summarizer.window_tokens) == (0.5, "mock-local", 8192)


def test_unknown_behaviour_lists_the_valid_names() -> None:
    with pytest.raises(ValueError, match="unknown summarizer behaviour 'chatty'; use one of ") as raised:
        make_summarizer("chatty")
    for name in ("extractive", "refusing", "too-short", "slow", "failing", "overflowing", "instant", "none"):
        assert name in str(raised.value)


@pytest.mark.parametrize(
    ("behaviour", "options", "message"),
    [
        ("extractive", {"model": "gpt-5"}, "unknown mock summarizer model 'gpt-5'"),
        ("extractive", {"window_tokens": 0}, "window_tokens must be"),
        ("extractive", {"fraction": 0}, "fraction is the summary's share"),
        ("slow", {"delay_s": -1}, "SlowSummarizer needs delay_s >= 0"),
        ("refusing", {"colour": "red"}, "bad options for summarizer behaviour 'refusing'"),
    ],
)
def test_bad_options_fail_early_with_a_clear_message(behaviour: str, options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        make_summarizer(behaviour, **options)
