"""Every bundled scenario, replayed end to end through a real Session, meets its ``[expect]`` section.

Each scenario runs on a small bundled transcript chosen so the scenario's fault is
actually reached (see ``CASES``). Two scenarios need a wider window than their
``[provider]`` section gives: with gpt-4o's 128k tokens the session compacts at about
300 KB and the mock rejects prompts over 512 KB, so no request ever reaches the
512 KB EOF or the 1 MB nginx cap; their cases run with a 1M-token window on both
sides (a gpt-4.1-class deployment), faults and expectations unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pytest

from ctxrecover.events import PreCompact, StatusEvent
from ctxrecover.policy import DEFAULT_POLICY
from simulator.proxy.scenario import list_scenarios, load_scenario
from simulator.replay import ReplayResult, expectation_problems, replay
from simulator.transcripts.generator import generate_session
from simulator.transcripts.loaders import Transcript, load_transcript

SHARED_TRANSCRIPTS = Path(__file__).parents[2] / "../shared/transcripts"
WIDE_WINDOW = 1_000_000
# A chat session whose history passes 1 MB (no tool results for microcompact to shrink).
BIG_CHAT = {"seed": 1, "turns": 130, "tool_turn_ratio": 0.0, "answer_chars": 8000, "recall_every": 0,
            "feedback_every": 0}
FLOOR_FAIL_PREFIX = "✖ The non-compactable request base (system prompt: "
FLOOR_FAIL_ADVICE = (
    "History compaction cannot help — reduce MCP servers, skills or personas, or raise the proxy/WAF "
    "body-size limit"
)
FLOOR_WARNING_PREFIX = "⚠ System prompt alone is "


@dataclasses.dataclass(frozen=True, slots=True)
class Case:
    """How a scenario is replayed here: a bundled transcript (None: its own workload), window."""

    transcript: str | None
    wide: bool = False


CASES: dict[str, Case] = {
    "anthropic-200k-overflow": Case("chat-50k"),
    "bedrock-window-misconfigured": Case(None),  # its workload: the SWE-agent format fixture
    "cloudflare-waf-403": Case(None),  # its workload: the chat fixture cut at 400 KB
    "corporate-128k-waf": Case("chat-50k"),
    "eof-mid-post-512k": Case("chat-long-answers-600k", wide=True),
    "floor-too-big": Case("chat-50k"),
    "gemini-1m-overflow": Case("coding-120k"),
    "header-431": Case("coding-120k"),
    "max-tokens-truncation": Case("chat-50k"),
    "nginx-1m-413": Case("big-chat", wide=True),
    "openai-128k-overflow": Case("chat-50k"),
    "rate-limit-429": Case("coding-120k"),
    "rst-after-256k": Case(None),
    "summarizer-overflows": Case("coding-120k"),
    "summarizer-refuses": Case("coding-120k"),
}

@functools.cache
def run(name: str, transport: str = "inprocess") -> ReplayResult:
    case = CASES[name]
    scenario = load_scenario(name)
    policy = DEFAULT_POLICY
    if case.wide:
        provider = dataclasses.replace(scenario.provider, context_window=WIDE_WINDOW)
        scenario = dataclasses.replace(scenario, provider=provider)
        policy = policy.replace(context_window=WIDE_WINDOW)
    transcript: Transcript | str | None = case.transcript
    if transcript == "big-chat":
        transcript = generate_session(**BIG_CHAT)  # type: ignore[arg-type]
    return replay(transcript, scenario, policy=policy, transport=transport)


def test_every_bundled_scenario_has_a_case() -> None:
    assert sorted(CASES) == list_scenarios()


@pytest.mark.parametrize("name", sorted(CASES))
def test_scenario_meets_its_expectation(name: str) -> None:
    result = run(name)

    assert expectation_problems(result) == []
    assert result.divergences == 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_scenario_loses_no_character(name: str) -> None:
    assert run(name).chars_lost == 0


# -- what each scenario shows ----------------------------------------------------------------------------


def test_floor_too_big_fails_fast_on_the_first_rejection_with_the_floor_text() -> None:
    result = run("floor-too-big")

    (only,) = result.records
    assert (only.turn, only.outcome, only.failure_kind) == (0, "fail_fast_floor", "payload_too_large")
    floor = [n for n in result.notices if n.startswith("✖")]
    assert len(floor) == 1 and floor[0].startswith(FLOOR_FAIL_PREFIX) and floor[0].endswith(FLOOR_FAIL_ADVICE)
    assert result.error == floor[0]
    assert result.stats.recovery_attempts == 0
    assert list(result.final_history) == list(result.conversation)


def test_rate_limit_surfaces_without_any_compaction() -> None:
    result = run("rate-limit-429")

    assert not any(isinstance(e.item, PreCompact) for e in result.events)
    assert [(r.turn, r.outcome, r.failure_kind) for r in result.records] == [
        (0, "ok", None), (1, "ok", None), (2, "failed", "rate_limit")
    ]
    assert result.error is not None and "rate_limit" in result.error
    assert list(result.final_history) == list(result.conversation)


def test_corporate_waf_warns_about_the_floor_and_then_stays_under_the_waf() -> None:
    result = run("corporate-128k-waf")

    rejected = [r for r in result.records if r.outcome.startswith("rejected:")]
    assert [(r.failure_kind, r.request_bytes >= 128_000) for r in rejected] == [("waf_rejection", True)]
    assert any(n.startswith(FLOOR_WARNING_PREFIX) for n in rejected[0].notices.split("\n"))
    accepted = [r for r in result.records if not r.outcome.startswith("rejected:")]
    assert all(r.request_bytes < 128_000 for r in accepted)


def test_corporate_waf_over_loopback_tcp_matches_the_in_process_replay() -> None:
    over_tcp = run("corporate-128k-waf", "loopback")
    in_process = run("corporate-128k-waf")

    assert over_tcp.transport == "loopback"
    assert [p for p in expectation_problems(over_tcp) if not p.endswith(" chars lost")] == []

    def shape(result: ReplayResult) -> list[tuple[int, int, int, str]]:
        return [(r.turn, r.attempt, r.request_bytes, r.outcome) for r in result.records]

    assert shape(over_tcp) == shape(in_process)


def test_header_cap_fails_from_turn_two_without_resending_an_unchanged_body() -> None:
    result = run("header-431")

    failing = [r for r in result.records if r.turn == 1]
    outcomes = [r.outcome for r in failing]
    assert outcomes[-1] == "failed" and set(outcomes[:-1]) == {"rejected:payload_too_large"}
    assert len(failing) <= 1 + DEFAULT_POLICY.max_recovery_attempts
    assert not any(r.identical_retry for r in failing)  # the ladder never resends a refused body
    assert result.stats.recovery_attempts == DEFAULT_POLICY.max_recovery_attempts
    assert result.records[0].outcome == "ok"


@pytest.mark.parametrize("name", ["anthropic-200k-overflow", "gemini-1m-overflow", "openai-128k-overflow"])
def test_context_overflow_is_recovered_by_the_ladder(name: str) -> None:
    outcomes = [r.outcome for r in run(name).records]

    first = outcomes.index("rejected:context_overflow")
    assert next(o for o in outcomes[first:] if not o.startswith("rejected:")).startswith("recovered@L")


@pytest.mark.parametrize("name", ["summarizer-overflows", "summarizer-refuses"])
def test_a_failing_summarizer_falls_back_to_truncation_without_a_rejected_request(name: str) -> None:
    result = run(name)

    statuses = [e.item for e in result.events if isinstance(e.item, StatusEvent)]
    failed = [s.message for s in statuses if s.phase == "summary_failed"]
    assert failed and failed[0].startswith("⚠ Summarization failed (")
    assert result.summary["rejected_requests"] == 0 and result.max_compaction_level == 3
    assert result.summary["summarizer_calls"] > 0


def test_max_tokens_truncation_escalates_instead_of_compacting() -> None:
    result = run("max-tokens-truncation")

    assert result.stats.escalations >= 1 and result.stats.compactions == 0
    assert "truncated" in [r.outcome for r in result.records]


# -- public transcript formats ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "run_index"),
    [
        ("taubench__gpt-4o-airline.json", 0),
        ("sweagent-ctf__i_got_id_demo.traj", None),
        ("claudereliability-coverage-test-fix__transcript.jsonl", None),
    ],
)
def test_public_transcripts_replay_behind_the_waf_losslessly(file: str, run_index: int | None) -> None:
    path = SHARED_TRANSCRIPTS / file
    if not path.is_file():
        pytest.skip(f"public transcript {path} is absent (it lives outside the repository)")
    transcript = load_transcript(path, run=run_index)

    result = replay(transcript, "corporate-128k-waf")

    assert result.chars_lost == 0 and result.divergences == 0
    assert result.turns_completed == result.turns > 0
    assert result.outcome in ("ok", "recovered")
