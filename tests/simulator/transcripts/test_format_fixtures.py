"""The committed format fixtures: one file per foreign format, loaded and replayed on every checkout.

``fixtures/transcripts/formats/`` holds files this project wrote in each supported format
(built by ``format_fixtures.py`` beside this test). These tests never skip: they are the
loader and replay tests a clone without ``../shared`` runs; the real public transcripts in
``../shared/transcripts`` stay an extra layer in ``test_loaders.py``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ctxrecover.messages import Image, ToolCall
from simulator.replay import replay
from simulator.transcripts.loaders import FORMATS, TranscriptError, load_runs, load_transcript, write_jsonl
from simulator.workloads import (
    FORMAT_FIXTURES_DIR,
    bundled_transcripts,
    find_transcript,
    load_named_transcript,
)

BUILDER = Path(__file__).with_name("format_fixtures.py")


def _builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("format_fixtures", BUILDER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FIXTURES: dict[str, tuple[str, Any]] = _builder().FIXTURES
TAU = "tau-bench-bookshop.json"
SWE_FC = "swe-agent-fc-ledgerline.traj"
SWE_NOFC = "swe-agent-nofc-quiet-rotation.traj"
CLAUDE = "claude-code-tidy-dry-run.jsonl"
OPENAI = "openai-chat-porto-trip.json"
ANTHROPIC = "anthropic-messages-hero-image.json"


def path(name: str) -> Path:
    return FORMAT_FIXTURES_DIR / name


def raw(name: str) -> Any:
    return json.loads(path(name).read_text(encoding="utf-8"))


def events(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path(name).read_text(encoding="utf-8").splitlines()]


# -- the files ---------------------------------------------------------------------------------------------


def test_the_committed_files_are_exactly_what_the_builder_writes() -> None:
    built = _builder().build()

    assert sorted(p.name for p in FORMAT_FIXTURES_DIR.iterdir()) == sorted(built)
    stale = [name for name, data in built.items() if path(name).read_bytes() != data]
    assert stale == [], "regenerate with: python tests/simulator/transcripts/format_fixtures.py"


def test_every_foreign_format_has_a_fixture() -> None:
    covered = {fmt for fmt, _build in FIXTURES.values()}

    assert covered == set(FORMATS) - {"jsonl"}  # our own JSONL: the synthetic sessions one folder up
    assert {"swe-agent"} == {FIXTURES[SWE_FC][0], FIXTURES[SWE_NOFC][0]}


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_each_fixture_is_detected_as_its_format_and_found_by_name(name: str) -> None:
    fmt = FIXTURES[name][0]
    runs = load_runs(path(name))

    assert {t.format for t in runs} == {fmt}
    assert all(t.source_path == str(path(name)) and t.messages for t in runs)
    assert find_transcript(Path(name).stem) == path(name)
    assert Path(name).stem in bundled_transcripts()


# -- counts read from the raw documents ----------------------------------------------------------------


def test_tau_bench_runs_keep_every_message_and_their_task_metadata() -> None:
    document = raw(TAU)
    runs = load_runs(path(TAU))

    assert len(runs) == len(document) == 3
    for index, (run, loaded) in enumerate(zip(document, runs, strict=True)):
        assert loaded.name == f"tau-bench-bookshop.run{index:03d}"
        assert [m.role for m in loaded.messages] == [m["role"] for m in run["traj"]]
        assert [m.content for m in loaded.messages] == [m["content"] or "" for m in run["traj"]]
        assert (loaded.metadata["task_id"], loaded.metadata["reward"], loaded.metadata["trial"]) == (
            run["task_id"],
            run["reward"],
            run["trial"],
        )
    assert load_transcript(path(TAU), run=1) == runs[1]
    assert load_named_transcript("tau-bench-bookshop") == runs[0]  # replays take the first run


def test_tau_bench_tool_results_pair_with_the_call_before_them() -> None:
    for transcript in load_runs(path(TAU)):
        open_ids: set[str] = set()
        for message in transcript.messages:
            open_ids |= {call.id for call in message.tool_calls}
            if message.role == "tool":
                assert message.tool_call_id in open_ids and message.name


def test_tau_bench_without_run_says_how_to_pick_one_and_rejects_a_bad_index() -> None:
    with pytest.raises(TranscriptError) as info:
        load_transcript(path(TAU))
    assert str(info.value) == f"{path(TAU)}: holds 3 tau-bench runs: pass run=N (0-2) or call load_runs()"
    with pytest.raises(TranscriptError, match=r"run=3 is out of range: the file holds runs 0-2"):
        load_transcript(path(TAU), run=3)
    with pytest.raises(
        TranscriptError, match="run=0 applies only to multi-run tau-bench files, this one is swe-agent"
    ):
        load_transcript(path(SWE_FC), run=0)


def test_swe_agent_function_calling_maps_call_ids_and_keeps_content_exact() -> None:
    history = raw(SWE_FC)["history"]
    loaded = load_transcript(path(SWE_FC))

    assert [m.content for m in loaded.messages] == [h["content"] for h in history]
    assert any("\r\n" in m.content for m in loaded.messages)  # terminal output keeps its CRLF
    for entry, message in zip(history, loaded.messages, strict=True):
        if entry["role"] == "tool":
            assert message.tool_call_id == entry["tool_call_ids"][0]
        if entry.get("tool_calls"):
            calls = [
                (c["id"], c["function"]["name"], c["function"]["arguments"]) for c in entry["tool_calls"]
            ]
            assert message.tool_calls == tuple(ToolCall(*call) for call in calls)
    assert sum(len(m.tool_calls) for m in loaded.messages) == sum(h["role"] == "tool" for h in history) > 10
    assert loaded.metadata == {"exit_status": "submitted", "submission": raw(SWE_FC)["info"]["submission"]}


def test_swe_agent_older_format_marks_observations_but_not_the_demonstration_as_feedback() -> None:
    history = raw(SWE_NOFC)["history"]
    loaded = load_transcript(path(SWE_NOFC))

    assert not any(m.tool_calls for m in loaded.messages)
    users = [(entry, m) for entry, m in zip(history, loaded.messages, strict=True) if m.role == "user"]
    demo, task, *observations = users
    assert demo[0]["is_demo"] and not demo[1].agent_feedback and not task[1].agent_feedback
    assert observations and all(m.agent_feedback for _entry, m in observations)
    assert loaded.metadata["exit_status"] == "submitted"


def test_claude_code_merges_the_block_events_of_one_api_message() -> None:
    lines = events(CLAUDE)
    main_ids = list(
        dict.fromkeys(e["message"]["id"] for e in lines if e["type"] == "assistant" and not e["isSidechain"])
    )
    loaded = load_transcript(path(CLAUDE))

    assistants = [m for m in loaded.messages if m.role == "assistant"]
    assert len(assistants) == len(main_ids) < sum(e["type"] == "assistant" for e in lines)
    parallel = [m for m in assistants if len(m.tool_calls) > 1]
    assert [[c.name for c in m.tool_calls] for m in parallel] == [["Read", "Read"]]
    assert assistants[0].content == "I'll look at the CLI and its tests first." and assistants[0].tool_calls
    assert loaded.metadata["skipped_events"] == {"queue-operation": 1, "sidechain": 2}
    assert loaded.metadata["session_id"] == lines[0]["sessionId"]
    assert loaded.metadata["model"] == "claude-sonnet-4-20250514"


def test_claude_code_tool_results_follow_their_calls_with_errors_and_hook_feedback() -> None:
    loaded = load_transcript(path(CLAUDE))

    pending: list[str] = []
    for message in loaded.messages:
        if message.tool_calls:
            pending = [c.id for c in message.tool_calls]
        elif message.role == "tool":
            assert message.tool_call_id == pending.pop(0)
    tools = [m for m in loaded.messages if m.role == "tool"]
    errors = [m for m in tools if m.is_error]
    assert len(errors) == 1 and "1 failed, 2 passed" in errors[0].content
    assert any(m.content.endswith("has been updated.") for m in tools)  # a list-of-blocks result
    (feedback,) = [m for m in loaded.messages if m.agent_feedback]
    assert feedback.role == "user" and feedback.content.startswith("Stop hook feedback:")


def test_openai_chat_request_keeps_parts_images_and_parallel_calls() -> None:
    loaded = load_transcript(path(OPENAI))

    system, user, calls, *rest = loaded.messages
    assert (system.role, loaded.metadata) == ("system", {"model": "gpt-4o-2024-08-06"})
    assert user.images[0].data and user.images[1] == Image(
        url="https://example.org/tickets/ap-140-return.jpg"
    )
    assert [c.name for c in calls.tool_calls] == ["get_forecast", "search_trains"]
    assert json.loads(calls.tool_calls[1].arguments)["from"] == "Lisboa Santa Apolónia"
    assert [m.name for m in rest[:2]] == ["get_forecast", "search_trains"]
    assert loaded.messages[-1].content.startswith("I can't book tickets myself")


def test_anthropic_request_splits_tool_results_and_drops_thinking() -> None:
    loaded = load_transcript(path(ANTHROPIC))

    roles = [m.role for m in loaded.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user", "assistant", "tool", "assistant"]
    assert loaded.messages[0].system_parts and "Vite" in loaded.messages[0].content
    assert "Dev vs production" not in "".join(m.content for m in loaded.messages)  # thinking is skipped
    screenshot = loaded.messages[4]
    assert screenshot.images and screenshot.content.startswith("Screenshot of")
    assert loaded.messages[7].is_error and loaded.messages[5].content == "That's what I see too."


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_every_fixture_round_trips_through_our_jsonl(name: str, tmp_path: Path) -> None:
    original = load_runs(path(name))[0]
    write_jsonl(original, tmp_path / "copy.jsonl")

    copy = load_transcript(tmp_path / "copy.jsonl")
    assert (copy.messages, copy.sha256) == (original.messages, original.sha256)
    assert copy.metadata == original.metadata


# -- replays --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_every_fixture_replays_behind_the_corporate_waf_losslessly(name: str) -> None:
    result = replay(load_named_transcript(Path(name).stem), "corporate-128k-waf")

    assert result.chars_lost == 0 and result.divergences == 0
    assert result.turns_completed == result.turns > 0
    assert result.outcome in ("ok", "recovered")


@pytest.mark.parametrize(
    ("scenario", "name"), [("anthropic-200k-overflow", SWE_NOFC), ("gemini-1m-overflow", SWE_FC)]
)
def test_the_overflow_scenarios_overflow_their_committed_workload_mid_run(scenario: str, name: str) -> None:
    result = replay(None, scenario)

    assert result.transcript.source_path == str(path(name))
    kinds = result.failure_kinds
    assert kinds and kinds[0] == "context_overflow" and result.records[0].outcome == "ok"
    assert result.outcome == "recovered" and result.chars_lost == 0
