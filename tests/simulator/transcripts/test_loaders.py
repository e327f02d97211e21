"""Transcript loaders: every supported format, clear errors, exact round trips."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrecover.messages import Image, Message, ToolCall
from simulator.transcripts.loaders import (
    FORMATS,
    Fact,
    Transcript,
    TranscriptError,
    load_runs,
    load_transcript,
    transcript_chars,
    transcript_from_messages,
    write_jsonl,
)

REPO = Path(__file__).resolve().parents[3]
# The real public sessions: an extra layer where they are present (CI lays ../shared beside the clone;
# CTXRECOVER_SHARED_TRANSCRIPTS points elsewhere). The committed format fixtures, tested in
# test_format_fixtures.py, cover every format on every clone.
SHARED = Path(os.environ.get("CTXRECOVER_SHARED_TRANSCRIPTS") or REPO / "../shared/transcripts")
needs_shared = pytest.mark.skipif(
    not SHARED.is_dir(), reason="real transcripts live in ../shared/transcripts (not shipped with the repo)"
)

TAU = "taubench__gpt-4o-airline.json"
SWE_FC_REPLACE = "sweagent-fc-replace-from-source__marshmallow-code__marshmallow-1867.traj"
SWE_FC = "sweagent-fc__marshmallow-code__marshmallow-1867.traj"
SWE_CTF = "sweagent-ctf__i_got_id_demo.traj"
CLAUDE_COVERAGE = "claudereliability-coverage-test-fix__transcript.jsonl"
CLAUDE_STOP = "claudereliability-stop-hook-reflection-first-stop__transcript.jsonl"

# file: (format, runs, messages, tool calls, tool messages, agent_feedback messages)
SHARED_EXPECTED = {
    TAU: ("tau-bench", 200, 5_308, 1_164, 1_164, 0),
    SWE_FC_REPLACE: ("swe-agent", 1, 28, 13, 13, 0),
    SWE_FC: ("swe-agent", 1, 24, 11, 11, 0),
    SWE_CTF: ("swe-agent", 1, 43, 0, 0, 20),
    CLAUDE_COVERAGE: ("claude-code", 1, 30, 13, 13, 2),
    CLAUDE_STOP: ("claude-code", 1, 12, 4, 4, 1),
}


def shared(name: str) -> Path:
    return SHARED / name


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def raw_json(name: str) -> object:
    return json.loads(shared(name).read_text(encoding="utf-8"))


# -- real transcripts ----------------------------------------------------------


@needs_shared
def test_every_shared_transcript_is_covered_by_the_expectations():
    files = {p.name for p in SHARED.iterdir() if p.is_file() and p.suffix != ".md"}
    assert files == set(SHARED_EXPECTED)


@needs_shared
@pytest.mark.parametrize("name", sorted(SHARED_EXPECTED))
def test_every_shared_transcript_loads_with_the_documented_counts(name):
    fmt, runs, messages, calls, tool_messages, feedback = SHARED_EXPECTED[name]
    loaded = load_runs(shared(name))
    assert len(loaded) == runs
    assert {t.format for t in loaded} == {fmt}
    every = [m for t in loaded for m in t.messages]
    assert len(every) == messages
    assert sum(len(m.tool_calls) for m in every) == calls
    assert sum(m.role == "tool" for m in every) == tool_messages
    assert sum(m.agent_feedback for m in every) == feedback
    assert all(t.source_path == str(shared(name)) for t in loaded)


@needs_shared
@pytest.mark.parametrize("name", sorted(set(SHARED_EXPECTED) - {TAU}))
def test_single_run_files_load_the_same_through_load_transcript(name):
    assert load_transcript(shared(name)) == load_runs(shared(name))[0]


@needs_shared
def test_tau_bench_run_is_picked_by_index_with_its_task_metadata():
    runs = raw_json(TAU)
    t = load_transcript(shared(TAU), run=17)
    assert t.name == "taubench__gpt-4o-airline.run017"
    assert t.metadata["run"] == 17
    assert (t.metadata["task_id"], t.metadata["trial"], t.metadata["reward"]) == (
        runs[17]["task_id"],
        runs[17]["trial"],
        runs[17]["reward"],
    )
    assert [m.role for m in t.messages] == [m["role"] for m in runs[17]["traj"]]
    assert [m.content for m in t.messages] == [m["content"] or "" for m in runs[17]["traj"]]


@needs_shared
def test_tau_bench_tool_results_pair_with_their_calls():
    for t in load_runs(shared(TAU)):
        open_ids: set[str] = set()
        for m in t.messages:
            open_ids |= {c.id for c in m.tool_calls}
            if m.role == "tool":
                assert m.tool_call_id in open_ids
                assert m.name


@needs_shared
def test_tau_bench_without_run_says_how_to_pick_one():
    with pytest.raises(TranscriptError) as info:
        load_transcript(shared(TAU))
    expected = "holds 200 tau-bench runs: pass run=N (0-199) or call load_runs()"
    assert str(info.value) == f"{shared(TAU)}: {expected}"


@needs_shared
def test_tau_bench_run_out_of_range_is_rejected():
    with pytest.raises(TranscriptError, match=r"run=200 is out of range: the file holds runs 0-199"):
        load_transcript(shared(TAU), run=200)


@needs_shared
def test_run_on_a_single_run_format_is_rejected():
    expected = "run=0 applies only to multi-run tau-bench files, this one is swe-agent"
    with pytest.raises(TranscriptError, match=expected):
        load_transcript(shared(SWE_FC), run=0)


@needs_shared
@pytest.mark.parametrize("name", [SWE_FC, SWE_FC_REPLACE])
def test_swe_agent_tool_calls_map_tool_call_ids_and_keep_content_exact(name):
    history = raw_json(name)["history"]
    t = load_transcript(shared(name))
    assert [m.content for m in t.messages] == [h["content"] for h in history]
    assert any("\r\n" in m.content for m in t.messages)
    for raw, msg in zip(history, t.messages, strict=True):
        if raw["role"] == "tool":
            assert msg.tool_call_id == raw["tool_call_ids"][0]
        if raw.get("tool_calls"):
            calls = [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in raw["tool_calls"]]
            assert msg.tool_calls == tuple(ToolCall(*call) for call in calls)
    assert t.metadata["exit_status"] == "submitted"


@needs_shared
def test_swe_agent_old_format_marks_observations_as_agent_feedback():
    t = load_transcript(shared(SWE_CTF))
    roles = [m.role for m in t.messages]
    first_assistant = roles.index("assistant")
    users = [(i, m) for i, m in enumerate(t.messages) if m.role == "user"]
    assert users[0][0] < first_assistant and not users[0][1].agent_feedback
    assert all(m.agent_feedback for i, m in users if i > first_assistant)


@needs_shared
def test_claude_code_merges_the_events_of_one_api_message():
    events = [json.loads(line) for line in shared(CLAUDE_COVERAGE).read_text().splitlines()]
    assistant_ids = list(dict.fromkeys(e["message"]["id"] for e in events if e["type"] == "assistant"))
    t = load_transcript(shared(CLAUDE_COVERAGE))
    assistants = [m for m in t.messages if m.role == "assistant"]
    assert len(assistants) == len(assistant_ids)
    parallel = [m for m in assistants if len(m.tool_calls) > 1]
    assert [[c.name for c in m.tool_calls] for m in parallel] == [["Read", "Read"], ["Edit", "Edit"]]
    assert parallel[1].content.startswith("I can see the structure.")
    assert t.metadata["skipped_events"] == {"queue-operation": 1}
    assert t.metadata["session_id"] == "c64cc478-3430-40fe-8e9c-4ee9986e9754"


@needs_shared
def test_claude_code_tool_results_become_tool_messages_in_call_order():
    t = load_transcript(shared(CLAUDE_COVERAGE))
    pending: list[str] = []
    for m in t.messages:
        if m.tool_calls:
            pending = [c.id for c in m.tool_calls]
        elif m.role == "tool":
            assert m.tool_call_id == pending.pop(0)
    tools = [m for m in t.messages if m.role == "tool"]
    assert [m.is_error for m in tools].count(True) == 1 and tools[-1].is_error
    feedback = [m for m in t.messages if m.agent_feedback]
    assert all(m.role == "user" and m.content.startswith("Stop hook feedback:") for m in feedback)


@needs_shared
def test_sha256_depends_only_on_the_messages(tmp_path):
    t = load_transcript(shared(CLAUDE_STOP))
    write_jsonl(t, tmp_path / "copy.jsonl")
    copy = load_transcript(tmp_path / "copy.jsonl")
    assert copy.format == "jsonl"
    assert copy.sha256 == t.sha256
    assert copy.messages == t.messages
    assert copy.metadata == t.metadata


# -- synthetic files per format ------------------------------------------------

PNG_B64 = "iVBORw0KGgo="


def test_openai_chat_list_loads_parts_images_and_tool_calls(tmp_path):
    doc = [
        {"role": "developer", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "ok"},
    ]
    t = load_transcript(write(tmp_path, "chat.json", json.dumps(doc)))
    assert t.format == "openai-chat"
    assert t.messages == (
        Message.system("be brief"),
        Message.user("look", images=(Image(data=PNG_B64), Image(url="https://example.com/a.jpg"))),
        Message.assistant("", (ToolCall("c1", "f", '{"x":1}'),)),
        Message.tool("c1", "ok", name="f"),
    )


def test_openai_chat_object_with_messages_key_loads(tmp_path):
    doc = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    t = load_transcript(write(tmp_path, "req.json", json.dumps(doc)))
    assert (t.format, t.messages, t.metadata) == ("openai-chat", (Message.user("hi"),), {"model": "gpt-4o"})


def test_anthropic_tool_results_become_tool_messages_before_the_user_text(tmp_path):
    doc = {
        "system": [{"type": "text", "text": "rules"}, {"type": "text", "text": "more rules"}],
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm"},
                    {"type": "text", "text": "reading"},
                    {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a"}},
                    {"type": "tool_use", "id": "t2", "name": "Read", "input": {"path": "b"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "A"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "t2",
                        "is_error": True,
                        "content": [
                            {"type": "text", "text": "B"},
                            {
                                "type": "image",
                                "source": {"type": "base64", "media_type": "image/gif", "data": "R0"},
                            },
                        ],
                    },
                    {"type": "text", "text": "thanks"},
                ],
            },
        ],
    }
    t = load_transcript(write(tmp_path, "anthropic.json", json.dumps(doc)))
    assert t.format == "anthropic"
    assert t.messages == (
        Message.system("rules\n\nmore rules", system_parts=("rules", "more rules")),
        Message.user("go"),
        Message.assistant(
            "reading", (ToolCall("t1", "Read", '{"path":"a"}'), ToolCall("t2", "Read", '{"path":"b"}'))
        ),
        Message.tool("t1", "A"),
        Message.tool("t2", "B", is_error=True, images=(Image(data="R0", media_type="image/gif"),)),
        Message.user("thanks"),
    )


def test_dangling_tool_calls_are_loaded_not_rejected(tmp_path):
    lines = [
        Message.user("go").to_dict(),
        Message.assistant("", (ToolCall("c1", "f"),)).to_dict(),
        Message.user("never answered").to_dict(),
    ]
    path = write(tmp_path, "dangling.jsonl", "\n".join(json.dumps(x) for x in lines))
    assert len(load_transcript(path).messages) == 3


def test_one_line_jsonl_is_detected_as_ours(tmp_path):
    t = load_transcript(write(tmp_path, "one.jsonl", '{"role": "user", "content": "hi"}\n'))
    assert (t.format, t.name, t.messages) == ("jsonl", "one", (Message.user("hi"),))


def test_format_can_be_forced(tmp_path):
    path = write(tmp_path, "x.txt", '[{"role": "user", "content": "hi"}]')
    assert load_transcript(path, format="openai-chat").format == "openai-chat"
    assert set(FORMATS) == {"anthropic", "claude-code", "jsonl", "openai-chat", "swe-agent", "tau-bench"}


# -- errors ----------------------------------------------------------------------

ERROR_CASES = [
    # (file name, content, expected message after "<path>")
    (
        "bad.jsonl",
        '{"role": "user", "content": "a"}\n{"role": "bot", "content": "b"}\n',
        ":2: field 'role': expected one of 'assistant', 'system', 'tool', 'user', got 'bot'",
    ),
    (
        "bad.jsonl",
        '{"role": "user", "content": "a"}\n\n{"role": "user", "content": "b"\n',
        ":3: invalid JSON: Expecting ',' delimiter (column 32)",
    ),
    ("bad.jsonl", '{"role": "user", "content": 5}\n', ":1: field 'content': expected a string, got number"),
    (
        "bad.jsonl",
        '{"role": "user", "content": "a", "colour": "red"}\n',
        ":1: unknown message field(s): colour",
    ),
    (
        "bad.jsonl",
        '{"role": "user", "content": "a"}\n{"_meta": {}}\n',
        ":2: '_meta' is allowed only on the first line",
    ),
    (
        "bad.jsonl",
        '{"_meta": {"facts": [{"kind": "k", "value": "v", "message_index": 3}]}}\n'
        '{"role": "user", "content": "v"}\n',
        ":1: _meta.facts: fact 0 (k 'v') points at message 3, but the transcript has 1 messages",
    ),
    (
        "bad.jsonl",
        '{"_meta": {"nmae": "x"}}\n{"role": "user", "content": "v"}\n',
        ":1: _meta: unknown field(s) 'nmae': expected one of 'facts', 'metadata', 'name'",
    ),
    ("bad.jsonl", '{"_meta": {"name": "x"}}\n', ": empty transcript: no messages found"),
    (
        "bad.json",
        '{\n  "messages": [\n    {"role": "user",, "content": "a"}\n  ]\n}',
        ":3:21: invalid JSON: Expecting property name enclosed in double quotes",
    ),
    (
        "bad.json",
        '[{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]',
        ": [1]: field 'role': expected one of 'assistant', 'system', 'tool', 'user', got 'robot'",
    ),
    (
        "bad.json",
        '[{"role": "user", "content": {"text": "a"}}]',
        ": [0]: field 'content': expected a string, a list of content parts or null, got object",
    ),
    (
        "bad.json",
        '{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},'
        ' {"type": "video"}]}], "system": "s"}',
        ": messages[0].content[1]: field 'type': expected one of 'image', 'text', 'tool_result'"
        " in a user message, got 'video'",
    ),
    (
        "bad.json",
        '{"messages": [{"role": "system", "content": "a"}], "system": "s"}',
        ": messages[0]: field 'role': expected one of 'assistant', 'user', got 'system'",
    ),
    ("bad.json", '{"messages": []}', ": empty transcript: no messages found"),
    (
        "bad.json",
        '{"hello": "world"}',
        ": unknown transcript format: expected OpenAI chat JSON, Anthropic Messages JSON, our JSONL,"
        " tau-bench runs JSON, a SWE-agent .traj or a Claude Code session JSONL; pass format= (one of"
        " 'anthropic', 'claude-code', 'jsonl', 'openai-chat', 'swe-agent', 'tau-bench') to force one",
    ),
    ("bad.json", "   \n", ": empty transcript: the file has no content"),
    (
        "bad.json",
        '[{"task_id": 1, "traj": [{"role": "user", "content": "a"}]}, {"task_id": 2, "traj": 3}]',
        ": holds 2 tau-bench runs: pass run=N (0-1) or call load_runs()",
    ),
    (
        "bad.traj",
        '{"history": [{"role": "tool", "content": "x", "tool_call_ids": "c1"}], "info": {}}',
        ": history[0]: field 'tool_call_ids': expected an array of strings, got 'c1'",
    ),
    (
        "bad.jsonl",
        '{"type": "queue-operation", "sessionId": "s"}\n'
        '{"type": "user", "message": {"role": "user", "content": "hi"}}\n'
        '{"type": "assistant",'
        ' "message": {"role": "assistant", "content": [{"type": "tool_use"}]}}\n',
        ":3: message.content[0]: field 'id': expected a string, got null",
    ),
]


@pytest.mark.parametrize(("name", "content", "expected"), ERROR_CASES)
def test_malformed_transcripts_raise_errors_naming_file_line_and_field(tmp_path, name, content, expected):
    path = write(tmp_path, name, content)
    with pytest.raises(TranscriptError) as info:
        load_transcript(path)
    assert str(info.value) == f"{path}{expected}"
    assert info.value.path == str(path)


def test_a_bad_run_names_its_json_path(tmp_path):
    path = write(
        tmp_path,
        "runs.json",
        '[{"task_id": 1, "traj": [{"role": "user", "content": "a"}]},'
        ' {"task_id": 2, "traj": [{"content": "b"}]}]',
    )
    assert load_transcript(path, run=0).messages == (Message.user("a"),)
    with pytest.raises(TranscriptError) as info:
        load_runs(path)
    roles = "'assistant', 'system', 'tool', 'user'"
    assert str(info.value) == f"{path}: [1].traj[0]: field 'role': expected one of {roles}, got null"


def test_jsonl_errors_carry_the_line_number(tmp_path):
    path = write(tmp_path, "x.jsonl", '{"role": "user", "content": "a"}\n{"role": 1}\n')
    with pytest.raises(TranscriptError) as info:
        load_transcript(path)
    assert info.value.line == 2


def test_unreadable_path_is_a_transcript_error(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(TranscriptError) as info:
        load_transcript(missing)
    assert str(info.value) == f"{missing}: cannot read transcript: No such file or directory"
    with pytest.raises(TranscriptError, match="cannot read transcript: Is a directory"):
        load_transcript(tmp_path)


def test_non_utf8_bytes_are_reported_with_their_line(tmp_path):
    path = write(tmp_path, "x.jsonl", b'{"role": "user", "content": "a"}\n{"content": "\xff"}\n')
    with pytest.raises(TranscriptError, match=r"x\.jsonl:2: not UTF-8 text \(byte 46: invalid start byte\)"):
        load_transcript(path)


def test_unknown_forced_format_is_rejected(tmp_path):
    path = write(tmp_path, "x.json", "[]")
    with pytest.raises(TranscriptError, match=r"unknown format 'xml': expected one of 'anthropic', "):
        load_transcript(path, format="xml")


def test_a_non_message_jsonl_line_is_rejected(tmp_path):
    path = write(tmp_path, "x.jsonl", '{"role": "user", "content": "a"}\n[1, 2]\n')
    with pytest.raises(TranscriptError) as info:
        load_transcript(path, format="jsonl")
    assert str(info.value) == f"{path}:2: expected a JSON object (a message), got array"


# -- writing and round trips -----------------------------------------------------


def sample_transcript() -> Transcript:
    messages = [
        Message.system("sys — rules"),
        Message.user("fix TICKET-1\r\n please", images=(Image(data=PNG_B64),)),
        Message.assistant("on it", (ToolCall("c1", "read_file", '{"path": "a.py"}'),)),
        Message.tool("c1", "<<< FILE: a.py >>>\n     1\tx = 1", is_error=True),
        Message.user("recalled", preserve_verbatim=True),
        Message.user("hook says no", agent_feedback=True),
        Message.user("[summary]", is_summary=True, summary_of=3),
    ]
    return transcript_from_messages(
        "sample", messages, [Fact("ticket", "TICKET-1", 1)], metadata={"seed": 3, "nested": {"a": [1, 2]}}
    )


def test_write_then_load_gives_back_the_same_transcript(tmp_path):
    t = sample_transcript()
    path = tmp_path / "sample-copy.jsonl"
    size = write_jsonl(t, path)
    loaded = load_transcript(path)
    assert size == path.stat().st_size
    assert (loaded.name, loaded.messages, loaded.facts, loaded.metadata, loaded.sha256) == (
        t.name,
        t.messages,
        t.facts,
        t.metadata,
        t.sha256,
    )
    assert (loaded.format, loaded.source_path) == ("jsonl", str(path))
    again = tmp_path / "again.jsonl"
    write_jsonl(loaded, again)
    assert again.read_bytes() == path.read_bytes()


def test_writing_plain_messages_omits_the_meta_line(tmp_path):
    t = sample_transcript()
    path = tmp_path / "plain.jsonl"
    write_jsonl(list(t.messages), path)
    assert not path.read_text(encoding="utf-8").startswith('{"_meta"')
    loaded = load_transcript(path)
    assert (loaded.name, loaded.messages, loaded.facts, loaded.sha256) == ("plain", t.messages, (), t.sha256)


def test_metadata_that_is_not_json_is_a_clear_write_error(tmp_path):
    t = transcript_from_messages("m", [Message.user("x")], metadata={"when": object()})
    with pytest.raises(TranscriptError, match="metadata of 'm' is not JSON-serialisable"):
        write_jsonl(t, tmp_path / "m.jsonl")


TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
IDS = st.text(min_size=1, max_size=12)  # to_dict omits empty ids, so "" would come back as None
ARGUMENTS = st.dictionaries(TEXT, TEXT, max_size=3).map(json.dumps)  # arguments are JSON text
MESSAGES = st.lists(
    st.one_of(
        st.builds(Message.user, TEXT, preserve_verbatim=st.booleans(), agent_feedback=st.booleans()),
        st.builds(Message.system, TEXT),
        st.builds(
            Message.assistant,
            TEXT,
            st.lists(st.builds(ToolCall, IDS, TEXT, ARGUMENTS), max_size=3).map(tuple),
        ),
        st.builds(Message.tool, IDS, TEXT, is_error=st.booleans()),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=40, deadline=None)
@given(messages=MESSAGES)
def test_any_history_round_trips_exactly(tmp_path_factory, messages):
    path = tmp_path_factory.mktemp("rt") / "t.jsonl"
    t = transcript_from_messages("rt", messages, [Fact("k", "v", len(messages) - 1)])
    write_jsonl(t, path)
    loaded = load_transcript(path)
    assert loaded.messages == t.messages
    assert loaded.facts == t.facts
    assert loaded.sha256 == t.sha256


# -- values ----------------------------------------------------------------------


def test_transcript_chars_sums_message_content():
    t = sample_transcript()
    assert transcript_chars(t) == sum(len(m.content) for m in t.messages)
    assert transcript_chars([Message.user("abc"), Message.assistant("de")]) == 5


def test_transcript_from_messages_validates_its_input():
    t = transcript_from_messages("x", (m for m in [Message.user("a")]))
    assert (t.format, t.source_path, t.messages) == ("memory", None, (Message.user("a"),))
    with pytest.raises(TranscriptError, match="transcript 'x': empty transcript: no messages"):
        transcript_from_messages("x", [])
    with pytest.raises(TranscriptError, match=r"fact 0 \(path 'a.py'\) points at message 1, but .* has 1"):
        transcript_from_messages("x", [Message.user("a.py")], [Fact("path", "a.py", 1)])
    with pytest.raises(TranscriptError, match=r"messages\[0\] must be a Message, got dict"):
        transcript_from_messages("x", [{"role": "user"}])  # type: ignore[list-item]


def test_equal_histories_hash_equally_and_different_ones_do_not():
    a = transcript_from_messages("a", [Message.user("hi")])
    b = transcript_from_messages("b", [Message.user("hi")], metadata={"x": 1})
    c = transcript_from_messages("c", [Message.user("hi!")])
    assert a.sha256 == b.sha256 != c.sha256
    assert len(a.sha256) == 64


def test_load_runs_of_a_single_transcript_is_a_one_element_list(tmp_path):
    path = write(tmp_path, "one.jsonl", '{"role": "user", "content": "hi"}\n')
    runs = load_runs(path)
    assert [t.messages for t in runs] == [(Message.user("hi"),)]
    assert Counter(t.format for t in runs) == {"jsonl": 1}


# -- robustness ------------------------------------------------------------------

FUZZ_KEYS = st.sampled_from(
    [
        "role",
        "content",
        "type",
        "text",
        "tool_calls",
        "function",
        "name",
        "arguments",
        "id",
        "tool_call_id",
        "tool_call_ids",
        "tool_use_id",
        "source",
        "data",
        "url",
        "image_url",
        "input",
        "is_error",
        "messages",
        "system",
        "history",
        "info",
        "traj",
        "task_id",
        "message",
        "_meta",
        "facts",
        "metadata",
        "kind",
        "value",
        "message_index",
        "user",
        "assistant",
        "tool_use",
        "tool_result",
        "image",
        "base64",
        "sessionId",
        "isMeta",
    ]
)
FUZZ_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 3),
    st.sampled_from(["user", "assistant", "tool", "system", "text", "tool_use", "tool_result", "image"]),
    st.text(max_size=4),
)
FUZZ_JSON = st.recursive(
    FUZZ_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(FUZZ_KEYS, inner, max_size=5),
    max_leaves=25,
)


@settings(max_examples=200, deadline=None)
@given(doc=FUZZ_JSON, as_lines=st.booleans())
def test_arbitrary_json_loads_or_raises_a_transcript_error(tmp_path_factory, doc, as_lines):
    path = tmp_path_factory.mktemp("fuzz") / "f.jsonl"
    items = doc if as_lines and isinstance(doc, list) else [doc]
    path.write_text("\n".join(json.dumps(item) for item in items), encoding="utf-8")
    try:
        loaded = load_runs(path)
    except TranscriptError as exc:
        assert str(exc).startswith(str(path))
    else:
        assert all(isinstance(t, Transcript) and t.messages for t in loaded)


def test_lone_surrogates_from_json_escapes_survive_a_round_trip(tmp_path):
    source = write(tmp_path, "s.json", '[{"role": "user", "content": "half \\ud83d pair"}]')
    t = load_transcript(source)
    assert t.messages[0].content == "half \ud83d pair"
    write_jsonl(t, tmp_path / "s.jsonl")
    assert load_transcript(tmp_path / "s.jsonl").messages == t.messages
