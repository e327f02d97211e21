"""Peer baselines: each strategy's rewrite, its run through the replay, honest loss, and cap bisection."""

from __future__ import annotations

import pytest

from ctxrecover.archive import MemoryArchive
from ctxrecover.classify import Failure, FailureKind
from ctxrecover.errors import ConfigError
from ctxrecover.events import EventBus, SessionStats
from ctxrecover.messages import Message, ToolCall
from ctxrecover.passes.pairing import validate_pairing
from ctxrecover.policy import DEFAULT_POLICY, Policy
from ctxrecover.recovery import PAYLOAD_LIMIT_MARKER, GatewayModel, RecoveryContext
from simulator.proxy.scenario import Scenario, scenario_from_document
from simulator.replay import ReplayResult, replay
from simulator.research.baselines import (
    BASELINES,
    PEER_POLICY_OVERRIDES,
    resolve_policies,
)
from simulator.research.metrics import EXPERIMENT_BLOCKED
from simulator.research.peers import (
    CLINE_TRUNCATION_NOTICE,
    MASKED_OBSERVATION,
    OBSERVATION_WINDOW_TURNS,
    ClineDrop,
    SummarizeAll,
    cline_truncate,
    mask_observations,
    summarize_all,
    trim_last,
)
from simulator.summarizers import make_summarizer
from simulator.transcripts.loaders import Transcript, transcript_from_messages
from simulator.workloads import load_named_transcript

PEERS = (
    "cline-drop-half",
    "cline-drop-three-quarters",
    "langchain-keep-last-n",
    "observation-masking",
    "summarize-everything",
)
LOSSLESS = ("no-recovery", "cap-bisection")
WAF_THRESHOLD = 40_000  # the Bedrock-style HTML 403 of the bisection scenario fires at this body size
PASTE_CHARS = 300_000
LOG_LINE = "log line {:06d}: request handled, status ok, latency nominal\n"


def alternating(count: int) -> list[Message]:
    return [Message.user(f"u{i}") if i % 2 == 0 else Message.assistant(f"a{i}") for i in range(count)]


def tool_steps(count: int) -> list[Message]:
    """``count`` agent steps: an assistant message with one call, then its result."""
    steps: list[Message] = []
    for i in range(count):
        steps += [
            Message.assistant(f"step {i}", [ToolCall(f"c{i}", "cat")]),
            Message.tool(f"c{i}", f"out {i}"),
        ]
    return steps


def contents(history: list[Message]) -> list[str]:
    return [m.content for m in history]


def run(strategy: str | None, transcript: str | Transcript, scenario: str | Scenario) -> ReplayResult:
    return replay(transcript, scenario, strategy=None if strategy is None else BASELINES[strategy])


# -- the registry ----------------------------------------------------------------------------------


def test_the_registry_holds_every_baseline_with_a_source_and_a_description() -> None:
    assert list(BASELINES) == ["no-recovery", *PEERS, "cap-bisection"]
    for name, strategy in BASELINES.items():
        assert strategy.name == name and strategy.description
        assert any(ref in strategy.source for ref in ("https://", ".py", ".ts")), name


@pytest.mark.parametrize("name", PEERS)
def test_a_peer_that_drops_unarchived_says_so_and_runs_without_ctxrecovers_passes(name: str) -> None:
    strategy = BASELINES[name]

    assert "chars_lost > 0" in strategy.description
    assert dict(strategy.policy_overrides) == dict(PEER_POLICY_OVERRIDES)


def test_resolve_policies_expands_baselines_keeps_order_and_drops_duplicates() -> None:
    resolved = resolve_policies("default,baselines,no-recovery,chat")

    assert [name for name, _, _ in resolved] == ["default", *BASELINES, "chat"]
    assert resolved[0][2] is None and resolved[1][1].max_recovery_attempts == 0


def test_an_unknown_policy_name_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown policy 'cline'; use default, chat, baselines, no-rec"):
        resolve_policies("default,cline")


def test_replay_applies_the_strategy_overrides_and_names_the_run_after_it() -> None:
    result = run("no-recovery", "chat-50k", "rate-limit-429")

    assert result.policy.max_recovery_attempts == 0
    assert result.policy_name == "no-recovery" and "|no-recovery|" in result.run_id


# -- Cline -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keep", "kept"),
    [
        ("half", ["u0", CLINE_TRUNCATION_NOTICE, "u6", "a7", "u8", "a9"]),  # 8 after the pair: 4 dropped
        ("quarter", ["u0", CLINE_TRUNCATION_NOTICE, "u8", "a9"]),  # 3/4 of 8 = 6 dropped
    ],
)
def test_cline_keeps_the_first_pair_and_drops_half_or_three_quarters_of_the_rest(
    keep: str, kept: list[str]
) -> None:
    history = [Message.system("rules"), *alternating(10)]

    result, dropped = cline_truncate(history, keep)  # type: ignore[arg-type]

    assert contents(result) == ["rules", *kept]
    assert dropped == 10 - len(kept)
    assert [m.content for m in history][2] == "a1"  # the input is untouched


def test_cline_ends_the_removed_range_on_an_assistant_message() -> None:
    # 9 API messages: half of the 7 after the pair rounds to 2 (an even count), ending on a1+2=a3.
    result, dropped = cline_truncate(alternating(9), "half")

    assert contents(result) == ["u0", CLINE_TRUNCATION_NOTICE, "u4", "a5", "u6", "a7", "u8"]
    assert dropped == 2


def test_cline_counts_a_tool_block_as_one_api_message_and_the_step_repairs_pairing() -> None:
    history = [Message.user("task"), *tool_steps(5)]
    ctx = RecoveryContext.from_policy(DEFAULT_POLICY, MemoryArchive())

    result, report = ClineDrop("half")(history, ctx)

    assert report.changed and report.messages_dropped == 4
    assistants = [m.content for m in result if m.role == "assistant"]
    assert assistants == [CLINE_TRUNCATION_NOTICE, "step 3", "step 4"]
    assert result[1].tool_calls == history[1].tool_calls and validate_pairing(result)


def test_a_history_too_short_to_truncate_is_returned_as_is() -> None:
    history = alternating(3)

    assert cline_truncate(history, "half") == (history, 0)


@pytest.mark.parametrize("name", ["cline-drop-half", "cline-drop-three-quarters"])
def test_cline_recovers_an_overflow_by_truncating_and_reports_the_loss(name: str) -> None:
    result = run(name, "chat-50k", "gemini-1m-overflow")

    rejected = next(r for r in result.records if r.outcome.startswith("rejected:"))
    retry = next(r for r in result.records if r.turn == rejected.turn and r.attempt == 2)
    assert result.outcome == "recovered" and retry.outcome == "recovered@L1"
    assert rejected.message_count - retry.message_count >= 6  # 16 messages: half of the 13 after the pair
    assert result.final_history[2].content == CLINE_TRUNCATION_NOTICE
    assert result.chars_lost > 0 and result.fact_survival < 1


# -- LangChain -------------------------------------------------------------------------------------


def test_trim_last_keeps_the_system_and_the_last_messages_starting_on_a_user_message() -> None:
    history = [Message.system("rules"), *alternating(10)]

    assert contents(trim_last(history, 4)) == ["rules", "u6", "a7", "u8", "a9"]
    assert contents(trim_last(history, 3)) == ["rules", "u8", "a9"]  # a7 cannot start the window


def test_trim_last_keeps_only_the_system_when_the_window_holds_no_user_message() -> None:
    history = [
        Message.system("rules"),
        Message.user("go"),
        Message.assistant("x", [ToolCall("c", "ls")]),
        Message.tool("c", "out"),
        Message.assistant("done"),
    ]

    assert contents(trim_last(history, 3)) == ["rules"]


def test_langchain_trims_to_keep_recent_messages_when_over_budget_and_loses_the_rest() -> None:
    result = run("langchain-keep-last-n", "chat-50k", "openai-128k-overflow")

    trimmed = [r for r in result.records if r.compaction_level is not None]
    assert result.outcome == "recovered" and trimmed
    assert all(r.message_count <= DEFAULT_POLICY.keep_recent + 1 for r in trimmed)  # + the system message
    assert result.chars_lost > 0


# -- observation masking ---------------------------------------------------------------------------


def tool_session(turns: int) -> list[Message]:
    return [Message.system("rules"), Message.user("task"), *tool_steps(turns)]


def test_masking_replaces_tool_results_older_than_the_window_and_keeps_recent_ones() -> None:
    history = tool_session(5)

    result, masked = mask_observations(history, 2)

    assert masked == 3
    assert [m.content for m in result if m.role == "tool"] == [MASKED_OBSERVATION] * 3 + ["out 3", "out 4"]
    assert mask_observations(result, 2) == (result, 0)  # already masked: nothing to do


def test_observation_masking_masks_old_results_of_a_real_session_and_reports_the_loss() -> None:
    result = run("observation-masking", "coding-120k", "summarizer-refuses")  # a 4 000-token policy window

    tools = [m for m in result.final_history if m.role == "tool"]
    masked = [m for m in tools if m.content == MASKED_OBSERVATION]
    assert result.max_compaction_level == 1 and masked and len(masked) < len(tools)
    assert not any(m.content == MASKED_OBSERVATION for m in result.final_history[-OBSERVATION_WINDOW_TURNS:])
    assert result.chars_lost > 0


def test_masking_cannot_shrink_a_chat_history_and_the_floor_diagnosis_says_so() -> None:
    result = run("observation-masking", "chat-50k", "corporate-128k-waf")

    assert result.outcome == "fail_fast_floor" and result.chars_lost == 0


# -- summarize everything --------------------------------------------------------------------------


def test_summarize_all_keeps_the_summary_and_the_last_two_messages() -> None:
    history = [Message.system("rules"), *alternating(8)]
    summarizer = make_summarizer("extractive")

    result, condensed, usage = summarize_all(history, summarizer)

    assert condensed == 6 and usage.calls == 1 and usage.cost_usd > 0
    assert [m.role for m in result] == ["system", "user", "user", "assistant"]
    assert result[1].content.startswith("[Summary of 6 earlier messages]\n") and result[1].is_summary
    assert contents(result)[2:] == ["u6", "a7"]


def test_summarize_all_has_no_quality_gate_and_survives_a_failing_summarizer() -> None:
    history = alternating(8)

    refused, _, _ = summarize_all(history, make_summarizer("refusing"))
    failed, _, usage = summarize_all(history, make_summarizer("failing"))

    assert refused[0].content.endswith("I'm sorry, I cannot help with that.")
    assert "the summarizer failed" in failed[0].content and usage.calls == 1 and len(failed) == 3


def test_the_summarize_step_bills_its_dry_run_and_its_real_run_once() -> None:
    stats = SessionStats()
    step = SummarizeAll(make_summarizer("extractive"), stats)
    history = alternating(8)
    ctx = RecoveryContext.from_policy(DEFAULT_POLICY, MemoryArchive())

    first, _ = step(history, RecoveryContext.from_policy(DEFAULT_POLICY, MemoryArchive()))  # the dry run
    second, report = step(history, ctx)

    assert stats.summarizer_calls == 1 and contents(first) == contents(second) and report.changed


def test_summarize_everything_recovers_with_the_summarizer_and_reports_cost_and_loss() -> None:
    result = run("summarize-everything", "chat-50k", "openai-128k-overflow")

    assert result.outcome == "recovered" and result.summary["summarizer_cost_usd"] > 0
    assert any(m.is_summary and m.content.startswith("[Summary of") for m in result.final_history)
    assert result.chars_lost > 0


# -- no recovery and honest loss -------------------------------------------------------------------


def test_no_recovery_ends_the_run_at_the_first_rejection_without_compacting() -> None:
    result = run("no-recovery", "chat-50k", "corporate-128k-waf")

    assert result.outcome == "failed" and result.records[-1].outcome == "failed"
    assert result.stats.recovery_attempts == 0 and result.stats.compactions == 0
    assert result.chars_lost == 0


@pytest.mark.parametrize("name", [None, *LOSSLESS])
def test_ctxrecover_and_its_variants_lose_nothing(name: str | None) -> None:
    assert run(name, "chat-50k", "gemini-1m-overflow").chars_lost == 0


@pytest.mark.parametrize("name", PEERS[:3] + PEERS[4:])
def test_peers_that_act_lose_characters(name: str) -> None:
    assert run(name, "chat-50k", "openai-128k-overflow").chars_lost > 0


# -- payload cap learning --------------------------------------------------------------------------


def waf(rejected: int) -> Failure:
    return Failure(FailureKind.WAF_REJECTION, rejected_bytes=rejected)


def test_peers_learn_no_cap_and_never_add_the_payload_notice() -> None:
    # The peers' gateway model: cap_strategy "none" (the evidence is kept, no cap is learned from it)
    # and the payload notice marked as already sent (was NoCapLearning before the gateway model).
    strategy = BASELINES["cline-drop-half"]
    gateway = strategy.session_options(Policy(), MemoryArchive(), EventBus(), SessionStats())["gateway"]
    assert gateway.strategy == "none" and gateway.payload_notice_sent
    judged = gateway.judge(waf(200_000), request_bytes=200_000, policy=Policy())
    assert judged.model.effective_cap == 0 and judged.model.hard_limit is None
    result = run("cline-drop-half", "chat-50k", "corporate-128k-waf")
    assert all(r.learned_cap is None for r in result.records)
    assert not any(PAYLOAD_LIMIT_MARKER in m.content for m in result.final_history)


def test_cap_bisection_is_the_gateway_models_bisection_strategy() -> None:
    # Was BisectionCapState; the same arithmetic now lives in ctxrecover's gateway model
    # (tests/ctxrecover/recovery/test_gateway.py pins it), selected by a Policy field.
    strategy = BASELINES["cap-bisection"]
    policy = strategy.apply(Policy())
    assert policy.cap_strategy == "bisection" and strategy.factory is None
    model = GatewayModel.from_policy(policy).accepted(100_000, policy=policy)
    model = model.judge(waf(140_000), request_bytes=140_000, policy=policy).model
    assert model.learned_cap == 120_000


def pasted_chat() -> Transcript:
    """chat-50k with a 300 KB log pasted into its first question: the first request is far over the WAF."""
    base = load_named_transcript("chat-50k")
    messages = list(base.messages)
    first = next(i for i, m in enumerate(messages) if m.role == "user")
    paste = "".join(LOG_LINE.format(i) for i in range(PASTE_CHARS // len(LOG_LINE.format(0)) + 1))
    messages[first] = messages[first].with_content(messages[first].content + "\n" + paste)
    return transcript_from_messages("chat-50k+paste", messages, base.facts)


def bedrock_waf() -> Scenario:
    return scenario_from_document(
        {
            "description": "Bedrock-style HTML 403 for bodies of 40 000 bytes or more, from the first turn.",
            "provider": {"format": "openai-chat", "model": "gpt-4o"},
            "fault": [{"kind": "bedrock-html-403", "min_bytes": WAF_THRESHOLD}],
            "expect": {"outcome": "recovered"},
        },
        name="waf-40k",
    )


def test_bisection_needs_fewer_rejections_and_no_strategy_learns_a_cap_below_what_passed() -> None:
    # SPEC §11 changed this test: both strategies now work over the gateway model's evidence and the
    # learned cap never falls below the largest accepted request (the old ¾ rule ended at 30 162 bytes
    # while 37 339-byte requests had passed; BisectionCapState ended at 40 608). Measured since the
    # retry fills the learned cap (SPEC §12): the ¾ rule is refused 7 times (308 213, 188 434 and
    # 115 397 bytes, each with the blanks as large that read the page as size, then 40 128 at turn 11)
    # and ends at 37 250 bytes; bisection 6 (308 213, 127 054 and 53 397 with their blanks) and ends at
    # 41 177, the middle of what passed (28 957) and what was refused (53 397): a bisection cap is a
    # guess inside the evidence until a request tests it, so it may lie above the gateway's own limit.
    transcript, scenario = pasted_chat(), bedrock_waf()

    three_quarters = run(None, transcript, scenario)
    bisection = run("cap-bisection", transcript, scenario)

    rejected = [r.summary["rejected_requests"] for r in (three_quarters, bisection)]
    assert rejected[1] < rejected[0] and rejected[0] >= 3
    for result in (three_quarters, bisection):
        cap = result.records[-1].learned_cap
        refused = ("rejected", EXPERIMENT_BLOCKED)  # the block page's telling request was refused too
        passed = max(r.request_bytes for r in result.records if not r.outcome.startswith(refused))
        refused_sizes = [r.request_bytes for r in result.records if r.outcome.startswith(refused)]
        assert cap is not None and passed <= cap < min(refused_sizes)
    assert three_quarters.records[-1].learned_cap < WAF_THRESHOLD  # the ¾ rule's cap ends under the limit
    assert bisection.outcome == three_quarters.outcome == "recovered"
    assert bisection.chars_lost == three_quarters.chars_lost == 0
