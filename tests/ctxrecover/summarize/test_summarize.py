"""SPEC §5 level 2 (summarizer input, prompt, quality gate) and §9 (external context engine)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxrecover.summarize as summarize_module
import ctxrecover.summarize.prompt as summary_prompt_module
from ctxrecover.archive import MemoryArchive, marker
from ctxrecover.errors import CompactionCancelled, ConfigError, SummarizerError
from ctxrecover.messages import Message, ToolCall
from ctxrecover.passes.parts import set_aside
from ctxrecover.summarize import (
    SUMMARY_PROMPT,
    CancelToken,
    ContextEngineSummarizer,
    GatedSummary,
    HttpSummarizer,
    SummarizationFailed,
    Summarizer,
    SummaryResult,
    build_prompt,
    check_summary,
    render_segment,
    summarize_with_gate,
    summary_input_budget,
    summary_min_chars,
)
from ctxrecover.summarize.prompt import is_set_aside

SEPARATOR = "\n... [truncated for summarization] ...\n"
RECALL_SUFFIX = "\n[full content recoverable via @recall "
HEADER = "\n\nCONVERSATION SEGMENT TO EXTRACT FROM:\n\n"
GOOD_SUMMARY = (
    "## Files Read\n- src/app.py (120 lines) — the CLI entry point\n\n## Current Task State\n- Done: x"
)


@dataclass
class ScriptedSummarizer:
    """Answers from a script (a string, or an exception to raise); records every prompt."""

    answers: list[str | BaseException]
    window_tokens: int = 8192
    prompts: list[str] = field(default_factory=list)
    instructions: list[str | None] = field(default_factory=list)

    def summarize(
        self,
        prompt: str,
        *,
        instruction: str | None = None,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
    ) -> SummaryResult:
        self.prompts.append(prompt)
        self.instructions.append(instruction)
        answer = self.answers[len(self.prompts) - 1]
        if isinstance(answer, BaseException):
            raise answer
        return SummaryResult(answer, input_tokens=100, output_tokens=10, cost_usd=0.001, model="fake-model")


def long_text(n: int) -> str:
    """Distinct, position-revealing text of exactly n chars, of one-char words: every cut point is a
    word boundary, so a cut keeps its whole room (a cut never splits a word, SPEC §12)."""
    return " ".join("".join(f"{i:07d}|" for i in range(n // 16 + 1)))[:n]


def content_of(rendered_line: str, role: str) -> str:
    prefix = f"[{role}]: "
    assert rendered_line.startswith(prefix) and rendered_line.endswith("\n\n")
    return rendered_line[len(prefix) : -2]


# -- public namespace ---------------------------------------------------------------------
def test_all_is_sorted_and_exported() -> None:
    names = summarize_module.__all__
    assert names == sorted(names)
    assert all(hasattr(summarize_module, name) for name in names)


# -- cancel token ---------------------------------------------------------------------------
def test_cancel_token_cancel_raises_compaction_cancelled() -> None:
    token = CancelToken()
    assert not token.cancelled
    token.raise_if_cancelled()
    token.cancel()
    assert token.cancelled
    with pytest.raises(CompactionCancelled, match="cancelled by the user"):
        token.raise_if_cancelled()


def test_cancel_token_deadline_uses_the_injected_clock() -> None:
    now = [100.0]
    token = CancelToken.after(5.0, clock=lambda: now[0])
    assert token.remaining() == 5.0 and not token.cancelled
    now[0] = 105.0
    assert token.cancelled and token.remaining() == 0.0
    with pytest.raises(CompactionCancelled, match="deadline"):
        token.raise_if_cancelled()
    assert CancelToken().remaining() is None


def test_cancel_token_cancel_from_another_thread_is_seen() -> None:
    token = CancelToken()
    worker = threading.Thread(target=token.cancel)
    worker.start()
    worker.join()
    assert token.cancelled


# -- input budget ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("window_tokens", "prompt_chars", "chars_per_token", "expected"),
    [
        (128_000, 1_500, 4.0, 256_000 - 1_500),  # half the window in chars, minus the prompt
        (8_192, 1_500, 4.0, 20_000 - 1_500),  # floor 20 000, then minus the prompt
        (10_000, 0, 3.0, 20_000),
        (200_000, 0, 2.5, 250_000),
    ],
)
def test_summary_input_budget(
    window_tokens: int, prompt_chars: int, chars_per_token: float, expected: int
) -> None:
    assert summary_input_budget(window_tokens, prompt_chars, chars_per_token) == expected


@pytest.mark.parametrize("bad", [0, -1])
def test_summary_input_budget_rejects_a_bad_window(bad: int) -> None:
    with pytest.raises(ConfigError, match="window_tokens"):
        summary_input_budget(bad, 0)


# -- render_segment ---------------------------------------------------------------------------
def test_render_segment_lines_are_role_tagged_and_tool_calls_listed() -> None:
    segment = [
        Message.user("fix the failing test"),
        Message.assistant("Let me look", tool_calls=[ToolCall("a", "read_file"), ToolCall("b", "bash")]),
        Message.tool("a", "def test(): ..."),
    ]
    rendered = render_segment(segment, archive=MemoryArchive(), window_tokens=8192, prompt_chars=2000)
    assert rendered == (
        "[user]: fix the failing test\n\n"
        "[assistant]: Let me look\n[tool_calls: read_file, bash]\n\n"
        "[tool]: def test(): ...\n\n"
    )


def test_render_segment_long_message_keeps_head_and_tail_3_to_1() -> None:
    content = long_text(100_000)
    rendered = render_segment([Message.tool("a", content)], archive=None, window_tokens=1000, prompt_chars=0)
    share = 20_000 - len("[tool]: \n\n")
    kept = share - len(SEPARATOR)
    head, tail = round(kept * 0.75), kept - round(kept * 0.75)
    assert rendered == "[tool]: " + content[:head] + SEPARATOR + content[-tail:] + "\n\n"
    assert len(rendered) == 20_000
    assert head == pytest.approx(3 * tail, abs=3)


def test_render_segment_every_share_is_at_least_600() -> None:
    segment = [Message.user(long_text(5_000)) for _ in range(50)]  # 20 000 / 50 = 400 < 600
    rendered = render_segment(segment, archive=None, window_tokens=1000, prompt_chars=0)
    lines = rendered.split("\n\n")[:-1]
    assert len(lines) == 50
    for line in lines:
        body = line.removeprefix("[user]: ")
        assert len(body) == 600 and SEPARATOR in body


def test_render_segment_redistributes_the_unused_share_of_short_messages() -> None:
    short = "ok, go ahead"
    segment = [
        Message.user(short),
        Message.tool("a", long_text(50_000)),
        Message.tool("b", long_text(50_000)),
    ]
    rendered = render_segment(segment, archive=None, window_tokens=1000, prompt_chars=0)
    framing = len("[user]: \n\n") + 2 * len("[tool]: \n\n")
    each_long = (20_000 - framing - len(short)) // 2
    first, second, third = rendered.split("\n\n")[:3]
    assert first == f"[user]: {short}"
    assert len(second.removeprefix("[tool]: ")) >= each_long
    assert len(third.removeprefix("[tool]: ")) >= each_long
    assert len(rendered) <= 20_000


def test_render_segment_restores_a_stub_whose_original_fits() -> None:
    archive = MemoryArchive()
    original = long_text(3_000)
    key = archive.put(original)
    stub = f"[Old tool result cleared — 1 lines, 3000 chars, text]{RECALL_SUFFIX}{marker(key)}]"
    segment = [Message.user("read it"), Message.tool("a", stub)]
    rendered = render_segment(segment, archive=archive, window_tokens=8192, prompt_chars=0)
    assert rendered == f"[user]: read it\n\n[tool]: {original}\n\n"


@pytest.mark.parametrize(("kept", "restored"), [(4_900, True), (5_000, False), (7_500, False)])
def test_render_segment_restores_only_a_message_holding_less_than_half_of_its_original(
    kept: int, restored: bool
) -> None:
    # recovery Level 1 keeps head and tail of a long answer: the cut is read as it is, since
    # restoring it would pay for the whole original to learn the part the cut left out
    archive = MemoryArchive()
    original = long_text(10_000)
    key = archive.put(original)
    note = f"\n... [truncated] ...\n{RECALL_SUFFIX}{marker(key)}]"
    cut = original[: kept - len(note)] + note
    assert len(cut) == kept
    rendered = render_segment([Message.assistant(cut)], archive=archive, window_tokens=8192, prompt_chars=0)
    assert rendered == f"[assistant]: {original if restored else cut}\n\n"


def test_render_segment_never_restores_a_message_set_aside_for_a_content_block() -> None:
    # A gateway refused to carry it (SPEC §11): its original stays archived, never sent again.
    archive = MemoryArchive()
    original = "curl https://get.example.sh | sh\n" + long_text(3_000)
    history, key = set_aside([Message.user("run it"), Message.tool("a", original)], 1, archive=archive)
    assert is_set_aside(history[1].content)
    cleared = f"[Old tool result cleared — 1 lines, 3000 chars, text]{RECALL_SUFFIX}{marker(key)}]"
    assert not is_set_aside(cleared)
    rendered = render_segment(history, archive=archive, window_tokens=8192, prompt_chars=0)
    assert rendered == f"[user]: run it\n\n[tool]: {history[1].content}\n\n"
    assert archive.get(key) == original


def test_render_segment_feeds_an_earlier_summary_as_is() -> None:
    # The summary's marker points at the whole transcript it replaced: restoring it would
    # re-summarize the conversation from its start at every compaction.
    archive = MemoryArchive()
    key = archive.put(long_text(3_000))
    summary = Message.user(
        f"[STRUCTURED SUMMARY — covering 12 earlier messages]\n\n## Current Task State\n- parser fixed"
        f"\n\n[full transcript of the summarized segment recoverable via @recall {marker(key)}]",
        is_summary=True,
        summary_of=12,
    )
    segment = [summary, Message.user("next step")]
    rendered = render_segment(segment, archive=archive, window_tokens=8192, prompt_chars=0)
    assert rendered == f"[user]: {summary.content}\n\n[user]: next step\n\n"


def test_render_segment_keeps_the_stub_when_the_original_does_not_fit() -> None:
    archive = MemoryArchive()
    key = archive.put(long_text(100_000))
    stub = f"[Old tool result cleared — 1 lines, 100000 chars, text]{RECALL_SUFFIX}{marker(key)}]"
    other = long_text(30_000)
    segment = [Message.tool("a", stub), Message.user(other)]
    rendered = render_segment(segment, archive=archive, window_tokens=1000, prompt_chars=0)
    stub_line = f"[tool]: {stub}\n\n"
    assert rendered.startswith(stub_line)
    # the stub gave back its claim: the other message takes the rest of the budget
    user_body = content_of(rendered[len(stub_line) :], "user")
    assert len(user_body) == 20_000 - len(stub_line) - len("[user]: \n\n")
    assert len(rendered) == 20_000


def test_render_segment_unknown_marker_keeps_the_stub() -> None:
    stub = f"see {marker('0123456789abcdef')}"
    rendered = render_segment(
        [Message.tool("a", stub)], archive=MemoryArchive(), window_tokens=8192, prompt_chars=0
    )
    assert rendered == f"[tool]: {stub}\n\n"


@settings(max_examples=40)
@given(
    lengths=st.lists(st.integers(min_value=0, max_value=40_000), min_size=1, max_size=30),
    window_tokens=st.integers(min_value=1_000, max_value=40_000),
    prompt_chars=st.integers(min_value=0, max_value=5_000),
)
def test_render_segment_total_stays_within_budget(
    lengths: list[int], window_tokens: int, prompt_chars: int
) -> None:
    segment = [
        Message.user("u" * n) if i % 2 else Message.tool(str(i), "t" * n) for i, n in enumerate(lengths)
    ]
    budget = summary_input_budget(window_tokens, prompt_chars)
    framing = sum(len(f"[{m.role}]: \n\n") for m in segment)
    rendered = render_segment(segment, archive=None, window_tokens=window_tokens, prompt_chars=prompt_chars)
    assert rendered.count("\n\n[") == len(segment) - 1
    if framing + 600 * len(segment) <= budget:
        assert len(rendered) <= budget
    if sum(lengths) + framing <= budget:
        assert SEPARATOR not in rendered


def test_render_segment_empty_segment_is_empty() -> None:
    assert render_segment([], archive=None, window_tokens=8192, prompt_chars=0) == ""


# -- prompt -----------------------------------------------------------------------------------
def test_summary_prompt_has_the_six_sections_in_order() -> None:
    sections = [
        "## Files Read",
        "## Files Modified",
        "## Commands Executed",
        "## Key Decisions",
        "## Errors & Resolutions",
        "## Current Task State",
    ]
    positions = [SUMMARY_PROMPT.index(s) for s in sections]
    assert positions == sorted(positions)
    assert "note-taker" in SUMMARY_PROMPT


def test_build_prompt_exact_structure() -> None:
    assert build_prompt("[user]: hi\n\n") == SUMMARY_PROMPT + HEADER + "[user]: hi\n\n"
    assert build_prompt("SEG", "   ") == SUMMARY_PROMPT + HEADER + "SEG"


def test_build_prompt_places_the_manual_compact_instruction_before_the_segment() -> None:
    prompt = build_prompt("SEG", "  keep the database migration details  ")
    instruction = "keep the database migration details"
    guidance = summary_prompt_module.INSTRUCTION_TEMPLATE.format(instruction=instruction)
    assert prompt == SUMMARY_PROMPT + guidance + HEADER + "SEG"
    assert guidance.startswith("\n\n") and "keep the database migration details" in guidance


# -- quality gate -------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["", "   ", "\n\t  \n"])
def test_gate_rejects_empty_answers(text: str) -> None:
    assert check_summary(text, 200) == "empty answer"


@pytest.mark.parametrize(
    "text",
    [
        "I'm sorry, I cannot help with summarizing this conversation.",
        "I’m sorry, but I can’t do that.",
        "I am sorry, this is not possible.",
        "Sorry, I can't share that.",
        "I can't summarize private conversations.",
        "I cannot help with this request.",
        "As an AI language model, I do not keep notes.",
        "**I'm sorry**, I cannot comply.",
        "Desculpe, não posso ajudar com isso.",
        "Desculpa, mas não consigo.",
        "Não posso resumir esta conversa.",
        "Nao posso resumir esta conversa.",
        "Lamento, mas não posso continuar.",
        "Infelizmente, não é possível.",
    ],
)
def test_gate_rejects_refusals_in_english_and_portuguese(text: str) -> None:
    reason = check_summary(text, 200)
    assert reason is not None and reason.startswith("refusal: ")


def test_gate_accepts_a_summary_that_mentions_an_apology_later() -> None:
    assert (
        check_summary("## Errors & Resolutions\n- user said: I'm sorry, I cannot run it → fixed path", 200)
        is None
    )


@pytest.mark.parametrize(
    ("segment_chars", "expected"),
    [(0, 0), (200, 0), (499, 0), (500, 1), (10_000, 20), (40_000, 80), (100_000, 80)],
)
def test_summary_min_chars_is_one_per_500_capped_at_80(segment_chars: int, expected: int) -> None:
    assert summary_min_chars(segment_chars) == expected


def test_gate_short_answer_passes_for_a_small_segment_and_fails_for_a_large_one() -> None:
    assert check_summary("SUMMARY", 200) is None
    assert check_summary("SUMMARY", 100_000) == "too short: 7 chars for a 100000-char segment (minimum 80)"


# -- summarize_with_gate ----------------------------------------------------------------------------
def test_gate_accepts_the_first_good_answer() -> None:
    summarizer = ScriptedSummarizer([f"  {GOOD_SUMMARY}\n"])
    gated = summarize_with_gate(summarizer, "PROMPT", 1_000, instruction="focus")
    assert gated == GatedSummary(
        text=GOOD_SUMMARY, calls=1, input_tokens=100, output_tokens=10, cost_usd=0.001, model="fake-model"
    )
    assert summarizer.prompts == ["PROMPT"] and summarizer.instructions == ["focus"]


def test_gate_retries_once_after_a_rejection() -> None:
    summarizer = ScriptedSummarizer(["I'm sorry, I cannot do that.", GOOD_SUMMARY])
    gated = summarize_with_gate(summarizer, "PROMPT", 1_000)
    assert gated.text == GOOD_SUMMARY
    assert gated.calls == 2 and gated.input_tokens == 200 and gated.output_tokens == 20
    assert gated.cost_usd == pytest.approx(0.002)
    assert len(gated.rejections) == 1 and gated.rejections[0].startswith("refusal")


def test_gate_second_rejection_raises_with_the_usage_spent() -> None:
    summarizer = ScriptedSummarizer(["", "SUMMARY"])
    with pytest.raises(SummarizationFailed) as info:
        summarize_with_gate(summarizer, "PROMPT", 100_000)
    err = info.value
    assert isinstance(err, SummarizerError)
    assert (err.calls, err.input_tokens, err.output_tokens) == (2, 200, 20)
    assert err.cost_usd == pytest.approx(0.002)
    assert err.rejections == ("empty answer", "too short: 7 chars for a 100000-char segment (minimum 80)")
    assert "summary rejected" in str(err)


def test_gate_error_is_not_retried_and_carries_the_usage() -> None:
    summarizer = ScriptedSummarizer(["", SummarizerError("HTTP 500"), GOOD_SUMMARY])
    with pytest.raises(SummarizationFailed, match="HTTP 500") as info:
        summarize_with_gate(summarizer, "PROMPT", 1_000)
    assert info.value.calls == 2 and info.value.input_tokens == 100
    assert len(summarizer.prompts) == 2


def test_gate_wraps_unexpected_exceptions_so_the_compactor_can_degrade() -> None:
    with pytest.raises(SummarizationFailed, match="boom"):
        summarize_with_gate(ScriptedSummarizer([RuntimeError("boom")]), "PROMPT", 1_000)


def test_gate_with_no_retries_makes_one_call() -> None:
    summarizer = ScriptedSummarizer(["", GOOD_SUMMARY])
    with pytest.raises(SummarizationFailed):
        summarize_with_gate(summarizer, "PROMPT", 1_000, retries=0)
    assert len(summarizer.prompts) == 1


def test_gate_propagates_cancellation() -> None:
    with pytest.raises(CompactionCancelled):
        summarize_with_gate(ScriptedSummarizer([CompactionCancelled("esc")]), "PROMPT", 1_000)
    token = CancelToken()
    token.cancel()
    summarizer = ScriptedSummarizer([GOOD_SUMMARY])
    with pytest.raises(CompactionCancelled):
        summarize_with_gate(summarizer, "PROMPT", 1_000, cancel=token)
    assert summarizer.prompts == []


# -- HttpSummarizer -------------------------------------------------------------------------------
def completion(text: str | None, usage: dict[str, int] | None = None, **message: object) -> httpx.Response:
    body: dict[str, object] = {
        "id": "chatcmpl-1",
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text, **message}}],
    }
    if usage is not None:
        body["usage"] = usage
    return httpx.Response(200, json=body)


def http_summarizer(handler, **kwargs: object) -> HttpSummarizer:  # type: ignore[no-untyped-def]
    options: dict[str, object] = {
        "base_url": "https://llm.test/v1",
        "model": "gpt-4o-mini",
        "api_key": "sk-test",
    }
    options.update(kwargs)
    return HttpSummarizer(transport=httpx.MockTransport(handler), **options)  # type: ignore[arg-type]


def test_http_summarizer_success_reports_tokens_and_cost() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return completion(
            GOOD_SUMMARY, {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500}
        )

    summarizer = http_summarizer(handler, price_per_mtok_in=0.15, price_per_mtok_out=0.60)
    result = summarizer.summarize("PROMPT TEXT", instruction="ignored: already in the prompt")
    assert result.text == GOOD_SUMMARY
    assert (result.input_tokens, result.output_tokens) == (1200, 300)
    assert result.cost_usd == pytest.approx((1200 * 0.15 + 300 * 0.60) / 1_000_000)
    assert result.model == "gpt-4o-mini-2024-07-18"
    (request,) = seen
    assert request.method == "POST" and str(request.url) == "https://llm.test/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert json.loads(request.content) == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "PROMPT TEXT"}],
    }


def test_http_summarizer_estimates_tokens_when_usage_is_missing() -> None:
    result = http_summarizer(lambda request: completion("x" * 40)).summarize("p" * 400)
    assert (result.input_tokens, result.output_tokens) == (100, 10)


def test_http_summarizer_surfaces_a_refusal_field_for_the_gate() -> None:
    result = http_summarizer(
        lambda r: completion(None, refusal="I'm sorry, I cannot help with that.")
    ).summarize("P")
    assert check_summary(result.text, 200) is not None


OVERFLOW_BODY = {
    "error": {
        "message": "This model's maximum context length is 128000 tokens. However, your messages resulted in "
        "130000 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "code": "context_length_exceeded",
    }
}


def test_http_summarizer_400_raises_summarizer_error() -> None:
    summarizer = http_summarizer(lambda request: httpx.Response(400, json=OVERFLOW_BODY))
    with pytest.raises(SummarizerError, match="400"):
        summarizer.summarize("PROMPT")


def test_http_summarizer_overflow_says_it_overflowed_its_own_window() -> None:
    summarizer = http_summarizer(lambda request: httpx.Response(400, json=OVERFLOW_BODY))
    with pytest.raises(SummarizerError, match="summarizer request overflowed its own window"):
        summarizer.summarize("PROMPT")


def test_http_summarizer_other_http_errors_name_the_status() -> None:
    summarizer = http_summarizer(lambda request: httpx.Response(503, text="upstream unavailable"))
    with pytest.raises(SummarizerError, match="summarizer HTTP 503: upstream unavailable"):
        summarizer.summarize("PROMPT")


def test_http_summarizer_transport_timeout_raises_summarizer_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("read timed out", request=request)

    with pytest.raises(SummarizerError, match="timed out"):
        http_summarizer(handler).summarize("PROMPT")


def test_http_summarizer_overall_timeout_does_not_hang() -> None:
    release = threading.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        release.wait(5)
        return completion(GOOD_SUMMARY)

    started = time.monotonic()
    try:
        with pytest.raises(SummarizerError, match="timed out after 0.1s"):
            http_summarizer(handler, timeout=0.1).summarize("PROMPT")
    finally:
        release.set()
    assert time.monotonic() - started < 2


def test_http_summarizer_cancel_stops_waiting() -> None:
    release = threading.Event()
    token = CancelToken()

    def handler(request: httpx.Request) -> httpx.Response:
        token.cancel()
        release.wait(5)
        return completion(GOOD_SUMMARY)

    try:
        with pytest.raises(CompactionCancelled):
            http_summarizer(handler).summarize("PROMPT", cancel=token)
    finally:
        release.set()


@pytest.mark.parametrize("body", ["not json", '{"choices": []}', '{"choices": [{"message": "x"}]}'])
def test_http_summarizer_malformed_answer_raises_summarizer_error(body: str) -> None:
    with pytest.raises(SummarizerError, match="summarizer answer"):
        http_summarizer(lambda request: httpx.Response(200, text=body)).summarize("PROMPT")


def test_http_summarizer_is_a_summarizer() -> None:
    assert isinstance(http_summarizer(lambda r: completion("x")), Summarizer)


# -- HttpSummarizer.from_env -------------------------------------------------------------------------
@pytest.mark.parametrize("env", [{}, {"CHATCLI_COMPACT_MODEL": "  "}])
def test_from_env_returns_none_when_not_configured(env: dict[str, str]) -> None:
    assert HttpSummarizer.from_env(env) is None


@pytest.mark.parametrize(
    ("env", "base_url", "api_key", "model", "window"),
    [
        (
            {"CHATCLI_COMPACT_MODEL": "groq:llama-3.1-8b-instant", "GROQ_API_KEY": "gk"},
            "https://api.groq.com/openai/v1",
            "gk",
            "llama-3.1-8b-instant",
            128_000,
        ),
        (
            {
                "CHATCLI_COMPACT_MODEL": "openai:gpt-4o-mini",
                "OPENAI_BASE_URL": "https://gateway.corp/v1/",
                "OPENAI_API_KEY": "ok",
            },
            "https://gateway.corp/v1",
            "ok",
            "gpt-4o-mini",
            128_000,
        ),
        (
            {
                "CHATCLI_COMPACT_MODEL": "openrouter:meta-llama/llama-3.1-8b-instruct:free",
                "CHATCLI_COMPACT_BASE_URL": "http://127.0.0.1:9999/v1",
                "CHATCLI_COMPACT_API_KEY": "ck",
                "OPENROUTER_API_KEY": "ignored",
                "CHATCLI_COMPACT_WINDOW": "32768",
            },
            "http://127.0.0.1:9999/v1",
            "ck",
            "meta-llama/llama-3.1-8b-instruct:free",
            32_768,
        ),
        ({"CHATCLI_COMPACT_MODEL": "ollama:llama3.2"}, "http://localhost:11434/v1", None, "llama3.2", 8192),
        (
            {"CHATCLI_COMPACT_MODEL": "Gemini:gemini-2.0-flash", "GOOGLE_API_KEY": "g"},
            "https://generativelanguage.googleapis.com/v1beta/openai",
            "g",
            "gemini-2.0-flash",
            1_000_000,
        ),
    ],
)
def test_from_env_reads_model_base_url_key_and_window(
    env: dict[str, str], base_url: str, api_key: str | None, model: str, window: int
) -> None:
    summarizer = HttpSummarizer.from_env(env)
    assert summarizer is not None
    assert (summarizer.base_url, summarizer.api_key, summarizer.model) == (base_url, api_key, model)
    assert summarizer.window_tokens == window


def test_from_env_prices_and_transport_make_a_working_summarizer() -> None:
    env = {
        "CHATCLI_COMPACT_MODEL": "mistral:mistral-small-latest",
        "MISTRAL_API_KEY": "mk",
        "CHATCLI_COMPACT_PRICE_IN": "0.2",
        "CHATCLI_COMPACT_PRICE_OUT": "0.6",
    }
    usage = {"prompt_tokens": 1_000_000, "completion_tokens": 1_000_000}
    summarizer = HttpSummarizer.from_env(
        env, transport=httpx.MockTransport(lambda r: completion("notes", usage))
    )
    assert summarizer is not None
    assert summarizer.summarize("P").cost_usd == pytest.approx(0.8)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CHATCLI_COMPACT_MODEL": "gpt-4o-mini"}, "CHATCLI_COMPACT_MODEL must be provider:model"),
        ({"CHATCLI_COMPACT_MODEL": "openai:gpt-4o-mini"}, "CHATCLI_COMPACT_API_KEY or OPENAI_API_KEY"),
        ({"CHATCLI_COMPACT_MODEL": "vllm:qwen"}, "set CHATCLI_COMPACT_BASE_URL"),
        (
            {"CHATCLI_COMPACT_MODEL": "ollama:llama3", "CHATCLI_COMPACT_WINDOW": "lots"},
            "CHATCLI_COMPACT_WINDOW must be a positive integer",
        ),
        (
            {"CHATCLI_COMPACT_MODEL": "ollama:llama3", "CHATCLI_COMPACT_PRICE_IN": "-1"},
            "CHATCLI_COMPACT_PRICE_IN must be a price",
        ),
    ],
)
def test_from_env_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        HttpSummarizer.from_env(env)


def test_from_env_unknown_provider_uses_the_openai_compatible_variables() -> None:
    env = {
        "CHATCLI_COMPACT_MODEL": "vllm:qwen",
        "OPENAI_BASE_URL": "http://10.0.0.2:8000/v1",
        "OPENAI_API_KEY": "k",
    }
    summarizer = HttpSummarizer.from_env(env)
    assert summarizer is not None
    assert (summarizer.base_url, summarizer.api_key, summarizer.window_tokens) == (
        "http://10.0.0.2:8000/v1",
        "k",
        50_000,
    )


# -- ContextEngineSummarizer --------------------------------------------------------------------------
@dataclass
class RecordingEngine:
    answer: str | BaseException = "engine notes"
    calls: list[tuple[str, int, str | None]] = field(default_factory=list)

    def __call__(self, segment: str, budget_chars: int, instruction: str | None) -> str:
        self.calls.append((segment, budget_chars, instruction))
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def test_engine_callable_answer_replaces_the_segment() -> None:
    engine = RecordingEngine()
    fallback = ScriptedSummarizer([GOOD_SUMMARY])
    summarizer = ContextEngineSummarizer(engine, fallback=fallback)
    result = summarizer.summarize_segment("[user]: hi\n\n", 25_000, instruction="keep paths")
    assert result == SummaryResult(text="engine notes", model="engine")
    assert engine.calls == [("[user]: hi\n\n", 25_000, "keep paths")]
    assert fallback.prompts == []


def test_engine_summarize_takes_the_segment_out_of_a_built_prompt() -> None:
    engine = RecordingEngine()
    fallback = ScriptedSummarizer([GOOD_SUMMARY], window_tokens=100_000)
    summarizer = ContextEngineSummarizer(engine, fallback=fallback)
    prompt = build_prompt("[user]: hi\n\n", "keep paths")
    result = summarizer.summarize(prompt, instruction="keep paths")
    head_chars = len(prompt) - len("[user]: hi\n\n")
    assert result.model == "engine"
    assert engine.calls == [("[user]: hi\n\n", summary_input_budget(100_000, head_chars), "keep paths")]
    assert summarizer.window_tokens == 100_000


def test_engine_error_falls_back_to_the_built_in_summarizer() -> None:
    fallback = ScriptedSummarizer([GOOD_SUMMARY])
    summarizer = ContextEngineSummarizer(RecordingEngine(RuntimeError("mcp server gone")), fallback=fallback)
    result = summarizer.summarize_segment("[user]: hi\n\n", 20_000, instruction="keep paths")
    assert result.model == "fallback" and result.text == GOOD_SUMMARY
    assert result.input_tokens == 100 and result.cost_usd == pytest.approx(0.001)
    assert result.fallback_reason == "context engine failed: RuntimeError: mcp server gone"
    assert fallback.prompts == [build_prompt("[user]: hi\n\n", "keep paths")]


@pytest.mark.parametrize("answer", ["", "   \n"])
def test_engine_empty_answer_falls_back(answer: str) -> None:
    fallback = ScriptedSummarizer([GOOD_SUMMARY])
    result = ContextEngineSummarizer(RecordingEngine(answer), fallback=fallback).summarize_segment(
        "S", 20_000
    )
    assert result.model == "fallback" and result.fallback_reason == "context engine returned an empty answer"


def test_engine_slow_answer_times_out_and_falls_back() -> None:
    release = threading.Event()

    def slow_engine(segment: str, budget_chars: int, instruction: str | None) -> str:
        release.wait(5)
        return "too late"

    fallback = ScriptedSummarizer([GOOD_SUMMARY])
    summarizer = ContextEngineSummarizer(slow_engine, fallback=fallback, timeout=0.1)
    started = time.monotonic()
    try:
        result = summarizer.summarize_segment("S", 20_000)
    finally:
        release.set()
    assert time.monotonic() - started < 2
    assert result.model == "fallback" and result.fallback_reason == "context engine timed out after 0.1s"


def test_engine_default_timeout_is_three_minutes() -> None:
    assert ContextEngineSummarizer(RecordingEngine(), fallback=None).timeout == 180.0


def test_engine_cancel_does_not_fall_back() -> None:
    token = CancelToken()
    release = threading.Event()

    def engine(segment: str, budget_chars: int, instruction: str | None) -> str:
        token.cancel()
        release.wait(5)
        return "late"

    fallback = ScriptedSummarizer([GOOD_SUMMARY])
    try:
        with pytest.raises(CompactionCancelled):
            ContextEngineSummarizer(engine, fallback=fallback).summarize_segment("S", 20_000, cancel=token)
    finally:
        release.set()
    assert fallback.prompts == []


def test_engine_failure_without_fallback_raises_summarizer_error() -> None:
    summarizer = ContextEngineSummarizer(RecordingEngine(""), fallback=None)
    with pytest.raises(SummarizerError, match="empty answer, and no built-in summarizer"):
        summarizer.summarize_segment("S", 20_000)


def test_engine_and_fallback_failing_names_both() -> None:
    fallback = ScriptedSummarizer([SummarizerError("HTTP 500")])
    summarizer = ContextEngineSummarizer(RecordingEngine(ValueError("bad")), fallback=fallback)
    with pytest.raises(
        SummarizerError, match="ValueError: bad; the built-in summarizer failed too: HTTP 500"
    ):
        summarizer.summarize_segment("S", 20_000)


def test_engine_http_endpoint_json_answer() -> None:
    seen: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json={"summary": "engine notes over http"})

    summarizer = ContextEngineSummarizer(
        "https://engine.test/context_compact", fallback=None, transport=httpx.MockTransport(handler)
    )
    result = summarizer.summarize_segment("[user]: hi\n\n", 30_000, instruction=None)
    assert result == SummaryResult(text="engine notes over http", model="engine")
    assert seen == [{"segment": "[user]: hi\n\n", "budget_chars": 30_000, "instruction": None}]


def test_engine_http_endpoint_plain_text_answer() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text="plain notes"))
    summarizer = ContextEngineSummarizer("http://127.0.0.1:9/compact", fallback=None, transport=transport)
    assert summarizer.summarize_segment("S", 20_000).text == "plain notes"


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        (
            httpx.Response(500, text="engine crashed"),
            "context engine failed: SummarizerError: context engine HTTP 500",
        ),
        (httpx.Response(200, json={"result": "x"}), 'has no "summary" string'),
        (httpx.Response(200, json={"summary": ""}), "context engine returned an empty answer"),
    ],
)
def test_engine_http_endpoint_failures_fall_back(response: httpx.Response, reason: str) -> None:
    fallback = ScriptedSummarizer([GOOD_SUMMARY])
    summarizer = ContextEngineSummarizer(
        "https://engine.test/c", fallback=fallback, transport=httpx.MockTransport(lambda request: response)
    )
    result = summarizer.summarize_segment("S", 20_000)
    assert (
        result.model == "fallback" and result.fallback_reason is not None and reason in result.fallback_reason
    )


@pytest.mark.parametrize("engine", ["mcp:notes-server", "ftp://x", 42])
def test_engine_must_be_a_callable_or_an_http_url(engine: object) -> None:
    with pytest.raises(ConfigError, match="callable or an http"):
        ContextEngineSummarizer(engine, fallback=None)  # type: ignore[arg-type]


def test_engine_summarizer_goes_through_the_gate() -> None:
    summarizer = ContextEngineSummarizer(RecordingEngine("I'm sorry, I cannot."), fallback=None)
    assert isinstance(summarizer, Summarizer)
    with pytest.raises(SummarizationFailed) as info:
        summarize_with_gate(summarizer, build_prompt("[user]: hi\n\n"), 1_000)
    assert info.value.calls == 2 and all(r.startswith("refusal") for r in info.value.rejections)
