"""Recovery after a rejected request (SPEC §6) and the pre-flight check (SPEC §7).

What a rejection teaches about the gateway (the learned cap, SPEC §6.1 and §11) is the
gateway model's: tests/ctxrecover/recovery/test_gateway.py.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from ctxrecover.archive import MemoryArchive, extract_keys, recall
from ctxrecover.classify import Failure, FailureKind, classify
from ctxrecover.errors import ConfigError
from ctxrecover.events import Event, EventBus, Notice
from ctxrecover.messages import Image, Message, ToolCall
from ctxrecover.passes import tool_budget
from ctxrecover.passes.parts import set_aside
from ctxrecover.policy import DEFAULT_POLICY, Policy
from ctxrecover.recovery import (
    GatewayModel,
    Level1,
    Level2,
    Level3,
    RecoveryContext,
    RecoveryLadder,
    StepReport,
    diagnose_floor,
    preflight,
    recover,
    repair_malformed,
    smallest_request_diagnosis,
)
from ctxrecover.recovery.diagnosis import content_block_error, is_library_message, newest_conversation_message
from ctxrecover.recovery.escalation import CONTINUATION_TEXT
from ctxrecover.sizes import MIB, total_weight, weight

# -- SPEC texts, byte for byte ---------------------------------------------------------------

LEARNED = (
    "ℹ Gateway rejected a %s request — payload cap set to %s for this session "
    "(export CHATCLI_MAX_PAYLOAD to override)"
)
ASSUMED = "ℹ Assuming 4 MB payload cap — export CHATCLI_MAX_PAYLOAD (e.g. 5MB, 512KB) to adjust"
FLOOR_FAIL = (
    "✖ The non-compactable request base (system prompt: %s — personas, skills, MCP tool docs) meets or "
    "exceeds the size the gateway rejected (%s). History compaction cannot help — reduce MCP servers, "
    "skills or personas, or raise the proxy/WAF body-size limit"
)
FLOOR_WARN = (
    "⚠ System prompt alone is %s — close to the gateway's rejection threshold; consider reducing MCP "
    "servers, skills or personas"
)
RECOVERABLE = "⚠ Recoverable failure (%s) — compacting and retrying"
PAYLOAD_NOTICE = (
    "[SYSTEM NOTICE — PAYLOAD LIMIT HIT] A proxy/gateway rejected the previous request due to body size. "
    "History was compacted to recover. Going forward: (1) When reading files, prefer targeted reads with "
    "line ranges (e.g. sed -n '100,200p' file, or read_file with offset+limit) instead of reading entire "
    "files. (2) Prefer grep/ripgrep with specific patterns over full-file reads. (3) If you previously read "
    "a large file, its full content is persisted at the path shown in the tool-result preview — re-read "
    "specific ranges from that file rather than repeating the original read. (4) Summarize findings "
    "incrementally rather than accumulating raw tool output."
)
PAYLOAD_MARKER = "[SYSTEM NOTICE — PAYLOAD LIMIT HIT]"
COMPACTED = (
    "[Context was automatically compacted due to size limits. Previous conversation history has been "
    "summarized. Continue from where you left off.]"
)
DROPPED_NOTE_PREFIX = (
    "[full transcript of the messages dropped by context recovery recoverable via @recall <<ccr:"
)
PREFLIGHT = "ℹ pre-flight: history %s ≈ %d%% of configured cap (%s) — compacting"
PREFLIGHT_LEARNED = "ℹ pre-flight: history %s ≈ %d%% of learned cap (%s) — compacting"
FLOOR_TOOLS_FAIL = (
    "✖ The non-compactable request base (system prompt: %s, tool definitions: %s) meets or exceeds the "
    "size the gateway rejected (%s). History compaction cannot help — reduce MCP servers or tool "
    "definitions, or raise the proxy/WAF body-size limit"
)
FLOOR_SMALLEST_FAIL = (
    "✖ The smallest request compaction can produce is %s (system prompt: %s, tool definitions: %s, "
    "newest messages: %s) and meets or exceeds the size the gateway rejected (%s). History compaction "
    "cannot help further — shorten the newest messages, reduce MCP servers, skills or personas, or raise "
    "the proxy/WAF body-size limit"
)
UNCAPPED = (
    "ℹ history %s — if you are behind a proxy/gateway, export CHATCLI_MAX_PAYLOAD=5MB "
    "(adjust to the proxy limit)"
)
TRUNCATED_SEPARATOR = "\n... [truncated] ...\n"

# SPEC §1.1 / seed example: a 126.4 KB request rejected, 131.2 KB and 96.1 KB system prompts.
REJECTED = 129_434
SYSTEM_OVER = 134_349
SYSTEM_NEAR = 98_406


# -- helpers ---------------------------------------------------------------------------------


def payload_failure(rejected: int | None = REJECTED) -> Failure:
    return classify(status=413, body="413 Request Entity Too Large", request_bytes=rejected)


def overflow_failure() -> Failure:
    return classify(status=400, body="prompt is too long: 250000 tokens > 200000 maximum")


def context(policy: Policy = DEFAULT_POLICY, archive: MemoryArchive | None = None) -> RecoveryContext:
    return RecoveryContext.from_policy(policy, archive if archive is not None else MemoryArchive())


def conversation(pairs: int, *, size: int = 20) -> list[Message]:
    history = [Message.system("You are a coding agent.")]
    for i in range(pairs):
        history.append(Message.user(f"u{i} " + "q" * size))
        history.append(Message.assistant(f"a{i} " + "r" * size))
    return history


def digits(n_chars: int) -> str:
    """Distinct, position-revealing text: '00000' '00001' …"""
    return "".join(f"{i:05d}" for i in range(n_chars // 5 + 1))[:n_chars]


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.bus = EventBus(self.events.append)

    @property
    def notices(self) -> list[str]:
        return [e.message for e in self.events if isinstance(e, Notice)]


# -- floor diagnosis (§6 step 2) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("system", "rejected", "fail_fast", "message"),
    [
        (SYSTEM_OVER, REJECTED, True, FLOOR_FAIL % ("131.2 KB", "126.4 KB")),
        (REJECTED, REJECTED, True, FLOOR_FAIL % ("126.4 KB", "126.4 KB")),
        (SYSTEM_NEAR, REJECTED, False, FLOOR_WARN % "96.1 KB"),
        (97_076, REJECTED, False, FLOOR_WARN % "94.8 KB"),
        (97_075, REJECTED, False, None),
        (SYSTEM_OVER, None, False, None),
    ],
)
def test_floor_diagnosis(system: int, rejected: int | None, fail_fast: bool, message: str | None) -> None:
    diagnosis = diagnose_floor(system, rejected, policy=DEFAULT_POLICY)
    assert diagnosis.fail_fast is fail_fast
    assert (diagnosis.notice.message if diagnosis.notice else None) == message


def test_floor_names_the_tool_definitions_when_they_push_the_base_over() -> None:
    # The system prompt alone (96.1 KB) is under the rejected 126.4 KB; with 40 KB of tool definitions
    # the non-compactable base is not, and the message says which part is what.
    diagnosis = diagnose_floor(SYSTEM_NEAR, REJECTED, policy=DEFAULT_POLICY, tools_bytes=40_000)
    assert diagnosis.fail_fast and diagnosis.over == "tool_definitions"
    assert diagnosis.over_bytes == SYSTEM_NEAR + 40_000
    assert diagnosis.notice is not None
    assert diagnosis.notice.message == FLOOR_TOOLS_FAIL % ("96.1 KB", "39.1 KB", "126.4 KB")
    just_under = REJECTED - SYSTEM_NEAR - 1
    under = diagnose_floor(SYSTEM_NEAR, REJECTED, policy=DEFAULT_POLICY, tools_bytes=just_under)
    assert not under.fail_fast and under.notice is not None and under.notice.code == "payload_floor_warning"


def test_the_system_prompt_text_is_kept_when_the_system_prompt_is_what_is_over() -> None:
    diagnosis = diagnose_floor(SYSTEM_OVER, REJECTED, policy=DEFAULT_POLICY, tools_bytes=40_000)
    assert diagnosis.over == "system_prompt" and diagnosis.over_bytes == SYSTEM_OVER
    assert diagnosis.notice is not None and diagnosis.notice.message == FLOOR_FAIL % ("131.2 KB", "126.4 KB")


def test_the_smallest_request_diagnosis_names_the_request_and_its_parts() -> None:
    diagnosis = smallest_request_diagnosis(130_000, REJECTED, system_bytes=SYSTEM_NEAR, tools_bytes=2_048)
    assert diagnosis.fail_fast and diagnosis.over == "smallest_request" and diagnosis.over_bytes == 130_000
    assert diagnosis.notice is not None and diagnosis.notice.code == "payload_floor"
    assert diagnosis.notice.message == FLOOR_SMALLEST_FAIL % (
        "127.0 KB",
        "96.1 KB",
        "2.0 KB",
        "28.9 KB",
        "126.4 KB",
    )


@pytest.mark.parametrize("bad", [-1, True, 1.5])
def test_floor_diagnosis_rejects_bad_sizes(bad: object) -> None:
    with pytest.raises(ConfigError, match="floor diagnosis needs"):
        diagnose_floor(bad, REJECTED, policy=DEFAULT_POLICY)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="floor diagnosis needs tools_bytes"):
        diagnose_floor(1_000, REJECTED, policy=DEFAULT_POLICY, tools_bytes=bad)  # type: ignore[arg-type]


# -- the ladder (§6 steps 4–5) ---------------------------------------------------------------


def level1_history() -> list[Message]:
    calls = [ToolCall(f"r{i}", "read_file", f'{{"path": "f{i}.py"}}') for i in range(12)]
    return [
        Message.system("sys"),
        Message.user("read everything"),
        Message.assistant(tool_calls=[ToolCall("big", "read_file", '{"path": "big.py"}')]),
        Message.tool("big", digits(15_000)),
        Message.assistant(tool_calls=calls),
        *(Message.tool(c.id, f"{c.id}:" + digits(9_500)) for c in calls),
        Message.assistant(digits(8_000)),
        Message.user("continue"),
    ]


def test_level1_halves_the_tool_limits_for_the_session_only(
    assert_nothing_lost_strict: Callable[..., None],
) -> None:
    history = level1_history()
    snapshot = copy.deepcopy(history)
    store = MemoryArchive()
    out, report = Level1()(history, context(archive=store))
    assert (report.tool_result_budget_chars, report.tool_result_max_chars) == (100_000, 10_000)
    assert report.changed and report.step == "level1"
    assert len(out[3].content) < 10_000  # 15 000 > 10 000: previewed (it fits 20 000)
    turn = [m for m in out if m.role == "tool"][1:]
    assert sum(len(m.content) for m in turn) <= 100_000 < 12 * 9_500
    assert report.tool_results_previewed >= 2
    assert history == snapshot
    defaults = (DEFAULT_POLICY.tool_result_budget_chars, DEFAULT_POLICY.tool_result_max_chars)
    assert defaults == (200_000, 20_000)
    assert Policy() == DEFAULT_POLICY
    assert (tool_budget.DEFAULT_TURN_BUDGET_CHARS, tool_budget.DEFAULT_MAX_RESULT_CHARS) == (200_000, 20_000)
    assert_nothing_lost_strict(history, out, store, with_arguments=True)


def test_level1_does_not_compound_over_repeated_recoveries() -> None:
    ctx = dataclasses.replace(context(), tool_result_budget_chars=100_000, tool_result_max_chars=10_000)
    _, report = Level1()(level1_history(), ctx)
    assert (report.tool_result_budget_chars, report.tool_result_max_chars) == (100_000, 10_000)
    tighter = dataclasses.replace(ctx, tool_result_budget_chars=60_000)
    assert Level1()(level1_history(), tighter)[1].tool_result_budget_chars == 60_000


def test_level1_cuts_long_assistant_messages_to_5000_keeping_head_three_quarters() -> None:
    original = digits(8_000)
    store = MemoryArchive()
    out, report = Level1()([Message.user("go"), Message.assistant(original)], context(archive=store))
    cut = out[1].content
    assert report.messages_capped == 1 and len(cut) <= 5_000
    head, rest = cut.split(TRUNCATED_SEPARATOR)
    tail = rest.split("\n[full content recoverable via @recall <<ccr:")[0]
    assert original.startswith(head) and original.endswith(tail)
    assert len(head) == int((len(head) + len(tail)) * 0.75)
    assert recall(store, cut).found[extract_keys(cut)[0]] == original


def filling(history: list[Message], fill_chars: int, archive: MemoryArchive | None = None) -> RecoveryContext:
    return dataclasses.replace(context(archive=archive), fill_chars=fill_chars)


def test_level1_filling_the_cap_cuts_assistant_messages_oldest_first_only_until_the_history_fits(
    assert_nothing_lost_strict: Callable[..., None],
) -> None:
    history = [Message.system("sys")]
    for i in range(10):
        history += [Message.user(f"u{i}"), Message.assistant(f"a{i} " + digits(12_000))]
    store = MemoryArchive()
    fill = total_weight(history) - 20_000
    out, report = Level1()(history, filling(history, fill, store))
    assert total_weight(out) <= fill
    cut = [i for i, (a, b) in enumerate(zip(history, out, strict=True)) if a is not b]
    assert 0 < len(cut) < 10 and cut == list(range(2, 21, 2))[: len(cut)]  # the oldest, nothing newer
    # and no more than it takes: without the newest cut the history would still be over the target
    assert total_weight(out) - weight(out[cut[-1]]) + weight(history[cut[-1]]) > fill
    assert report.messages_capped == len(cut) and report.changed
    # the cuts were enough: the session's tool-result limits stay as they were
    assert (report.tool_result_budget_chars, report.tool_result_max_chars) == (None, None)
    assert_nothing_lost_strict(history, out, store, with_arguments=True)


def test_level1_filling_the_cap_tightens_the_tool_limits_when_the_cuts_are_not_enough() -> None:
    history = level1_history()
    out, report = Level1()(history, filling(history, 20_000))
    assert (report.tool_result_budget_chars, report.tool_result_max_chars) == (100_000, 10_000)
    assert report.messages_capped == 1 and report.tool_results_previewed >= 2


def test_level1_without_a_fill_target_cuts_every_long_assistant_message() -> None:
    history = [Message.user("go")] + [Message.assistant(digits(12_000)) for _ in range(3)]
    _, report = Level1()(history, context())
    assert report.messages_capped == 3


@pytest.mark.parametrize("bad", [-1, 1.5, True, "10"])
def test_a_bad_fill_target_is_rejected(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"RecoveryContext\.fill_chars must be None or an int"):
        dataclasses.replace(context(), fill_chars=bad)


def test_level1_repairs_pairing() -> None:
    history = [Message.user("go"), Message.assistant(tool_calls=[ToolCall("a", "ls")]), Message.user("?")]
    out, report = Level1()(history, context())
    assert report.pairing_fixes == 1
    assert [m.role for m in out] == ["user", "assistant", "tool", "user"]


def test_level2_keeps_system_and_the_last_10_messages(
    assert_nothing_lost_strict: Callable[..., None],
) -> None:
    history = conversation(15)
    store = MemoryArchive()
    out, report = Level2()(history, context(archive=store))
    assert out[0] is history[0]
    assert out[1].content.startswith(DROPPED_NOTE_PREFIX) and out[1].content == report.recall_note
    assert out[2:] == history[-10:]
    assert report.messages_dropped == 20 and report.archive_key in store
    assert_nothing_lost_strict(history, out, store, with_arguments=True)


def test_level2_starts_the_kept_part_with_a_user_message() -> None:
    history = [*conversation(15), Message.user("latest")]
    out, report = Level2()(history, context())
    kept = out[2:]
    assert kept[0].role == "user" and len(kept) == 9
    assert report.messages_dropped == 22
    assert [m.role for m in out if m.role != "system"][0] == "user"


def test_level2_repairs_pairing_after_the_cut() -> None:
    history = [
        *conversation(6),
        Message.user("run it"),
        Message.assistant(tool_calls=[ToolCall("t1", "sh"), ToolCall("t2", "sh")]),
        Message.tool("t1", "ok"),
    ]
    out, report = Level2(keep=4)(history, context())
    assert report.pairing_fixes == 1
    assert out[-1].role == "tool" and out[-1].tool_call_id == "t2" and out[-1].is_error


def test_level3_keeps_4_messages_capped_at_4000_chars(
    assert_nothing_lost_strict: Callable[..., None],
) -> None:
    history = [Message.system("sys")]
    for i in range(5):
        history += [Message.user(f"u{i}: " + digits(6_000)), Message.assistant(f"a{i}: " + digits(6_000))]
    store = MemoryArchive()
    out, report = Level3()(history, context(archive=store))
    kept = out[2:]
    assert len(kept) == 4 and report.messages_capped == 4 and report.messages_dropped == 6
    assert all(len(m.content) <= 4_000 and extract_keys(m.content) for m in kept)
    assert kept[0].content.startswith("u3:")
    assert_nothing_lost_strict(history, out, store, with_arguments=True)


def test_level3_inserts_the_compacted_context_message_when_nothing_survives(
    assert_nothing_lost_strict: Callable[..., None],
) -> None:
    history = [
        Message.system("sys"),
        Message.user("start"),
        Message.assistant(tool_calls=[ToolCall("t0", "ls")]),
        Message.tool("t0", "a.py"),
        Message.assistant(tool_calls=[ToolCall("t1", "cat")]),
        Message.tool("t1", "print(1)"),
        Message.assistant("done"),
    ]
    store = MemoryArchive()
    out, report = Level3()(history, context(archive=store))
    assert [m.role for m in out] == ["system", "user", "user"]
    assert out[1].content.startswith(DROPPED_NOTE_PREFIX)
    assert out[2].content == COMPACTED
    assert report.notice_inserted and report.messages_dropped == 6
    assert_nothing_lost_strict(history, out, store, with_arguments=True)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: RecoveryLadder(), r"RecoveryLadder\(Level1\(\), Level2\(\), Level3\(\)\)"),
        (lambda: RecoveryLadder("level1"), "step 1 must be callable"),
        (lambda: Level2(keep=1), "keep >= 2"),
        (lambda: Level3(per_message_cap=50), "per_message_cap"),
        (lambda: Level1(budget_factor=2.0), "budget_factor"),
        (lambda: RecoveryLadder.default().step_for(0), "numbered from 1"),
    ],
)
def test_bad_ladders_are_rejected_up_front(build, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build()


def test_attempts_past_the_end_reuse_the_last_step() -> None:
    ladder = RecoveryLadder.default(DEFAULT_POLICY)
    assert [ladder.level_for(n) for n in (1, 2, 3, 4, 9)] == [1, 2, 3, 3, 3]
    history = conversation(8, size=5_000)
    out_past, report_past = ladder(history, 7, context())
    out_three, report_three = ladder(history, 3, context())
    assert report_past == report_three and report_past.step == "level3"
    assert [m.content for m in out_past] == [m.content for m in out_three]


def test_steps_compose_with_plus_in_order() -> None:
    seen: list[int] = []

    def spy(history: list[Message], ctx: RecoveryContext) -> tuple[list[Message], StepReport]:
        seen.append(ctx.tool_result_max_chars)
        return history, StepReport(step="spy", messages_before=len(history), messages_after=len(history))

    composed = Level1() + spy + Level2(keep=4)
    assert composed.name == "level1+spy+level2"
    history = [*conversation(6), Message.assistant(digits(8_000)), Message.user("more")]
    out, report = RecoveryLadder(composed)(history, 1, context())
    assert seen == [10_000]  # the later step sees the limits Level 1 set
    assert report.step == "level1+spy+level2"
    assert report.tool_result_max_chars == 10_000 and report.messages_capped == 1
    assert report.messages_dropped > 0 and report.messages_before == len(history)
    assert report.messages_after == len(out)
    assert len((spy + Level1()).steps) == 2


def test_a_step_returning_the_wrong_shape_is_reported() -> None:
    def broken(history: list[Message], ctx: RecoveryContext) -> tuple[list[Message], StepReport]:
        return history  # type: ignore[return-value]

    with pytest.raises(ConfigError, match="'broken' must return"):
        RecoveryLadder(broken)(conversation(1), 1, context())


# -- recover (§6) ----------------------------------------------------------------------------


def run_recover(history: list[Message], failure: Failure, attempt: int, **kw):
    return recover(
        history,
        failure,
        attempt,
        ladder=kw.pop("ladder", RecoveryLadder.default()),
        ctx=kw.pop("ctx", context()),
        **kw,
    )


def test_payload_notice_is_added_exactly_once_over_three_recoveries() -> None:
    # The session asks for the notice while its gateway model says it was never sent (SPEC §6 step 6).
    model = GatewayModel()
    history = conversation(20, size=3_000)
    added = []
    for attempt in (1, 2, 3):
        ask = not model.payload_notice_sent
        result = run_recover(history, payload_failure(), attempt, payload_notice=ask)
        model = model.replace(payload_notice_sent=True)
        added.append(result.payload_notice_added)
        history = result.history
        if attempt == 1:
            assert history[-1].role == "user" and history[-1].content == PAYLOAD_NOTICE
    assert added == [True, False, False]
    assert sum(m.content.count(PAYLOAD_MARKER) for m in history) == 1


def test_payload_notice_is_not_added_when_a_summary_already_carries_it() -> None:
    summary = Message.user(
        "[STRUCTURED SUMMARY — covering 12 earlier messages]\n\n## Current Task State\n"
        f"The model was told: {PAYLOAD_NOTICE}",
        is_summary=True,
        summary_of=12,
    )
    history = [Message.system("sys"), summary, *conversation(3)[1:]]
    result = run_recover(history, payload_failure(), 1, payload_notice=True)
    assert not result.payload_notice_added
    assert sum(m.content.count(PAYLOAD_MARKER) for m in result.history) == 1


def test_recover_archives_images_outside_the_kept_messages_before_the_ladder_drops_them(
    assert_nothing_lost_strict: Callable[..., None],
) -> None:
    shot = "iVBORw0KGgo" + "A" * 40_000
    history = [Message.system("sys")]
    for i in range(6):
        image = Image(data=shot + str(i))
        history += [Message.user(f"look {i}", images=(image,)), Message.assistant(f"a{i}")]
    store = MemoryArchive()
    result = run_recover(history, payload_failure(), 2, ctx=context(archive=store))
    assert result.changed
    # the images inside the last 4 messages stay images; every older one is archived byte for byte
    assert [m.images[0].data for m in result.history if m.images] == [shot + "4", shot + "5"]
    archived = {store.get(k) for k in store.keys()}
    assert {f"data:image/png;base64,{shot}{i}" for i in range(4)} <= archived
    assert_nothing_lost_strict(history, result.history, store, with_arguments=True)


def test_recover_filling_the_cap_archives_the_oldest_images_only_until_the_history_fits(
    assert_nothing_lost_strict: Callable[..., None],
) -> None:
    shot = "iVBORw0KGgo" + "A" * 40_000
    history = [Message.system("sys")]
    for i in range(6):
        history += [
            Message.user(f"look {i}", images=(Image(data=shot + str(i)),)),
            Message.assistant(f"a{i}"),
        ]
    store = MemoryArchive()
    fill = total_weight(history) - total_weight([history[1]]) - 100  # one image and a little more
    result = run_recover(history, payload_failure(), 1, ctx=filling(history, fill, store))
    assert total_weight(result.history) <= fill
    # the two oldest images went to the archive, the four newer ones stay inline
    assert [m.images[0].data for m in result.history if m.images] == [shot + str(i) for i in range(2, 6)]
    assert_nothing_lost_strict(history, result.history, store, with_arguments=True)


def test_recover_level1_halves_the_tool_limits_for_the_session() -> None:
    history = [*conversation(2), Message.assistant(digits(8_000)), Message.user("go on")]
    result = run_recover(history, payload_failure(), 1)
    assert result.level == 1 and result.changed
    assert (result.tool_result_budget_chars, result.tool_result_max_chars) == (100_000, 10_000)


def test_recover_reports_unchanged_when_nothing_changed() -> None:
    result = run_recover(conversation(2), overflow_failure(), 1)
    assert not result.changed and result.history == conversation(2)


def test_recover_never_mutates_its_input_and_loses_nothing(
    assert_nothing_lost_strict: Callable[..., None],
) -> None:
    history = [*conversation(12, size=2_000), Message.assistant(digits(9_000)), Message.user("next")]
    snapshot = copy.deepcopy(history)
    store = MemoryArchive()
    result = run_recover(history, payload_failure(), 3, ctx=context(archive=store))
    assert history == snapshot
    assert result.level == 3
    assert_nothing_lost_strict(history, result.history, store, with_arguments=True)


def test_malformed_history_gets_pairing_repair_only() -> None:
    history = [Message.user("go"), Message.assistant(tool_calls=[ToolCall("a", "ls")]), Message.user("?")]
    repaired, changed = repair_malformed(history, MemoryArchive())
    assert changed
    assert [m.role for m in repaired] == ["user", "assistant", "tool", "user"]


def test_repair_malformed_returns_a_valid_history_unchanged() -> None:
    history = conversation(2)
    repaired, changed = repair_malformed(history, MemoryArchive())
    assert repaired is history and not changed


# -- pre-flight (§7) -------------------------------------------------------------------------


def test_preflight_near_the_configured_cap_forces_ratio_040() -> None:
    model = GatewayModel(configured_cap=5 * MIB)
    result = preflight(int(4.5 * MIB), model, DEFAULT_POLICY)
    assert result.budget_ratio_override == 0.40
    assert result.notice is not None and result.notice.message == PREFLIGHT % ("4.5 MB", 90, "5.0 MB")
    assert preflight(int(4.25 * MIB), model, DEFAULT_POLICY).budget_ratio_override is None  # exactly 85%


def test_preflight_uses_the_learned_cap_and_says_learned() -> None:
    model = GatewayModel().judge(payload_failure(), request_bytes=REJECTED, policy=DEFAULT_POLICY).model
    result = preflight(90_000, model, DEFAULT_POLICY)
    assert result.budget_ratio_override == 0.40
    assert result.notice is not None
    assert result.notice.message == PREFLIGHT_LEARNED % ("87.9 KB", 92, "94.8 KB")


def test_preflight_says_configured_when_the_configured_cap_is_the_tighter_one() -> None:
    model = GatewayModel(configured_cap=80_000)
    model = model.judge(payload_failure(), request_bytes=REJECTED, policy=DEFAULT_POLICY).model
    assert model.learned_cap == 97_075 and model.effective_cap == 80_000
    result = preflight(75_000, model, DEFAULT_POLICY)
    assert result.notice is not None and result.notice.message == PREFLIGHT % ("73.2 KB", 93, "78.1 KB")


def test_preflight_applies_its_85_percent_to_the_room_beyond_the_base() -> None:
    # SPEC §11 decision: a 101.5 KB base under a 122 KB cap leaves 20.5 KB of room; 85% of the
    # cap (103.7 KB) would be exceeded by every request, 85% of the room only by real growth.
    cap, base = 122_000, 101_500
    model = GatewayModel(configured_cap=cap)
    assert preflight(110_000, model, DEFAULT_POLICY, base_bytes=base).notice is None
    assert preflight(base + int(0.85 * (cap - base)), model, DEFAULT_POLICY, base_bytes=base).notice is None
    near = preflight(base + int(0.85 * (cap - base)) + 1, model, DEFAULT_POLICY, base_bytes=base)
    assert near.budget_ratio_override == 0.40 and near.notice is not None
    assert preflight(110_000, model, DEFAULT_POLICY).notice is not None  # without a base: §7's 85% of the cap


def test_preflight_without_cap_warns_once_per_session() -> None:
    model = GatewayModel()
    assert preflight(2 * MIB, model, DEFAULT_POLICY) == preflight(2 * MIB, model, DEFAULT_POLICY)
    first = preflight(3 * MIB, model, DEFAULT_POLICY)
    assert first.budget_ratio_override is None
    assert first.notice is not None and first.notice.message == UNCAPPED % "3.0 MB"
    assert preflight(4 * MIB, first.gateway, DEFAULT_POLICY).notice is None
    assert first.gateway.uncapped_warning_sent and not model.uncapped_warning_sent
    assert preflight(3 * MIB, GatewayModel(), DEFAULT_POLICY).notice is not None  # another session


def test_preflight_rejects_negative_sizes() -> None:
    with pytest.raises(ConfigError, match="preflight needs"):
        preflight(-1, GatewayModel(), DEFAULT_POLICY)


# -- session isolation -----------------------------------------------------------------------


def test_32_concurrent_sessions_learn_their_own_caps() -> None:
    barrier = threading.Barrier(32)
    defaults = dataclasses.asdict(DEFAULT_POLICY)

    def session(i: int) -> tuple[int, int, int]:
        model = GatewayModel()
        barrier.wait()
        for _ in range(20):
            size = 400_000 + i * 1_000
            model = model.judge(payload_failure(size), request_bytes=size, policy=DEFAULT_POLICY).model
        result = run_recover(level1_history(), payload_failure(400_000 + i * 1_000), 1, payload_notice=True)
        return (
            model.effective_cap,
            result.tool_result_max_chars,
            sum(m.content.count(PAYLOAD_MARKER) for m in result.history),
        )

    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(session, range(32)))
    assert [cap for cap, _, _ in results] == [(400_000 + i * 1_000) * 3 // 4 for i in range(32)]
    assert all(limit == 10_000 and notices == 1 for _, limit, notices in results)
    assert dataclasses.asdict(DEFAULT_POLICY) == defaults and Policy() == DEFAULT_POLICY
    assert (tool_budget.DEFAULT_TURN_BUDGET_CHARS, tool_budget.DEFAULT_MAX_RESULT_CHARS) == (200_000, 20_000)
    assert "CHATCLI_MAX_PAYLOAD" not in os.environ


# -- which message a content block names (SPEC §11) -----------------------------------------------------


def test_a_content_block_names_the_newest_message_of_the_conversation_never_the_librarys_own() -> None:
    store = MemoryArchive()
    sql = "SELECT id FROM users WHERE email = '' OR 1=1 --"
    conversation = [
        Message.system("sys"),
        Message.user("look at the slow query log"),
        Message.assistant("", [ToolCall("q", "read_log", "{}")]),
        Message.tool("q", "log:\n" + sql),
        Message.assistant("cut off mid-answer"),
    ]
    library = [
        Message.user(CONTINUATION_TEXT),  # SPEC §8
        Message.user("[CONTEXT TRUNCATED: 3 messages removed]", is_summary=True, summary_of=3),
        Message.user(PAYLOAD_NOTICE),  # SPEC §6.6
    ]
    history = [*conversation, *library]
    assert newest_conversation_message(history) == 4
    error = content_block_error(
        history, "anthropic", request_bytes=900, largest_accepted=1_000, failure=None, attempts=0
    )
    assert error.message_index == 4 and "(#4, assistant message, " in str(error)
    # Once set aside, the stub is the library's too: the next guess is the message before it.
    aside, _ = set_aside(history, 4, archive=store)
    assert is_library_message(aside[4]) and newest_conversation_message(aside) == 3
    # A stub that keeps its tool calls still carries their arguments: it stays a suspect.
    calls, _ = set_aside(history, 2, archive=store)
    assert not is_library_message(calls[2])
    # Nothing but the library's own: the newest message, as before.
    assert newest_conversation_message([Message.system("sys"), Message.user(PAYLOAD_NOTICE)]) == 1
    assert newest_conversation_message([]) == -1


def test_the_last_rung_keeps_no_inline_image_so_a_window_smaller_than_the_kept_images_still_recovers() -> (
    None
):
    """The ladder's last attempt keeps the last 4 messages; their screenshots can alone exceed the window
    (5 full-screen captures ≈ 8,000 tokens on Anthropic). Archived behind their notes, recallable, they no
    longer weigh on the retry (issue 26, anthropic-200k-overflow × screens-600k)."""
    shot = Image(data="iVBORw0KGgoAAAANSUhEUgAACgAAAAWgCAIAAAD" + "A" * 40_000)
    history = [Message.user("fix the layout", images=(shot,))]
    for turn in range(4):
        history += [Message.assistant(f"step {turn}"), Message.user(f"now this one {turn}", images=(shot,))]
    archive = MemoryArchive()
    ladder = RecoveryLadder.default(DEFAULT_POLICY)
    ctx = RecoveryContext.from_policy(DEFAULT_POLICY, archive)
    result = recover(history, Failure(FailureKind.CONTEXT_OVERFLOW), len(ladder), ladder=ladder, ctx=ctx)
    assert [m for m in result.history if m.images] == []
    notes = [key for m in result.history for key in extract_keys(m.content)]
    assert any(
        recall(archive, f"<<ccr:{key}>>").found.get(key, "").endswith(shot.data or "") for key in notes
    )
