"""The replay's view of the gateway model (issue 10): content blocks set aside, identical resends with
fresh recall keys, turns that fail before sending, every kind of episode counted, planted content."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Sequence

import pytest

from ctxrecover.archive import Archive, extract_keys, recall
from ctxrecover.errors import ContentBlockedError, HeaderFaultError
from ctxrecover.events import PostCompact, PreCompact
from ctxrecover.messages import Message
from ctxrecover.session import Session
from ctxrecover.transport import ChatRequest, ChatResponse, SendFailed
from ctxrecover.wire import Usage
from simulator.providers.mock import MockProvider
from simulator.proxy.fault_specs import ScenarioError
from simulator.proxy.scenario import load_scenario, scenario_from_document
from simulator.recorder import CountingArchive, Recorder
from simulator.replay import ReplayResult, _complete, replay
from simulator.research.metrics import episodes, rejected_per_episode
from simulator.workloads import ReplayError, shape_transcript, split_turns, workload_transcript

KB = 1024
SQL = re.compile(r"union\s+select|'\s*or\s+'?1'?\s*=\s*'?1", re.IGNORECASE)


@functools.cache
def run(name: str) -> ReplayResult:
    return replay(None, name)


# -- content blocks ------------------------------------------------------------------------------------


STUB_PREFIX = "[withheld: the gateway refused this "
REFUSED = ("rejected", "failed", "experiment:blocked")


def withheld_index(result: ReplayResult) -> int:
    """The one message of the final history that holds a withheld stub (SPEC §12)."""
    (index,) = (i for i, m in enumerate(result.final_history) if m.content.startswith(STUB_PREFIX))
    return index


def test_a_content_block_above_every_accepted_size_is_told_from_size_and_the_culprit_withheld() -> None:
    result = run("waf-content-block-after-large-bodies")

    (turn_index,) = {r.turn for r in result.records if r.outcome.startswith("rejected")}
    turn = [r for r in result.records if r.turn == turn_index]
    first, probe, telling = turn[0], turn[1], turn[2]
    accepted_before = max(r.request_bytes for r in result.records if r.turn < turn_index)
    assert first.outcome == "rejected:waf_rejection" and first.request_bytes > accepted_before  # size-like
    # SPEC §12: one word alone passes (not the route); blanks as large pass — content, not size; no cap,
    # no compaction
    assert probe.outcome == "experiment:passed" and probe.request_bytes < 200
    assert telling.outcome == "experiment:passed" and telling.request_bytes == first.request_bytes
    assert [r.outcome for r in turn[3:-1]] and all(r.outcome.startswith("experiment:") for r in turn[3:-1])
    assert turn[-1].outcome == "ok" and result.learned_cap is None
    assert all(r.learned_cap is None and r.recovery_level is None for r in result.records)
    assert sum(r.outcome.startswith(REFUSED) for r in turn) <= 1 + 2  # 1 + ⌈log2 n⌉, n ≤ 4 new parts
    # the refused tool result is withheld: archived whole and recallable locally, never sent again
    index = withheld_index(result)
    stub = result.final_history[index].content
    (key,) = extract_keys(stub)
    assert SQL.search(recall(result.archive, stub).found[key]) and not SQL.search(stub)
    later = [r for r in result.records if r.turn > turn_index]
    assert later and all(r.outcome == "ok" for r in later)
    assert max(r.request_bytes for r in later) > first.request_bytes  # larger than the refused one: passed
    assert result.withheld == 1 and result.content_blocks == ()
    assert result.chars_lost == 0 and result.divergences == 0


def test_a_content_block_under_a_learned_cap_costs_two_blocks_keeps_the_cap_and_compacts_nothing() -> None:
    result = run("waf-content-block-under-learned-cap")

    turns = sorted({r.turn for r in result.records if r.outcome == "rejected:waf_rejection"})
    (turn_index,) = turns
    blocked = [r for r in result.records if r.turn == turn_index]
    # the block; one word alone: passed; the new parts withheld: passed; one half of them: passed; the
    # other: blocked; the turn
    assert [r.outcome for r in blocked] == [
        "rejected:waf_rejection",
        "experiment:passed",
        "experiment:passed",
        "experiment:passed",
        "experiment:blocked",
        "ok",
    ]
    assert {r.learned_cap for r in blocked} == {result.learned_cap} and result.learned_cap is not None
    recoveries = [
        e
        for e in result.events
        if e.turn == turn_index and isinstance(e.item, PreCompact) and e.item.trigger == "recovery"
    ]
    assert recoveries == []  # nothing compacted for the block
    assert result.stats.withheld_chars > 0  # its stub was compacted later, like any message
    assert result.outcome == "recovered" and result.withheld == 1 and result.chars_lost == 0


def test_the_replay_sets_each_named_message_aside_once_then_lets_the_error_end_the_turn() -> None:
    class Blocking:
        """A session whose gateway refuses message 3, then message 5, then message 5 again."""

        def __init__(self) -> None:
            self.named = [3, 5, 5]
            self.set_aside_calls: list[int] = []

        def complete(self) -> Message:
            raise ContentBlockedError("✖ refused", message_index=self.named.pop(0))

        def set_aside(self, index: int) -> str:
            self.set_aside_calls.append(index)
            return "0123456789abcdef"

    class Seen:
        def __init__(self) -> None:
            self.blocks: list[int] = []

        def content_block(self, error: ContentBlockedError) -> None:
            self.blocks.append(error.message_index)

    session, recorder = Blocking(), Seen()
    with pytest.raises(ContentBlockedError) as caught:
        _complete(session, recorder)  # type: ignore[arg-type]
    assert session.set_aside_calls == [3, 5] and recorder.blocks == [3, 5]
    assert caught.value.message_index == 5 and session.named == []


# -- the recorder ------------------------------------------------------------------------------------------


def recorder_with_session() -> tuple[Recorder, Session]:
    provider = MockProvider("openai-chat", context_window=100_000)
    archive = CountingArchive()
    recorder = Recorder(
        {
            "run_id": "r",
            "transcript": "t",
            "transcript_sha256": "",
            "scenario": "s",
            "policy": "default",
            "seed": 0,
        },
        archive,
        provider,
        cap=None,
        on_event=None,
    )
    session = Session(provider_sender(), archive=archive)
    recorder.attach(session)
    recorder.start_turn(0)
    return recorder, session


def provider_sender() -> object:
    class Unused:
        wire_format = "openai-chat"
        model = "gpt-4o"

        def send(self, request: ChatRequest) -> None:
            raise AssertionError("the recorder is driven directly")

    return Unused()


def reject(recorder: Recorder, body: bytes) -> None:
    recorder.before_send(ChatRequest((Message.user("x"),)))
    recorder.body_chunks = [body]
    recorder.after_failure(SendFailed("403", request_bytes=len(body), status=403, body="<html>waf</html>"))


def test_identical_retry_sees_a_resend_that_differs_only_by_fresh_recall_keys() -> None:
    recorder, _ = recorder_with_session()
    reject(recorder, b'{"messages": ["cut <<ccr:0123456789abcdef>>"]}')
    reject(recorder, b'{"messages": ["cut <<ccr:fedcba9876543210>>"]}')  # same request, new key
    reject(recorder, b'{"messages": ["cut shorter <<ccr:fedcba9876543210>>"]}')  # a different request
    reject(recorder, b'{"messages": ["cut <<ccr:00000000ffffffff>>"]}')  # the first one again
    recorder.turn_failed(ContentBlockedError("blocked"))

    assert [r.identical_retry for r in recorder.records] == [False, True, False, True]
    recorder.start_turn(1)
    reject(recorder, b'{"messages": ["cut <<ccr:0123456789abcdef>>"]}')  # another turn starts afresh
    recorder.turn_failed(ContentBlockedError("blocked"))
    assert recorder.records[-1].identical_retry is False


def reject_with(recorder: Recorder, status: int, body: str, size: int) -> None:
    recorder.before_send(ChatRequest((Message.user("x"),)))
    recorder.body_chunks = [b"x" * size]
    recorder.after_failure(
        SendFailed(
            str(status), request_bytes=size, status=status, body=body, headers={"content-type": "text/html"}
        )
    )


def recover_and_accept(recorder: Recorder) -> str:
    recorder.before_send(ChatRequest((Message.user("x"),)))
    recorder.after_success(ChatResponse(Message.assistant("ok"), "stop", False, Usage(1, 1), 10))
    return recorder.records[-1].outcome


@pytest.mark.parametrize(("first_status", "outcome"), [(403, "ok"), (413, "recovered@L1")])
def test_a_content_block_voids_only_the_recovery_its_misreading_made(first_status: int, outcome: str) -> None:
    recorder, _ = recorder_with_session()
    page = "<html><title>Request blocked</title>blocked by the firewall</html>"
    reject_with(recorder, first_status, page if first_status == 403 else "<html>413</html>", 2_000)
    recorder.on_library_event(PreCompact("recovery"))
    recorder.on_library_event(PostCompact("recovery", "applied"))
    reject_with(recorder, 403, page, 1_000)
    recorder.content_block(ContentBlockedError("✖ refused", message_index=1))

    # a misread WAF refusal: its compaction was undone; a real 413 first: its recovery stands
    assert recover_and_accept(recorder) == outcome
    assert [r.outcome.split(":")[0] for r in recorder.records[:2]] == ["rejected", "rejected"]


def test_a_turn_that_fails_before_sending_records_no_attempt() -> None:
    recorder, _ = recorder_with_session()
    recorder.turn_failed(HeaderFaultError("✖ not sent"))  # e.g. a request known to be refused
    assert recorder.records == [] and recorder.failed_attempts == 0


# -- episodes of every kind -----------------------------------------------------------------------------

EPISODE_KINDS = {
    "header-431": ("payload_too_large", [1]),
    "rst-after-128k-small-history": ("transient_network", [2]),
    "envoy-503-masks-413": ("transient_network", [2]),
    "waf-content-block-after-large-bodies": ("waf_rejection", [3]),
    "max-tokens-over-model-cap": ("output_limit", [1]),
}


@pytest.mark.parametrize("name", sorted(EPISODE_KINDS))
def test_every_kind_of_episode_counts_each_rejected_request(name: str) -> None:
    result = run(name)
    table = episodes(result.frame)
    kind, per_episode = EPISODE_KINDS[name]

    assert list(table["first_failure_kind"]) == [kind] and list(table["rejected_requests"]) == per_episode
    rejected_by_turn = [
        sum(1 for r in result.records if r.turn == turn and r.outcome.startswith(REFUSED))
        for turn in table["turn"]
    ]
    assert rejected_by_turn == per_episode
    assert rejected_per_episode(table) == {"all": float(per_episode[0]), kind: float(per_episode[0])}


def test_rejected_per_episode_is_over_every_episode_and_by_first_kind() -> None:
    tables = [episodes(run(name).frame) for name in ("header-431", "rst-after-128k-small-history")]
    import pandas as pd

    both = pd.concat(tables, ignore_index=True)
    assert rejected_per_episode(both) == {"all": 1.5, "payload_too_large": 1.0, "transient_network": 2.0}
    assert rejected_per_episode(both.iloc[0:0]) == {}


def test_the_max_tokens_scenario_lowers_once_and_sends_every_later_turn_lowered() -> None:
    result = run("max-tokens-over-model-cap")

    assert [(r.outcome, r.max_tokens) for r in result.records[:2]] == [
        ("rejected:output_limit", 32_000),
        ("ok", 8_192),
    ]
    assert all(r.max_tokens == 8_192 and r.outcome == "ok" for r in result.records[1:])
    assert result.stats.compactions == 0 and result.outcome == "max_tokens_lowered"


def test_screenshots_under_the_waf_are_archived_not_lost_and_every_accepted_request_fits(
    reachable_entries: Callable[[Sequence[Message], Archive], set[str]],
) -> None:
    result = run("screenshots-128k-waf")

    accepted = [r for r in result.records if not r.outcome.startswith(REFUSED)]
    assert all(r.request_bytes < 128 * KB for r in accepted)
    archived = reachable_entries(result.final_history, result.archive)
    kept = [i.data for m in result.final_history for i in m.images]
    shots = [i.data for m in result.conversation for i in m.images]
    assert len(shots) == 8 and all(d in kept or f"data:image/png;base64,{d}" in archived for d in shots)
    assert max(map(len, shots)) > 128 * KB  # one screenshot alone is over the WAF: archived, not refused
    assert result.chars_lost == 0 and result.turns_completed == result.turns


# -- planted content ----------------------------------------------------------------------------------------


def test_plant_text_goes_at_the_head_of_the_newest_message_before_that_turn() -> None:
    scenario = load_scenario("waf-content-block-after-large-bodies")
    original = workload_transcript(scenario)
    shaped = shape_transcript(original, scenario)
    turns, _ = split_turns(shaped.messages)

    newest = turns[scenario.workload.plant_turn - 1].inputs[-1]
    assert newest.role == "tool" and newest.content.startswith(scenario.workload.plant_text + "\n")
    changed = [
        i
        for i, (a, b) in enumerate(zip(original.messages, shaped.messages, strict=True))
        if a.content != b.content
    ]
    assert len(changed) == 2  # the system prompt padded, and the planted message
    assert sum(bool(SQL.search(m.content)) for m in shaped.messages) == 1


def test_a_plant_beyond_the_transcript_moves_to_its_last_turn_in_a_replay_and_the_notes_say_so() -> None:
    scenario = load_scenario("waf-content-block-after-large-bodies")
    beyond = dataclasses.replace(scenario, workload=dataclasses.replace(scenario.workload, plant_turn=999))
    with pytest.raises(ReplayError, match="plant_turn 999 is beyond the transcript's 26 turns"):
        shape_transcript(workload_transcript(scenario), beyond)  # shaping alone does not fit
    result = replay(None, beyond)
    assert result.notes == (
        "[workload] plant_turn 999 is beyond the transcript's 26 turns: planted before turn 26",
    )
    assert result.scenario.workload.plant_turn == 26 and result.turns == 26
    turns, _ = split_turns(result.replayed.messages)
    assert turns[-1].inputs[-1].content.startswith(scenario.workload.plant_text + "\n")
    assert result.chars_lost == 0


def test_a_plant_without_text_is_an_error() -> None:
    with pytest.raises(ScenarioError, match=r"\[workload\] plant_turn needs plant_text"):
        scenario_from_document(
            {
                "description": "d",
                "provider": {"format": "anthropic"},
                "workload": {"plant_turn": 3},
                "expect": {"outcome": "ok"},
            },
            name="x",
        )


@pytest.mark.parametrize("name", ["waf-content-block-under-learned-cap", "envoy-503-masks-413"])
def test_the_new_faults_act_the_same_over_loopback_tcp(name: str) -> None:
    over_tcp = replay(None, name, transport="loopback")
    in_process = run(name)

    def shape(result: ReplayResult) -> list[tuple[int, int, int, str]]:
        return [(r.turn, r.attempt, r.request_bytes, r.outcome) for r in result.records]

    assert shape(over_tcp) == shape(in_process)
    assert over_tcp.content_blocks == in_process.content_blocks
