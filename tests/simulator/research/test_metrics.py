"""The run schema, retention probes (chars lost, recall, facts), episodes and run summaries."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrecover.archive import MemoryArchive, archive_range, marker
from ctxrecover.messages import Message, ToolCall
from ctxrecover.passes.truncate import emergency_truncate, keep_last
from simulator.research.metrics import (
    CACHE_READ_MULTIPLIER,
    CACHE_WRITE_MULTIPLIER,
    EPISODE_COLUMNS,
    RUN_COLUMNS,
    SUMMARY_COLUMNS,
    AttemptRecord,
    episodes,
    records_to_frame,
    summarize_run,
    summary_table,
)
from simulator.research.retention import (
    chars_lost,
    fact_survival,
    recall_reachability,
    summary_growth,
    tool_pair_validity,
)
from simulator.transcripts.loaders import Fact

DESIGN_COLUMNS = (
    "run_id transcript transcript_sha256 scenario policy seed turn attempt request_bytes history_weight "
    "message_count estimated_tokens proxy_cap learned_cap context_window max_tokens outcome failure_kind "
    "compaction_level recovery_level summarizer_calls summarizer_tokens summarizer_cost_usd "
    "provider_cost_usd chars_archived chars_lost notices elapsed_ms identical_retry"
).split()


def conversation(n: int = 6) -> list[Message]:
    history = [Message.system("You are a coding agent.")]
    for i in range(n):
        history += [
            Message.user(f"request {i}: look at module_{i}.py"),
            Message.assistant(f"reading module_{i}", tool_calls=[ToolCall(f"c{i}", "read", f'{{"n": {i}}}')]),
            Message.tool(f"c{i}", f"contents of module_{i}.py\n" + f"line {i}\n" * 50),
        ]
    return history


def record(turn: int, attempt: int, outcome: str, **fields: object) -> AttemptRecord:
    base: dict[str, object] = {
        "run_id": "r1",
        "transcript": "demo",
        "transcript_sha256": "ab" * 32,
        "scenario": "waf",
        "policy": "default",
        "seed": 7,
        "turn": turn,
        "attempt": attempt,
        "request_bytes": 1000,
        "estimated_tokens": 250,
    }
    return AttemptRecord(**(base | {"outcome": outcome} | fields))  # type: ignore[arg-type]


# -- schema ---------------------------------------------------------------------------------------
def test_run_columns_are_the_design_schema_in_order() -> None:
    assert list(RUN_COLUMNS) == DESIGN_COLUMNS
    assert [f.name for f in dataclasses.fields(AttemptRecord)] == DESIGN_COLUMNS
    assert all(meaning for _dtype, meaning in RUN_COLUMNS.values())


def test_attempt_record_is_frozen_and_converts_to_a_row_in_column_order() -> None:
    rec = record(0, 1, "ok")
    assert list(rec.to_row()) == DESIGN_COLUMNS
    assert rec.to_row()["outcome"] == "ok"
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.turn = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    "outcome",
    [
        "ok",
        "rejected:payload_too_large",
        "recovered@L1",
        "recovered@L3",
        "failed",
        "fail_fast_floor",
        "truncated",
    ],
)
def test_attempt_record_accepts_every_documented_outcome(outcome: str) -> None:
    assert record(0, 1, outcome).outcome == outcome


@pytest.mark.parametrize("outcome", ["OK", "rejected:", "recovered@L4", "recovered", "dropped"])
def test_attempt_record_rejects_unknown_outcomes_naming_the_attempt(outcome: str) -> None:
    expected = r"is not one of ok, rejected:<kind>.*\(run 'r1', turn 2, attempt 1\)"
    with pytest.raises(ValueError, match=expected):
        record(2, 1, outcome)


def test_attempts_are_one_based() -> None:
    with pytest.raises(ValueError, match="attempts are 1-based"):
        record(0, 0, "ok")


def test_records_to_frame_has_the_declared_dtypes() -> None:
    first = record(0, 1, "ok", proxy_cap=5_000_000, notices="ℹ a\nℹ b")
    frame = records_to_frame([first, record(1, 1, "ok")])
    assert list(frame.columns) == DESIGN_COLUMNS
    assert {name: str(dtype) for name, dtype in frame.dtypes.items()} == {
        name: dtype for name, (dtype, _) in RUN_COLUMNS.items()
    }
    assert frame["proxy_cap"].tolist() == [5_000_000, pd.NA]
    assert frame["failure_kind"].isna().all()
    assert frame.loc[0, "notices"] == "ℹ a\nℹ b"


def test_records_to_frame_of_no_records_is_an_empty_typed_frame() -> None:
    frame = records_to_frame([])
    assert frame.empty and list(frame.columns) == DESIGN_COLUMNS
    assert str(frame["identical_retry"].dtype) == "bool"


# -- chars lost ------------------------------------------------------------------------------------
def every_char(messages: list[Message]) -> int:
    """All the chars the ledger accounts for: roles, contents, call ids, tool names, arguments."""
    return sum(
        len(m.role)
        + len(m.content)
        + len(m.tool_call_id or "")
        + sum(len(c.id) + len(c.name) + len(c.arguments) for c in m.tool_calls)
        for m in messages
    )


def test_nothing_is_lost_when_a_dropped_range_is_archived_and_referenced() -> None:
    original = conversation()
    store = MemoryArchive()
    key = archive_range(store, original[1:-3])
    final = [original[0], Message.user(f"[dropped; recall {marker(key)}]"), *original[-3:]]
    assert chars_lost(original, final, store) == 0


def test_texts_concatenated_into_one_entry_are_not_their_occurrences() -> None:
    # the substring check this replaces counted these as kept: the ledger counts occurrences
    original = conversation()
    store = MemoryArchive()
    key = store.put("".join(m.content + "".join(c.arguments for c in m.tool_calls) for m in original[1:-3]))
    final = [original[0], Message.user(f"[dropped; recall {marker(key)}]"), *original[-3:]]
    # roles are counted per role name: the stub's "user" stands in for one dropped user message's role
    assert chars_lost(original, final, store) == every_char(original[1:-3]) - len("user")


def test_the_library_truncation_passes_lose_nothing() -> None:
    original = conversation()
    store = MemoryArchive()
    truncated, _ = emergency_truncate(original, 3, archive=store)
    assert chars_lost(original, truncated, store) == 0
    kept, _ = keep_last(original, 2, archive=store, per_message_cap=400)
    assert chars_lost(original, kept, store) == 0


def test_an_archived_entry_no_marker_reaches_counts_as_lost() -> None:
    original = conversation(2)
    store = MemoryArchive()
    for msg in original[1:4]:
        store.put(msg.content)
    final = [original[0], *original[4:]]
    assert chars_lost(original, final, store) == every_char(original[1:4])


def test_simply_dropped_content_is_lost_whole() -> None:
    original = conversation(2)
    head_only = original[-1].with_content(original[-1].content[:20])
    final = [*original[:-1], head_only]
    assert chars_lost(original, final, MemoryArchive()) == len(original[-1].content)
    assert chars_lost(original, original[:-1], None) == every_char(original[-1:])


def test_dropped_tool_call_arguments_count_as_lost() -> None:
    original = conversation(1)
    final = [*original[:2], original[2].replace(tool_calls=(ToolCall("c0", "read", "{}"),)), original[3]]
    assert chars_lost(original, final, None) == len('{"n": 0}')


def test_markers_are_followed_transitively() -> None:
    original = conversation(2)
    store = MemoryArchive()
    inner = store.put(original[3].content)
    outer = store.put(f"[round 1 stub of the result {marker(inner)}]")
    final = [*original[:3], original[3].with_content(f"[round 2 stub {marker(outer)}]"), *original[4:]]
    assert chars_lost(original, final, store) == 0
    broken = MemoryArchive()
    broken.put(original[3].content)
    outer_only = broken.put(f"[round 1 stub of the result {marker('0' * 16)}]")
    final = [*original[:3], original[3].with_content(f"[round 2 stub {marker(outer_only)}]"), *original[4:]]
    assert chars_lost(original, final, broken) == len(original[3].content)


@settings(max_examples=40)
@given(st.lists(st.sampled_from(["kept", "archived", "orphaned", "dropped"]), min_size=1, max_size=12))
def test_chars_lost_counts_exactly_the_unreachable_messages(fates: list[str]) -> None:
    original = [Message.user(f"message number {i}: " + "payload " * (i + 1)) for i in range(len(fates))]
    store = MemoryArchive()
    final: list[Message] = []
    expected = 0
    for msg, fate in zip(original, fates, strict=True):
        if fate == "kept":
            final.append(msg)
        elif fate == "archived":
            final.append(Message.user(f"[stub {marker(store.put(msg.content))}]"))
        else:
            expected += len("user") + len(msg.content)
            if fate == "orphaned":
                store.put(msg.content)
    assert chars_lost(original, final, store) == expected


def test_chars_lost_on_a_five_megabyte_transcript() -> None:
    block = "".join(f"row {n}: some tool output with numbers {n * 7}\n" for n in range(100))
    original = [Message.system("sys")]
    for i in range(1000):
        original += [
            Message.user(f"ask {i}"),
            Message.assistant(f"answer {i}\n{block}"),
            Message.user(f"{i}\n{block}"),
        ]
    assert sum(len(m.content) for m in original) > 5_000_000
    store = MemoryArchive()
    truncated, _ = emergency_truncate(original, 4, archive=store)
    assert chars_lost(original, truncated, store) == 0
    assert chars_lost(original, truncated[:1], store) == every_char(original[1:])
    escaped = store.put(json.dumps([m.content for m in original[1:]]))  # one entry, escaped newlines
    final = [original[0], Message.user(f"[archived as JSON {marker(escaped)}]")]
    assert chars_lost(original, final, store) == every_char(original[1:]) - len("user")


# -- recall and facts ------------------------------------------------------------------------------
def test_recall_reachability_is_the_share_of_markers_that_resolve() -> None:
    store = MemoryArchive()
    good = store.put("archived text")
    final = [Message.user(f"see {marker(good)} and {marker('f' * 16)}"), Message.assistant(marker(good))]
    assert recall_reachability(final, store) == 0.5
    assert recall_reachability([Message.user("no markers")], store) == 1.0
    assert recall_reachability(final, None) == 0.0


def test_fact_survival_counts_facts_in_the_history_or_recallable_from_it() -> None:
    store = MemoryArchive()
    reachable = store.put("the ticket is JIRA-4242")
    store.put("the error was E_UNREACHABLE_77")
    final = [Message.user(f"path src/app.py; more via {marker(reachable)}")]
    facts = [
        Fact("path", "src/app.py", 0),
        Fact("ticket", "JIRA-4242", 1),
        Fact("error", "E_UNREACHABLE_77", 2),
        Fact("error", "never archived", 3),
    ]
    assert fact_survival(facts, final, store) == 0.5
    assert fact_survival([], final, store) == 1.0


def test_tool_pair_validity_uses_the_pairing_validator() -> None:
    history = conversation(1)
    assert tool_pair_validity(history) is True
    assert tool_pair_validity(history[:-1]) is False
    assert tool_pair_validity(tuple(history)) is True


def test_summary_growth_is_last_over_first() -> None:
    assert summary_growth([1000, 1200, 1500]) == 1.5
    assert summary_growth([800]) == 1.0
    assert summary_growth([]) == 1.0
    with pytest.raises(ValueError, match="first summary is empty"):
        summary_growth([0, 10])
    with pytest.raises(ValueError, match="char counts"):
        summary_growth([10, -1])


# -- episodes --------------------------------------------------------------------------------------
def run_records() -> list[AttemptRecord]:
    return [
        record(0, 1, "ok"),
        record(1, 1, "rejected:payload_too_large", failure_kind="payload_too_large"),
        record(
            1,
            2,
            "rejected:payload_too_large",
            failure_kind="payload_too_large",
            recovery_level=1,
            identical_retry=True,
        ),
        record(1, 3, "recovered@L2", recovery_level=2, compaction_level=3, chars_archived=500),
        record(2, 1, "rejected:context_overflow", failure_kind="context_overflow"),
        record(2, 2, "failed", failure_kind="context_overflow", recovery_level=3),
        record(3, 1, "truncated", failure_kind="output_truncated"),
        record(3, 2, "ok"),
        record(4, 1, "fail_fast_floor", failure_kind="payload_too_large"),
        record(5, 1, "rejected:waf_rejection"),
        record(5, 2, "rejected:waf_rejection", identical_retry=True),
    ]


def test_episodes_group_consecutive_rejections_of_a_turn() -> None:
    table = episodes(records_to_frame(run_records()))
    assert {name: str(dtype) for name, dtype in table.dtypes.items()} == dict(EPISODE_COLUMNS)
    rows = table.astype(object).where(table.notna(), None).to_dict("records")
    assert rows == [
        {
            "run_id": "r1",
            "turn": 1,
            "first_failure_kind": "payload_too_large",
            "rejected_requests": 2,
            "wasted_retries": 1,
            "recovered": True,
            "final_level": 2,
        },
        {
            "run_id": "r1",
            "turn": 2,
            "first_failure_kind": "context_overflow",
            "rejected_requests": 2,
            "wasted_retries": 0,
            "recovered": False,
            "final_level": 3,
        },
        {
            "run_id": "r1",
            "turn": 4,
            "first_failure_kind": "payload_too_large",
            "rejected_requests": 1,
            "wasted_retries": 0,
            "recovered": False,
            "final_level": None,
        },
        {
            "run_id": "r1",
            "turn": 5,
            "first_failure_kind": "waf_rejection",
            "rejected_requests": 2,
            "wasted_retries": 1,
            "recovered": False,
            "final_level": None,
        },
    ]


def test_an_episode_ends_at_its_recovery_level_never_at_a_planned_compaction_step() -> None:
    frame = records_to_frame(
        [
            record(0, 1, "rejected:context_overflow", failure_kind="context_overflow"),
            record(0, 2, "failed", failure_kind="context_overflow", compaction_level=3),
            record(1, 1, "rejected:context_overflow", failure_kind="context_overflow"),
            record(1, 2, "failed", failure_kind="context_overflow", recovery_level=1, compaction_level=3),
        ]
    )
    assert episodes(frame)["final_level"].astype(object).where(lambda s: s.notna(), None).tolist() == [
        None,
        1,
    ]


def test_episodes_keep_runs_apart() -> None:
    other = [dataclasses.replace(r, run_id="r2") for r in run_records()[:4]]
    table = episodes(records_to_frame([*run_records()[:2], *other, *run_records()[2:4]]))
    assert table[["run_id", "turn", "rejected_requests", "recovered"]].values.tolist() == [
        ["r2", 1, 2, True],
        ["r1", 1, 2, True],
    ]


# -- run summaries ---------------------------------------------------------------------------------
def test_summarize_run_counts_failures_episodes_bytes_and_costs() -> None:
    records = [dataclasses.replace(r, summarizer_cost_usd=0.01, provider_cost_usd=0.1) for r in run_records()]
    summary = summarize_run(records_to_frame(records))
    assert summary | {"input_cost_usd": None, "cache_adjusted_cost_usd": None} == {
        "run_id": "r1",
        "transcript": "demo",
        "scenario": "waf",
        "policy": "default",
        "seed": 7,
        "turns": 6,
        "attempts": 11,
        "failures_by_kind": {"context_overflow": 1, "payload_too_large": 2, "waf_rejection": 1},
        "recovered_episodes": 1,
        "failed_episodes": 3,
        "rejected_requests": 7,
        "wasted_retries": 2,
        "wire_bytes": 11_000,
        "summarizer_calls": 0,
        "summarizer_cost_usd": pytest.approx(0.11),
        "provider_cost_usd": pytest.approx(1.1),
        "input_cost_usd": None,
        "cache_adjusted_cost_usd": None,
        "cache_rebuilds": 2,  # after the recovery on turn 1 and the failed compaction on turn 2
        "chars_archived": 500,
        "chars_lost": 0,
    }


def test_chars_lost_passed_in_overrides_the_column() -> None:
    frame = records_to_frame([record(0, 1, "ok", chars_lost=3), record(1, 1, "ok", chars_lost=5)])
    assert summarize_run(frame)["chars_lost"] == 5
    assert summarize_run(frame, chars_lost=42)["chars_lost"] == 42


def test_cache_adjusted_cost_pays_a_full_rewrite_after_each_compaction() -> None:
    frame = records_to_frame(
        [
            record(0, 1, "ok", estimated_tokens=1000),
            record(1, 1, "ok", estimated_tokens=2000),
            record(2, 1, "rejected:context_overflow", estimated_tokens=9000),
            record(2, 2, "recovered@L1", estimated_tokens=500, recovery_level=1),
            record(3, 1, "ok", estimated_tokens=800),
        ]
    )
    summary = summarize_run(frame, input_price_per_mtok=1_000_000.0)  # 1 USD per token
    write, read = CACHE_WRITE_MULTIPLIER, CACHE_READ_MULTIPLIER
    assert summary["input_cost_usd"] == pytest.approx(1000 + 2000 + 500 + 800)
    assert summary["cache_adjusted_cost_usd"] == pytest.approx(
        1000 * write + (1000 * read + 1000 * write) + 500 * write + (500 * read + 300 * write)
    )
    assert summary["cache_rebuilds"] == 1


def test_summarize_run_refuses_several_runs() -> None:
    frame = records_to_frame([record(0, 1, "ok"), dataclasses.replace(record(0, 1, "ok"), run_id="r2")])
    with pytest.raises(ValueError, match="summarize_run takes one run, got 2 run_ids"):
        summarize_run(frame)


def test_summary_table_totals_runs_per_scenario() -> None:
    run1 = run_records()
    run2 = [dataclasses.replace(r, run_id="r2") for r in run1[:4]]
    run3 = [dataclasses.replace(r, run_id="r3", scenario="clean") for r in run1[:1]]
    table = summary_table([records_to_frame(run1 + run2), summarize_run(records_to_frame(run3))])
    assert list(table.columns) == list(SUMMARY_COLUMNS)
    assert list(table.index) == ["waf", "clean"]
    waf = table.loc["waf"]
    assert (waf["runs"], waf["turns"], waf["recovered"], waf["failed"]) == (2, 8, 2, 3)
    assert waf["failures_by_kind"] == "context_overflow=1, payload_too_large=3, waf_rejection=1"
    assert (waf["rejected_requests"], waf["wire_bytes"]) == (9, 15_000)
    assert table.loc["clean", "failures_by_kind"] == ""


def test_summary_table_takes_one_frame_and_rejects_other_things() -> None:
    assert list(summary_table(records_to_frame(run_records())).index) == ["waf"]
    with pytest.raises(TypeError, match="must be DataFrames or summarize_run dicts, got int"):
        summary_table([1])
