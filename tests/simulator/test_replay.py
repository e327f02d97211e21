"""Replays: turns, workload shaping, one record per attempt, attribution, determinism."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ctxrecover.events import Notice, PreCompact
from ctxrecover.messages import Message, ToolCall
from ctxrecover.sizes import total_weight
from simulator.proxy.scenario import (
    Expectation,
    Scenario,
    Workload,
    list_scenarios,
    load_scenario,
    scenario_from_document,
)
from simulator.recorder import Rejection, ReplayEvent, proxy_cap
from simulator.replay import REFERENCE_TRANSPORT, ReplayResult, expectation_problems, observed, replay
from simulator.research.baselines import BASELINES
from simulator.research.metrics import RUN_COLUMNS, AttemptRecord
from simulator.research.retention import field_losses
from simulator.research.run_files import write_attempts_csv
from simulator.transcripts.loaders import Fact, transcript_from_messages
from simulator.workloads import (
    GENERATED_TRANSCRIPT,
    ReplayError,
    find_transcript,
    load_named_transcript,
    shape_transcript,
    split_turns,
    workload_transcript,
)

KB = 1024
Waf = tuple[ReplayResult, list[ReplayEvent]]
RECOVERABLE_WAF = (
    "⚠ Recoverable failure (proxy/WAF rejection (403 + security signals)) — compacting and retrying"
)


def call(call_id: str) -> ToolCall:
    return ToolCall(call_id, "read_file", '{"path": "a.py"}')


# -- turns --------------------------------------------------------------------------------------


def test_each_assistant_message_is_a_turn_with_the_messages_fed_before_it() -> None:
    system, ask = Message.system("sys"), Message.user("fix it")
    use = Message.assistant("reading", [call("c1")])
    result = Message.tool("c1", "contents")
    answer = Message.assistant("fixed")
    trailing = Message.user("thanks")

    turns, rest = split_turns([system, ask, use, result, answer, trailing])

    assert [(t.inputs, t.reply) for t in turns] == [((system, ask), use), ((result,), answer)]
    assert rest == (trailing,)


def test_assistant_right_after_a_reply_follows_it_and_empty_replies_are_skipped() -> None:
    ask, first, second = Message.user("go"), Message.assistant("part one"), Message.assistant("part two")
    empty = Message.assistant("")

    turns, rest = split_turns([ask, first, empty, second])

    assert len(turns) == 1 and turns[0].reply == first and turns[0].followers == (second,)
    assert rest == ()


def test_a_leading_assistant_message_is_fed_not_requested() -> None:
    opening, ask, answer = Message.assistant("How can I help?"), Message.user("go"), Message.assistant("ok")

    turns, _ = split_turns([Message.system("s"), opening, ask, answer])

    assert len(turns) == 1 and opening in turns[0].inputs and turns[0].reply == answer


# -- workload shaping -------------------------------------------------------------------------------


def scenario_with(workload: Workload) -> Scenario:
    return dataclasses.replace(load_scenario("rate-limit-429"), workload=workload)


def test_system_prompt_is_padded_to_the_workload_size_and_facts_follow_an_inserted_system() -> None:
    transcript = transcript_from_messages(
        "t", [Message.user("ticket TICKET-1"), Message.assistant("ok")], [Fact("ticket", "TICKET-1", 0)]
    )

    shaped = shape_transcript(transcript, scenario_with(Workload(system_prompt_bytes=10 * KB)))

    system = shaped.messages[0]
    assert system.role == "system" and len(system.content.encode()) >= 10 * KB
    assert shaped.messages[1:] == transcript.messages
    assert shaped.facts == (Fact("ticket", "TICKET-1", 1),)


def test_replies_are_padded_to_reply_tokens_and_no_workload_changes_nothing() -> None:
    transcript = transcript_from_messages("t", [Message.user("go"), Message.assistant("short")])

    shaped = shape_transcript(transcript, scenario_with(Workload(reply_tokens=600)))

    assert shaped.messages[1].content.startswith("short") and len(shaped.messages[1].content) >= 2400
    assert shape_transcript(transcript, scenario_with(Workload())) is transcript


def test_generated_workload_is_the_chat_fixture_cut_where_the_history_reaches_its_size() -> None:
    shaped = workload_transcript(scenario_with(Workload(transcript="generated", history_bytes=200 * KB)))
    full = load_named_transcript(GENERATED_TRANSCRIPT)

    assert shaped.messages == full.messages[: len(shaped.messages)]
    assert total_weight(shaped.messages) >= 200 * KB > total_weight(shaped.messages[:-2])
    assert full.messages[len(shaped.messages)].role == "user"
    assert all(f.message_index < len(shaped.messages) for f in shaped.facts)


def test_a_workload_transcript_that_is_not_bundled_is_a_replay_error_naming_the_scenario() -> None:
    scenario = scenario_with(Workload(transcript="no-such-transcript.traj"))

    with pytest.raises(
        ReplayError,
        match=rf"scenario {scenario.name!r}: \[workload\] transcript "
        r"no-such-transcript.traj: no such transcript file",
    ):
        workload_transcript(scenario)


def test_an_unknown_transcript_name_is_a_replay_error_naming_it() -> None:
    with pytest.raises(ReplayError, match="no-such-transcript: no such transcript file"):
        find_transcript("no-such-transcript")


@pytest.mark.parametrize(
    ("name", "cap"),
    [
        ("corporate-128k-waf", 128_000),
        ("nginx-1m-413", 1024 * KB),
        ("rst-after-256k", 256 * KB),
        ("header-431", None),
        ("rate-limit-429", None),
        ("anthropic-200k-overflow", None),
    ],
)
def test_proxy_cap_is_the_smallest_body_size_a_fault_fires_at(name: str, cap: int | None) -> None:
    assert proxy_cap(load_scenario(name)) == cap


# -- records -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def waf() -> Waf:
    seen: list[ReplayEvent] = []
    result = replay("chat-50k", "corporate-128k-waf", on_event=seen.append)
    return result, seen


def test_one_record_per_request_attempt_in_the_run_schema(waf: Waf) -> None:
    result, _ = waf
    assert len(result.records) == result.stats.requests
    assert list(result.frame.columns) == list(RUN_COLUMNS)
    # the block page, one word alone (passed: not the route), blanks as large (refused too: size), the
    # recovered retry
    assert [(r.turn, r.attempt) for r in result.records if r.turn == 8] == [(8, 1), (8, 2), (8, 3), (8, 4)]
    assert result.turns_completed == result.turns == 15


def test_the_waf_rejection_teaches_the_cap_after_one_telling_request_and_the_next_attempt_recovers(
    waf: Waf,
) -> None:
    result, _ = waf
    rejected, probe, telling, recovered = (r for r in result.records if r.turn == 8)
    assert rejected.outcome == "rejected:waf_rejection" and rejected.request_bytes >= 128_000
    assert rejected.proxy_cap == 128_000 and rejected.learned_cap is None
    # SPEC §12: a block page may be policy — one word alone passes; it may be content — blanks as large,
    # with nothing of the conversation, are refused too: size
    assert probe.outcome == "experiment:passed" and probe.request_bytes < 200 and probe.message_count == 1
    assert telling.outcome == "experiment:blocked" and telling.request_bytes == rejected.request_bytes
    assert telling.message_count == 1 and telling.max_tokens == 16
    assert recovered.outcome == "recovered@L1" and recovered.request_bytes < 128_000
    # SPEC §11: the ¾ rule inside the evidence's interval — never below the largest accepted request
    accepted = max(r.request_bytes for r in result.records if r.turn < 8)
    smallest = min(rejected.request_bytes, telling.request_bytes)
    assert recovered.learned_cap == max(accepted, int(smallest * 0.75))
    assert recovered.compaction_level is not None and recovered.chars_archived > 0


def test_notices_go_to_the_attempt_that_caused_them(waf: Waf) -> None:
    result, _ = waf
    rejected, probe, telling, recovered = (r for r in result.records if r.turn == 8)
    # the telling request settled the reading: the recovery and what it teaches are said on it
    assert RECOVERABLE_WAF not in rejected.notices and probe.notices == ""
    assert telling.notices.split("\n")[0] == RECOVERABLE_WAF
    assert any(line.startswith("ℹ Gateway rejected a ") for line in telling.notices.split("\n"))
    assert RECOVERABLE_WAF not in recovered.notices
    assert recovered.notices.startswith("ℹ pre-flight: history ")


def test_events_stream_in_order_with_every_record(waf: Waf) -> None:
    result, seen = waf
    assert tuple(seen) == result.events
    assert [e.item for e in seen if isinstance(e.item, AttemptRecord)] == list(result.records)
    first_notice = next(e for e in seen if isinstance(e.item, Notice))
    assert (first_notice.turn, first_notice.attempt, first_notice.item.message) == (8, 3, RECOVERABLE_WAF)
    assert any(isinstance(e.item, PreCompact) and e.item.trigger == "recovery" for e in seen)


def test_the_session_replays_the_recorded_replies(waf: Waf) -> None:
    result, _ = waf
    replies = [m for m in result.conversation if m.role == "assistant"]
    recorded = [m for m in result.replayed.messages if m.role == "assistant"]
    assert result.divergences == 0
    assert [m.content for m in replies] == [m.content for m in recorded]
    assert result.summary["outcome"] == "recovered" and result.summary["rejected_requests"] == 2


def test_tool_call_ids_stay_paired_when_the_wire_mints_new_ones() -> None:
    result = replay("coding-120k", "gemini-1m-overflow")  # gemini answers functionCall without ids

    produced = {c.id for m in result.conversation for c in m.tool_calls}
    answered = {m.tool_call_id for m in result.conversation if m.role == "tool"}
    assert answered <= produced
    assert result.divergences == 0 and result.outcome == "recovered" and result.chars_lost == 0


def test_a_reset_is_retried_once_with_identical_bytes_then_taken_as_payload_evidence() -> None:
    # SPEC §11 changed this test: the first reset gets one plain retry (recorded as identical); the
    # second at the same size is payload evidence, so the turn is recovered instead of failing.
    result = replay(None, "rst-after-256k")

    (turn,) = sorted({r.turn for r in result.records if r.outcome.startswith("rejected")})
    episode = [r for r in result.records if r.turn == turn]
    assert [r.outcome for r in episode] == ["rejected:transient_network"] * 2 + ["recovered@L1"]
    assert [r.identical_retry for r in episode] == [False, True, False]
    assert episode[2].learned_cap is not None and episode[2].request_bytes < episode[0].request_bytes
    assert result.outcome == "recovered" and result.error is None


def test_truncated_answers_are_recorded_and_escalated() -> None:
    result = replay("chat-50k", "max-tokens-truncation")

    first_turn = [r for r in result.records if r.turn == 0]
    assert [(r.outcome, r.max_tokens) for r in first_turn] == [
        ("truncated", 256),
        ("truncated", 512),
        ("ok", 1024),
    ]
    assert first_turn[0].failure_kind == "output_truncated"
    assert result.outcome == "escalated" and result.divergences == 0


def test_same_seed_gives_identical_records_and_csv_without_timing(tmp_path: Path) -> None:
    first = replay("chat-50k", "corporate-128k-waf", seed=7)
    second = replay("chat-50k", "corporate-128k-waf", seed=7)

    def untimed(result: ReplayResult) -> list[AttemptRecord]:
        return [dataclasses.replace(r, elapsed_ms=0.0) for r in result.records]

    assert untimed(first) == untimed(second)
    a = write_attempts_csv([first], tmp_path / "a.csv", timing=False).read_bytes()
    b = write_attempts_csv([second], tmp_path / "b.csv", timing=False).read_bytes()
    assert a == b and b"elapsed_ms" not in a.splitlines()[0]


def test_expectation_problems_name_what_differs(waf: Waf) -> None:
    result, _ = waf
    expect = Expectation("failed", failure_kind="rate_limit", compaction_level=1)

    problems = expectation_problems(result, expect)

    assert problems[:3] == [
        "outcome recovered, expected failed",
        "first failure waf_rejection, expected rate_limit",
        f"compaction level {result.max_compaction_level}, expected 1",
    ]


def test_observed_is_what_the_expect_table_checks(waf: Waf) -> None:
    result, _ = waf
    seen = observed(result)
    assert (seen.outcome, seen.failure_kinds) == ("recovered", ("waf_rejection", "waf_rejection"))
    assert seen.rejected_requests == (2,)  # the block page and the telling request: one episode
    assert seen.learned_cap == result.learned_cap == result.records[-1].learned_cap
    assert seen.learned_cap is not None
    assert seen.summarizer_calls == result.summarizer_calls
    assert set(seen.summarizer_calls) == {"answered"}  # each planned compaction's summary was accepted
    assert RECOVERABLE_WAF in seen.lines
    assert "✂ Emergency truncation — old messages dropped" in result.status_lines
    assert set(result.status_lines) <= set(seen.lines)


def test_the_recorder_ledger_counts_what_a_lossy_strategy_drops_per_field() -> None:
    result = replay("chat-50k", "openai-128k-overflow", strategy=BASELINES["langchain-keep-last-n"])

    assert result.chars_lost == result.losses.total == result.records[-1].chars_lost > 0
    assert result.losses.content > 0 and result.losses.role > 0
    one_shot = field_losses(result.conversation, result.final_history, result.archive)
    assert one_shot.total <= result.losses.total  # without write counts the one-shot ledger may count less
    by_field = ", ".join(f"{name} {chars:,}" for name, chars in result.losses.nonzero().items())
    assert expectation_problems(result)[-1] == f"{by_field}: {result.chars_lost} chars lost"


def test_bad_transport_and_a_transcript_without_replies_are_replay_errors() -> None:
    with pytest.raises(ReplayError, match="unknown transport 'carrier-pigeon'"):
        replay("chat-50k", "rate-limit-429", transport="carrier-pigeon")
    silent = transcript_from_messages("silent", [Message.user("anyone?")])
    with pytest.raises(ReplayError, match="'silent' has no assistant reply to replay"):
        replay(silent, "rate-limit-429")


def _assert_same_replay(direct: ReplayResult, reference: ReplayResult) -> None:
    """The same attempt records, field for field (wall time aside), events, outcome, final history and
    archive."""

    def untimed(result: ReplayResult) -> list[AttemptRecord]:
        return [dataclasses.replace(r, elapsed_ms=0.0) for r in result.records]

    def events(result: ReplayResult) -> list[object]:
        """Each event as (turn, attempt, what it is), a refused or finished attempt's record untimed."""
        seen: list[object] = []
        for event in result.events:
            item = event.item
            if isinstance(item, Rejection):
                item = dataclasses.replace(item, record=dataclasses.replace(item.record, elapsed_ms=0.0))
            elif isinstance(item, AttemptRecord):
                item = dataclasses.replace(item, elapsed_ms=0.0)
            seen.append((event.turn, event.attempt, item))
        return seen

    assert direct.records and untimed(direct) == untimed(reference)
    assert events(direct) == events(reference)
    assert (direct.outcome, direct.final_history, direct.chars_lost) == (
        reference.outcome,
        reference.final_history,
        reference.chars_lost,
    )
    assert (direct.signatures, direct.fresh_parts) == (reference.signatures, reference.fresh_parts)
    assert {key: direct.archive.get(key) for key in direct.archive.keys()} == {
        key: reference.archive.get(key) for key in reference.archive.keys()
    }


@pytest.mark.parametrize("name", list_scenarios())
def test_the_in_process_client_records_what_the_httpx_client_stack_records(name: str) -> None:
    """Every bundled scenario replayed in process through InProcessClient and through httpx.MockTransport
    behind the whole client stack (the reference transport) records the same."""
    _assert_same_replay(replay(None, name), replay(None, name, transport=REFERENCE_TRANSPORT))


CLEAN_OPENAI = {  # the P4 benchmark's scenario
    "description": "No fault: an OpenAI chat provider answering every recorded reply.",
    "provider": {"format": "openai-chat", "model": "gpt-4o"},
    "expect": {"outcome": "ok"},
}


@pytest.mark.parametrize(
    ("transcript", "scenario"),
    [
        ("coding-120k", None),  # the P4 benchmark's transcripts, fault-free
        ("chat-long-answers-600k", None),
        ("small-tools-1m", None),  # 440 turns; turn-boundary passes rewrite old messages in place
        ("chat-long-answers-600k", "cloudflare-waf-403"),
        ("chat-long-answers-600k", "rst-after-256k"),
        ("chat-long-answers-600k", "eof-mid-post-512k"),
        ("chat-long-answers-600k", "waf-content-block-right-after-a-413"),
        ("chat-long-answers-600k", "waf-content-block-after-large-bodies"),
        ("chat-long-answers-600k", "crs-agent-content-withheld"),
        ("chat-long-answers-600k", "rate-limit-429"),
        ("chat-long-answers-600k", "floor-too-big"),
    ],
)
def test_transcripts_replayed_in_process_record_what_the_httpx_client_stack_records(
    transcript: str, scenario: str | None
) -> None:
    """Other transcripts than the scenarios' own, fault-free and under 413s, WAF 403s, resets, cut posts,
    content blocks, 429s and a floor: the in-process client and the reference record the same."""
    run = load_scenario(scenario) if scenario else scenario_from_document(CLEAN_OPENAI, name="clean")
    direct = replay(transcript, run)
    _assert_same_replay(direct, replay(transcript, run, transport=REFERENCE_TRANSPORT))
    assert scenario is None or any(r.failure_kind for r in direct.records)
