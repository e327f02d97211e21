"""Every bundled scenario, replayed end to end through a real Session, meets its ``[expect]`` section,
and misses it under the wrong behaviour: each expectation is falsifiable.

Each scenario runs on a small bundled transcript chosen so the scenario's fault is
actually reached (see ``CASES``). Two scenarios need a wider window than their
``[provider]`` section gives: with gpt-4o's 128k tokens the session compacts at about
300 KB and the mock rejects prompts over 512 KB, so no request ever reaches the
512 KB EOF or the 1 MB nginx cap; their cases run with a 1M-token window on both
sides (a gpt-4.1-class deployment), faults and expectations unchanged.

The falsification tests replay each scenario again with something wrong (see
``WRONG``): its healthy twin (no fault, a working summarizer, a window as large as
the policy's, no max_tokens limit), a working or absent summarizer where it should
refuse or overflow, no recovery, a cap never learned, no escalation, and the gateway
model's decisions undone (SPEC §11): a content block read as a size limit, a 431 read
as a body cap, resets and gateway 503s only ever transient, a max_tokens error not
understood — and check that the scenario's own expectation then fails. Which wrong behaviours apply
follows from the scenario itself, and the healthy twin applies to every one: a new
scenario whose expectation its healthy twin meets fails the suite.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxrecover.classify import Failure, FailureKind, classify
from ctxrecover.events import PreCompact, StatusEvent
from ctxrecover.policy import DEFAULT_POLICY, Policy
from ctxrecover.recovery import GatewayModel, Judgement, Verdict
from simulator.proxy.faults import HeaderCap
from simulator.proxy.scenario import (
    DEFAULT_CONTEXT_WINDOWS,
    Scenario,
    SummarizerSpec,
    list_scenarios,
    load_scenario,
)
from simulator.replay import ReplayResult, expectation_problems, replay
from simulator.research.baselines import BASELINES, Strategy
from simulator.research.metrics import EXPERIMENT_BLOCKED
from simulator.transcripts.generator import generate_session
from simulator.transcripts.loaders import Transcript, load_transcript

SHARED_TRANSCRIPTS = Path(__file__).parents[2] / "../shared/transcripts"
WIDE_WINDOW = 1_000_000
# A chat session whose history passes 1 MB (no tool results for microcompact to shrink).
BIG_CHAT = {
    "seed": 1,
    "turns": 130,
    "tool_turn_ratio": 0.0,
    "answer_chars": 8000,
    "recall_every": 0,
    "feedback_every": 0,
}
# SPEC §11: the floor diagnosis names what is over. In floor-too-big the rejected request is the
# 142.1 KB system prompt plus a 140-byte task, so the smallest request compaction can produce is over.
FLOOR_FAIL_PREFIX = "✖ The smallest request compaction can produce is "
FLOOR_FAIL_ADVICE = (
    "History compaction cannot help further — shorten the newest messages, reduce MCP servers, skills or "
    "personas, or raise the proxy/WAF body-size limit"
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
    "crs-agent-content-withheld": Case(None),  # its workload: a fixture whose system prompt passes CRS
    "crs-system-prompt-blocked": Case(None),  # its workload: the coding fixture and its own system prompt
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
    # the gateway model's scenarios (issue 10) run their own workloads: each is shaped to reach its case
    "envoy-503-masks-413": Case(None),
    "max-tokens-over-model-cap": Case(None),
    "rst-after-128k-small-history": Case(None),
    "screenshots-128k-waf": Case(None),
    "tight-cap-1.2x-system-prompt": Case(None),
    "tight-cap-1.35x-system-prompt": Case(None),
    "tight-cap-1.5x-system-prompt": Case(None),
    "waf-content-block-after-large-bodies": Case(None),
    "waf-content-block-under-learned-cap": Case(None),
    "waf-content-block-right-after-a-413": Case(None),
    "waf-content-block-set-aside-then-summarized": Case(None),
    "waf-content-rule-cut-by-size-compaction": Case(None),
}


def case_inputs(name: str) -> tuple[Transcript | str | None, Scenario, Policy]:
    """The transcript, scenario and policy a scenario's case replays."""
    case = CASES[name]
    scenario = load_scenario(name)
    policy = DEFAULT_POLICY
    if case.wide:
        provider = dataclasses.replace(scenario.provider, context_window=WIDE_WINDOW)
        scenario = dataclasses.replace(scenario, provider=provider)
        policy = policy.replace(context_window=WIDE_WINDOW)
    transcript: Transcript | str | None = case.transcript
    if transcript == "big-chat":
        transcript = big_chat()
    return transcript, scenario, policy


@functools.cache
def big_chat() -> Transcript:
    return generate_session(**BIG_CHAT)  # type: ignore[arg-type]


@functools.cache
def run(name: str, transport: str = "inprocess") -> ReplayResult:
    transcript, scenario, policy = case_inputs(name)
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
    assert "(system prompt: 142.1 KB, tool definitions: 0 B, newest messages: " in floor[0]
    assert result.error == floor[0]
    assert result.stats.recovery_attempts == 0
    assert list(result.final_history) == list(result.conversation)


def test_rate_limit_surfaces_without_any_compaction() -> None:
    result = run("rate-limit-429")

    assert not any(isinstance(e.item, PreCompact) for e in result.events)
    assert [(r.turn, r.outcome, r.failure_kind) for r in result.records] == [
        (0, "ok", None),
        (1, "ok", None),
        (2, "failed", "rate_limit"),
    ]
    assert result.error is not None and "rate_limit" in result.error
    assert list(result.final_history) == list(result.conversation)


def test_corporate_waf_warns_about_the_floor_and_then_stays_under_the_waf() -> None:
    result = run("corporate-128k-waf")

    # the block, then blanks as large (the experiment that reads it as size)
    refused = [
        r for r in result.records if r.outcome.startswith("rejected:") or r.outcome == EXPERIMENT_BLOCKED
    ]
    assert [(r.failure_kind, r.request_bytes >= 128_000) for r in refused] == [("waf_rejection", True)] * 2
    assert refused[1].outcome == EXPERIMENT_BLOCKED
    assert any(n.startswith(FLOOR_WARNING_PREFIX) for r in refused for n in r.notices.split("\n"))
    accepted = [r for r in result.records if r not in refused]
    assert all(r.request_bytes < 128_000 for r in accepted)


def test_corporate_waf_over_loopback_tcp_matches_the_in_process_replay() -> None:
    over_tcp = run("corporate-128k-waf", "loopback")
    in_process = run("corporate-128k-waf")

    assert over_tcp.transport == "loopback"
    assert [p for p in expectation_problems(over_tcp) if not p.endswith(" chars lost")] == []

    def shape(result: ReplayResult) -> list[tuple[int, int, int, str]]:
        return [(r.turn, r.attempt, r.request_bytes, r.outcome) for r in result.records]

    assert shape(over_tcp) == shape(in_process)


def test_header_cap_fails_from_turn_two_with_one_request_and_no_compaction() -> None:
    # SPEC §11 changed this test: a 431 is a header fault — one request, one diagnosis naming the
    # header size, no recovery attempt, no body cap (the ladder used to spend every attempt on it).
    result = run("header-431")

    (failing,) = [r for r in result.records if r.turn == 1]
    assert (failing.outcome, failing.failure_kind) == ("failed", "payload_too_large")
    assert result.outcome == "no_compaction" and result.stats.recovery_attempts == 0
    assert result.error is not None
    assert result.error.startswith("✖ Gateway rejected the request headers (HTTP 431, ")
    assert not any(isinstance(e.item, PreCompact) for e in result.events)
    assert all(r.learned_cap is None for r in result.records)
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


# -- falsifiable: the wrong behaviour misses each scenario's expectation ----------------------------------
RECOVERABLE_KINDS = ("context_overflow", "payload_too_large", "waf_rejection", "suspected_payload")
NEVER_LEARNS_A_CAP = Strategy(
    "never-learns-a-cap",
    "ctxrecover whose payload rejections teach no cap (only a configured one applies).",
    "ablation of ctxrecover.recovery.GatewayModel's cap strategy",
    factory=lambda policy, archive, events, stats, summarizer: {
        "gateway": GatewayModel(configured_cap=policy.payload_cap, strategy="none")
    },
)


class ForgetsAcceptedSizes(GatewayModel):
    """The ratchet before SPEC §11: accepted sizes are no evidence, so every refusal reads as a size limit."""

    __slots__ = ()

    def accepted(self, request_bytes: int, *, policy: Policy) -> GatewayModel:
        return self


class BlockPagesAreSize(GatewayModel):
    """The model before SPEC §12: a block page larger than every accepted request is a size limit at once."""

    __slots__ = ()

    def judge(
        self, failure: Failure, *, request_bytes: int | None, policy: Policy, **kwargs: Any
    ) -> Judgement:
        judged = GatewayModel.judge(self, failure, request_bytes=request_bytes, policy=policy, **kwargs)
        if judged.verdict is Verdict.BLOCK and request_bytes is not None:
            learned = self.size_rejected(judged.signature, request_bytes, policy=policy)
            return Judgement(learned, Verdict.SIZE_LIMIT, judged.failure, judged.signature)
        return judged


class ThreeQuartersRatchet(GatewayModel):
    """SPEC §6.1 before §11: ¾ of the smallest rejected size, only ever tightening, whatever passed."""

    __slots__ = ()

    def _retarget(self, policy: Policy) -> GatewayModel:
        rejected = self.smallest_rejected
        if rejected is None:
            return self
        learned = min(rejected * 3 // 4, self.learned_cap or rejected)
        return dataclasses.replace(self, learned_cap=learned, assumed_cap=False)


class AmbiguityIsTransient(GatewayModel):
    """SPEC §2.4 alone: a reset or a gateway 503 under 500 000 chars is transient however often it repeats."""

    __slots__ = ()

    def judge(self, failure: Failure, **kwargs: Any) -> Judgement:
        judged = GatewayModel.judge(self, failure, **kwargs)
        if failure.kind is FailureKind.TRANSIENT_NETWORK and judged.verdict is Verdict.SIZE_LIMIT:
            return Judgement(self, Verdict.RETRY, failure, judged.signature)
        return judged


def header_fault_as_body_limit(error: BaseException | None = None, **kwargs: Any) -> Failure:
    """A 431 classified like a 413: the body is blamed for the headers."""
    failure = classify(error, **kwargs)
    if failure.status == 431:
        return dataclasses.replace(failure, status=413, reason="payload_413")
    return failure


def output_limit_not_understood(error: BaseException | None = None, **kwargs: Any) -> Failure:
    """A "max_tokens is too large" 400 read as any other bad request."""
    failure = classify(error, **kwargs)
    if failure.kind is FailureKind.OUTPUT_LIMIT:
        return dataclasses.replace(failure, kind=FailureKind.OTHER, output_limit_tokens=None)
    return failure


def _wrong_model(model: type[GatewayModel], name: str) -> Strategy:
    return Strategy(
        name,
        model.__doc__ or name,
        "ablation of ctxrecover.recovery.GatewayModel (SPEC §11)",
        factory=lambda policy, *_: {"gateway": model.from_policy(policy)},
    )


def _wrong_classifier(classifier: Callable[..., Failure], name: str) -> Strategy:
    return Strategy(
        name,
        classifier.__doc__ or name,
        "ablation of ctxrecover.classify (SPEC §11)",
        factory=lambda *_: {"classifier": classifier},
    )


CONTENT_AS_SIZE = _wrong_model(ForgetsAcceptedSizes, "content-as-size")
BLOCK_AS_SIZE = _wrong_model(BlockPagesAreSize, "block-page-as-size")
RATCHET = _wrong_model(ThreeQuartersRatchet, "three-quarters-ratchet")
AMBIGUITY_TRANSIENT = _wrong_model(AmbiguityIsTransient, "ambiguity-transient")
HEADER_AS_BODY = _wrong_classifier(header_fault_as_body_limit, "431-as-413")
OUTPUT_LIMIT_UNKNOWN = _wrong_classifier(output_limit_not_understood, "output-limit-unknown")


def healthy_twin(scenario: Scenario) -> Scenario:
    """``scenario`` without what makes it fail: no fault, a working summarizer, room for every prompt."""
    policy_window = dict(scenario.policy).get("context_window") or 0
    window = max(
        scenario.provider.context_window, DEFAULT_CONTEXT_WINDOWS[scenario.provider.format], policy_window
    )
    provider = dataclasses.replace(scenario.provider, context_window=window, max_output_tokens_cap=None)
    workload = dataclasses.replace(scenario.workload, max_tokens=None)
    return dataclasses.replace(
        scenario, faults=(), summarizer=SummarizerSpec(), provider=provider, workload=workload
    )


@dataclasses.dataclass(frozen=True)
class Wrong:
    """A wrong behaviour: when it applies to a scenario, and how it changes the replay's inputs."""

    name: str
    applies: Callable[[Scenario], bool]
    scenario: Callable[[Scenario], Scenario] = lambda scenario: scenario
    policy: tuple[tuple[str, Any], ...] = ()
    strategy: Strategy | None = None


def _summarizer_misbehaves(scenario: Scenario) -> bool:
    return scenario.summarizer.behaviour != "extractive"


def _recovers_or_spends_attempts(scenario: Scenario) -> bool:
    expect = scenario.expect
    spends_attempts = expect.outcome == "failed" and expect.failure_kind in RECOVERABLE_KINDS
    return expect.outcome == "recovered" or spends_attempts


# Where a block comes below a size the gateway accepted (an [expect] cannot say so): forgetting accepted
# sizes turns it into a size limit there, and only there.
BLOCKED_BELOW_ACCEPTED = {"waf-content-block-under-learned-cap"}

WRONG = (
    Wrong("healthy twin", lambda scenario: True, scenario=healthy_twin),
    Wrong(
        "working summarizer",
        _summarizer_misbehaves,
        scenario=lambda scenario: dataclasses.replace(scenario, summarizer=SummarizerSpec()),
    ),
    Wrong(
        "no summarizer",
        _summarizer_misbehaves,
        scenario=lambda scenario: dataclasses.replace(scenario, summarizer=SummarizerSpec("none")),
    ),
    Wrong("no recovery attempts", _recovers_or_spends_attempts, policy=(("max_recovery_attempts", 0),)),
    Wrong("no-recovery baseline", _recovers_or_spends_attempts, strategy=BASELINES["no-recovery"]),
    Wrong(
        "never learns a cap",
        lambda scenario: scenario.expect.cap_learned is True,
        strategy=NEVER_LEARNS_A_CAP,
    ),
    Wrong(
        "no escalation",
        lambda scenario: scenario.expect.outcome == "escalated",
        policy=(("max_token_escalations", 0),),
    ),
    Wrong(
        "content blocks read as size limits",
        lambda scenario: bool(scenario.expect.content_blocks) or scenario.name in BLOCKED_BELOW_ACCEPTED,
        strategy=CONTENT_AS_SIZE,
    ),
    Wrong(
        "block pages read as size limits",
        lambda scenario: scenario.expect.failure_kind == "waf_rejection",
        strategy=BLOCK_AS_SIZE,
    ),
    Wrong(
        "no block experiments",
        lambda scenario: bool(scenario.expect.withheld),
        policy=(("max_blocked_requests", 1),),
    ),
    Wrong("the ¾ ratchet", lambda scenario: scenario.expect.requests_over_cap is not None, strategy=RATCHET),
    Wrong(
        "431 read as a body limit",
        lambda scenario: any(isinstance(f, HeaderCap) for f in scenario.faults),
        strategy=HEADER_AS_BODY,
    ),
    Wrong(
        "resets and gateway 503s only transient",
        lambda scenario: (
            scenario.expect.failure_kind == "transient_network" and scenario.expect.outcome == "recovered"
        ),
        strategy=AMBIGUITY_TRANSIENT,
    ),
    Wrong(
        "max_tokens error not understood",
        lambda scenario: scenario.expect.failure_kind == "output_limit",
        strategy=OUTPUT_LIMIT_UNKNOWN,
    ),
)
FALSIFICATIONS = [
    (name, wrong) for name in list_scenarios() for wrong in WRONG if wrong.applies(load_scenario(name))
]


@functools.cache
def run_wrong(name: str, wrong: Wrong) -> ReplayResult:
    transcript, scenario, policy = case_inputs(name)
    return replay(
        transcript,
        wrong.scenario(scenario),
        policy=policy.replace(**dict(wrong.policy)),
        strategy=wrong.strategy,
        policy_name=wrong.name,
    )


@pytest.mark.parametrize(
    ("name", "wrong"), FALSIFICATIONS, ids=[f"{name}: {wrong.name}" for name, wrong in FALSIFICATIONS]
)
def test_the_wrong_behaviour_misses_the_scenarios_expectation(name: str, wrong: Wrong) -> None:
    result = run_wrong(name, wrong)

    assert expectation_problems(result, load_scenario(name).expect) != [], (
        f"{name} still meets its [expect] under {wrong.name}: the expectation does not tell them apart"
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_healthy_twin_is_healthy(name: str) -> None:
    result = run_wrong(name, WRONG[0])

    assert (result.outcome, result.failure_kinds, result.chars_lost) == ("ok", [], 0)
    assert result.turns_completed == result.turns


def test_every_scenario_is_checked_against_its_healthy_twin_and_a_wrong_library_behaviour() -> None:
    applied = {name: [wrong.name for n, wrong in FALSIFICATIONS if n == name] for name in list_scenarios()}
    assert all(names[0] == "healthy twin" for names in applied.values())
    # a rate limit is answered without recovery, cap or summary: no library knob turns that wrong, so
    # there the fault itself is what the expectation must see (a header fault now has its wrong reading)
    only_the_twin = {name for name, names in applied.items() if len(names) == 1}
    assert only_the_twin == {"rate-limit-429"}
    gateway_wrongs = {
        "content blocks read as size limits",
        "block pages read as size limits",
        "no block experiments",
        "the ¾ ratchet",
        "431 read as a body limit",
        "resets and gateway 503s only transient",
        "max_tokens error not understood",
    }
    assert gateway_wrongs <= {name for names in applied.values() for name in names}


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
