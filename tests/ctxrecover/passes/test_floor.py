"""Floor shrinkers: tool catalogue index, skill injection budget, skill aging (SPEC §3.5)."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrecover.archive import MemoryArchive, archive_key, extract_keys, marker, recall
from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message, ToolCall
from ctxrecover.passes.floor import (
    SKILL_BLOCK_RE,
    SkillAgingReport,
    SkillBlock,
    SkillInjector,
    age_skill_blocks,
    describe_tool,
    one_line_description,
    tool_catalog_index,
)
from ctxrecover.sizes import format_payload_size, total_weight

NOTICE = "skill aging: %d block(s) archived, %s freed (recoverable via @recall)"
STUB = '<skill name="%s" archived>[skill body archived — recoverable via @recall %s]</skill>'
FOOTER = (
    'Full parameter schemas are available on demand: call describe_tool with {"name": "<tool name>"} '
    "to get a tool's complete definition before using it."
)
BODY = "# Git workflow\n\nAlways rebase onto main before pushing.\n" + "- rule line\n" * 80


def skill(name: str = "git", body: str = BODY) -> str:
    return SkillBlock(name, body).envelope


def aged(
    message: Message, age: int, *, prefix: tuple[Message, ...] = (Message.system("base prompt"),)
) -> list[Message]:
    """``prefix`` + ``message`` followed by ``age`` assistant turns (so ``message`` has that age)."""
    history = [*prefix, message]
    for n in range(age):
        history += [Message.assistant(f"step {n}"), Message.user(f"next {n}")]
    return history


def run(
    history: list[Message], archive: MemoryArchive | None = None, **kw: int
) -> tuple[list[Message], SkillAgingReport, MemoryArchive]:
    archive = archive if archive is not None else MemoryArchive()
    snapshot = copy.deepcopy(history)
    out, report = age_skill_blocks(history, archive=archive, **kw)
    assert history == snapshot, "age_skill_blocks mutated its input"
    again, second = age_skill_blocks(out, archive=archive, **kw)
    assert again is out and second == SkillAgingReport(), "age_skill_blocks is not idempotent"
    return out, report, archive


# -- skill aging ----------------------------------------------------------


@pytest.mark.parametrize(
    ("blocks", "chars", "expected"),
    [
        (0, 0, "skill aging: 0 block(s) archived, 0 B freed (recoverable via @recall)"),
        (1, 512, "skill aging: 1 block(s) archived, 512 B freed (recoverable via @recall)"),
        (3, 129_434, "skill aging: 3 block(s) archived, 126.4 KB freed (recoverable via @recall)"),
    ],
)
def test_notice_text_is_exact(blocks: int, chars: int, expected: str) -> None:
    assert SkillAgingReport(blocks_archived=blocks, chars_freed=chars).notice == expected


def test_block_at_age_turns_becomes_stub_with_recall_marker() -> None:
    history = aged(Message.user("please commit\n" + skill()), 6)
    out, report, archive = run(history)
    key = archive_key(BODY)
    assert out[1].content == "please commit\n" + STUB % ("git", marker(key))
    assert report.blocks_archived == 1 and report.skills == ("git",)
    assert report.chars_freed == total_weight(history) - total_weight(out) > 0
    assert report.notice == NOTICE % (1, format_payload_size(report.chars_freed))
    assert recall(archive, out[1].content).text == BODY


@pytest.mark.parametrize("age", [0, 1, 5])
def test_blocks_younger_than_age_turns_are_untouched(age: int) -> None:
    history = aged(Message.user(skill()), age)
    out, report, archive = run(history)
    assert out is history and report == SkillAgingReport() and len(archive) == 0


def test_age_counts_assistant_messages_only() -> None:
    """Tool results and user messages between turns do not make a block older."""
    history = [Message.system("base"), Message.user(skill())]
    for n in range(5):
        history += [
            Message.assistant("", tool_calls=[ToolCall(f"t{n}", "run")]),
            Message.tool(f"t{n}", "result"),
            Message.user("more"),
            Message.user("and more"),
        ]
    assert run(history)[0] is history  # 5 assistant messages: still young
    out, report, _ = run([*history, Message.assistant("sixth")])
    assert report.blocks_archived == 1 and "archived>" in out[1].content


@pytest.mark.parametrize(
    ("age_turns", "age", "ages_out"), [(1, 1, True), (1, 0, False), (3, 3, True), (3, 2, False)]
)
def test_age_turns_is_a_parameter(age_turns: int, age: int, ages_out: bool) -> None:
    history = aged(Message.user(skill()), age)
    out, report, _ = run(history, age_turns=age_turns)
    assert report.changed is ages_out and (out is history) is not ages_out


def test_leading_system_prefix_is_the_floor_and_never_aged() -> None:
    prefix = (Message.system("persona\n" + skill("persona-skill")), Message.system(skill("startup")))
    floor_only = aged(Message.system(skill("also-floor")), 8, prefix=prefix)
    assert run(floor_only)[0] is floor_only  # a system message right after the prefix is still the floor
    history = aged(Message.system("mid-loop\n" + skill("mid")), 8, prefix=(*prefix, Message.user("task")))
    out, report, _ = run(history)
    assert out[:3] == history[:3] and all(o is h for o, h in zip(out[:3], history[:3], strict=True))
    assert report.skills == ("mid",)
    assert out[3].content == "mid-loop\n" + STUB % ("mid", marker(archive_key(BODY)))


def test_only_user_and_later_system_messages_are_candidates() -> None:
    history = [
        Message.system("base"),
        Message.assistant("quoting " + skill("a")),
        Message.tool("t", skill("b")),
        Message.user(skill("c"), preserve_verbatim=True),
        Message.user(skill("d"), agent_feedback=True),
    ] + [Message.assistant("ok")] * 6
    out, report, _ = run(history)
    assert report.skills == ("d",)
    assert [m is o for m, o in zip(history, out, strict=True)][:4] == [True, True, True, True]


def test_several_blocks_in_one_message_each_become_a_stub_and_recall_restores_each_body() -> None:
    bodies = {"alpha": "\nleading newline\n" * 20, "beta": "trailing newline\n" * 30, "gamma": "x" * 500}
    text = "intro\n" + "\n\n".join(skill(n, b) for n, b in bodies.items()) + "\noutro"
    out, report, archive = run(aged(Message.user(text), 6))
    assert report.blocks_archived == 3 and report.skills == tuple(bodies)
    stubs = [STUB % (n, marker(archive_key(b))) for n, b in bodies.items()]
    assert out[1].content == "intro\n" + "\n\n".join(stubs) + "\noutro"
    for name, body in bodies.items():
        (key,) = extract_keys(next(s for s in stubs if f'"{name}"' in s))
        assert archive.get(key) == body


def test_block_smaller_than_its_stub_is_kept() -> None:
    history = aged(Message.user(skill("tiny", "be brief")), 9)
    out, report, archive = run(history)
    assert out is history and report == SkillAgingReport() and SKILL_BLOCK_RE.search(out[1].content)


def test_markers_inside_an_aged_body_are_kept_in_the_stub() -> None:
    archive = MemoryArchive()
    inner = archive.put("the full original")
    body = f"preview of a cut skill, rest at {marker(inner)}\n" + "y" * 400
    out, _, _ = run(aged(Message.user(skill("cut", body)), 6), archive)
    assert out[1].content == STUB % ("cut", f"{marker(archive_key(body))} {marker(inner)}")
    assert recall(archive, out[1].content).text == body + "\n\n" + "the full original"


def test_system_parts_are_aged_like_the_content() -> None:
    parts = ("rules", skill("deploy"))
    mid = Message.system("\n".join(parts), system_parts=parts)
    out, report, _ = run(aged(mid, 6, prefix=(Message.system("base"), Message.user("task"))))
    stub = STUB % ("deploy", marker(archive_key(BODY)))
    assert out[2].system_parts == ("rules", stub) and out[2].content == "rules\n" + stub
    assert report.blocks_archived == 1


def test_age_turns_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="age_turns >= 1"):
        age_skill_blocks([], archive=MemoryArchive(), age_turns=0)


# -- skill injection ------------------------------------------------------


def test_blocks_within_budget_are_injected_whole_in_envelopes() -> None:
    injector = SkillInjector(budget_chars=24_000)
    result = injector.inject([SkillBlock("a", "alpha"), SkillBlock("b", "beta")])
    assert result.text == '<skill name="a">\nalpha\n</skill>\n\n<skill name="b">\nbeta\n</skill>'
    assert (result.injected, result.deferred, result.cut, result.refused) == (("a", "b"), (), (), ())
    assert result.chars == len(result.text) == injector.used_chars
    assert [m.group(1) for m in SKILL_BLOCK_RE.finditer(result.text)] == ["a", "b"]


def test_block_that_fits_a_later_turn_is_deferred_and_smaller_ones_fill_the_room() -> None:
    injector = SkillInjector(budget_chars=1_000)
    big, small = SkillBlock("big", "b" * 700), SkillBlock("small", "s" * 100)
    first = injector.inject([SkillBlock("a", "a" * 600), big, small])
    assert first.injected == ("a", "small") and first.deferred == (big,) and first.chars <= 1_000
    second = injector.inject(first.deferred)
    assert second.injected == ("big",) and second.text == big.envelope


def test_block_larger_than_the_budget_is_cut_and_its_full_body_archived() -> None:
    archive = MemoryArchive()
    body = "".join(f"line {n:04d} of a very long skill\n" for n in range(2_000))
    result = SkillInjector(budget_chars=5_000, archive=archive).inject([SkillBlock("huge", body)])
    assert result.cut == ("huge",) and result.injected == ("huge",)
    assert result.chars == len(result.text) <= 5_000
    assert result.text.startswith('<skill name="huge">\nline 0000') and result.text.endswith("\n</skill>")
    assert extract_keys(result.text) == [archive_key(body)]
    assert recall(archive, result.text).text == body


def test_too_little_room_for_a_useful_cut_defers_the_block() -> None:
    injector = SkillInjector(budget_chars=5_000)
    huge = SkillBlock("huge", "h" * 20_000)
    first = injector.inject([SkillBlock("a", "a" * 4_700), huge])
    assert first.injected == ("a",) and first.deferred == (huge,)
    assert injector.inject(first.deferred).cut == ("huge",)


def test_run_cap_is_twice_the_budget_and_further_blocks_are_refused_with_a_reason() -> None:
    injector = SkillInjector(budget_chars=1_000)
    assert injector.run_cap == 2_000
    totals = [injector.inject([SkillBlock(f"s{n}", "x" * 800)]).chars for n in range(2)]
    last = injector.inject([SkillBlock("late", "x" * 800), SkillBlock("later", "y" * 10)])
    assert sum(totals) + last.chars <= 2_000 == injector.run_cap
    assert last.injected == ("later",) and last.refused == ("late",) and last.deferred == ()
    assert last.reason == (
        "skill injection refused for 1 block(s): the run cap of 2.0 KB "
        "(2× the 1000 B per-turn budget) is spent"
    )
    spent = injector.inject([SkillBlock("z", "z" * 400)])
    assert spent.refused == ("z",) and spent.text == ""
    assert injector.remaining_chars == 2_000 - injector.used_chars


def test_block_too_large_even_for_a_preview_is_refused_not_deferred_forever() -> None:
    blocks = [SkillBlock("huge", "h" * 5_000), SkillBlock("ok", "fine")]
    result = SkillInjector(budget_chars=300).inject(blocks)
    assert result.injected == ("ok",) and result.refused == ("huge",) and result.deferred == ()
    assert result.reason == (
        "skill injection refused for 1 block(s): too large for the 300 B per-turn budget, even as a preview"
    )


def test_budget_zero_means_unlimited_as_the_environment_variable_does() -> None:
    injector = SkillInjector(budget_chars=0)
    result = injector.inject([SkillBlock(f"s{n}", "x" * 50_000) for n in range(3)])
    assert len(result.injected) == 3 and injector.run_cap is None and injector.remaining_chars is None


@settings(max_examples=60, deadline=None)
@given(
    budget=st.integers(min_value=200, max_value=6_000),
    multiple=st.sampled_from([1, 2, 3, 1.5]),
    turns=st.lists(st.lists(st.integers(min_value=0, max_value=9_000), max_size=5), max_size=6),
)
def test_every_turn_stays_within_budget_and_the_run_within_its_cap(
    budget: int, multiple: float, turns: list[list[int]]
) -> None:
    archive = MemoryArchive()
    injector = SkillInjector(budget_chars=budget, max_budget_multiple=multiple, archive=archive)
    total = 0
    for t, sizes in enumerate(turns):
        blocks = [SkillBlock(f"t{t}b{n}", chr(97 + n) * size) for n, size in enumerate(sizes)]
        result = injector.inject(blocks)
        assert result.chars == len(result.text) <= budget
        accounted = sorted([*result.injected, *(b.name for b in result.deferred), *result.refused])
        assert accounted == sorted(b.name for b in blocks)
        for name in result.cut:
            body = next(b.body for b in blocks if b.name == name)
            assert archive.get(archive_key(body)) == body
        total += result.chars
        pending = list(result.deferred)
        for _ in range(len(pending)):  # re-offered first, a deferred block is settled within a turn
            if pending:
                settled = injector.inject(pending[:1])
                assert settled.chars <= budget and settled.deferred == ()
                total += settled.chars
                pending = pending[1:]
    assert total == injector.used_chars <= int(budget * multiple)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"budget_chars": -1}, "budget_chars >= 0"),
        ({"max_budget_multiple": 0}, "max_budget_multiple > 0"),
        ({"max_budget_multiple": True}, "max_budget_multiple > 0"),
    ],
)
def test_injector_validates_its_knobs(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SkillInjector(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "body", "message"),
    [
        ("", "x", "non-empty one-line name"),
        ('say "hi"', "x", "without quotes"),
        ("two\nlines", "x", "one-line"),
        ("ok", "early </skill> end", "would end its envelope early"),
    ],
)
def test_skill_block_rejects_what_would_break_its_envelope(name: str, body: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SkillBlock(name, body)


def test_injected_block_ages_into_a_stub_whose_recall_gives_the_injected_body() -> None:
    archive = MemoryArchive()
    result = SkillInjector(archive=archive).inject([SkillBlock("git", BODY)])
    out, report, _ = run(aged(Message.user(result.text), 6), archive)
    assert report.skills == ("git",) and recall(archive, out[1].content).text == BODY


# -- tool catalogue -------------------------------------------------------

OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file from disk. Supports offset and limit for large files.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "run", "description": "Run a shell command", "parameters": {}}},
]
ANTHROPIC_TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file from disk.\n\nDetails: supports offset and limit.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
    {"name": "run", "description": "Run a shell command", "input_schema": {"type": "object"}},
]


@dataclass
class McpTool:
    name: str
    description: str | None
    inputSchema: dict[str, object]  # noqa: N815 — the MCP SDK's spelling


@pytest.mark.parametrize(
    "tools",
    [
        OPENAI_TOOLS,
        ANTHROPIC_TOOLS,
        [McpTool(t["name"], t["description"], t["input_schema"]) for t in ANTHROPIC_TOOLS],  # type: ignore[arg-type]
        [{"toolSpec": {"name": t["name"], "description": t["description"]}} for t in ANTHROPIC_TOOLS],
        [{"functionDeclarations": [f["function"] for f in OPENAI_TOOLS]}],  # type: ignore[index]
    ],
    ids=["openai", "anthropic", "objects", "bedrock", "gemini"],
)
def test_catalog_index_has_one_line_per_tool_and_the_on_demand_footer(tools: list[object]) -> None:
    assert tool_catalog_index(tools) == "\n".join(
        ["- read_file: Read a file from disk.", "- run: Run a shell command", FOOTER]
    )


def test_catalog_index_names_the_callers_lookup_tool_and_handles_missing_descriptions() -> None:
    index = tool_catalog_index([McpTool("ping", None, {})], describe_tool_name="tool_help")
    assert index.splitlines() == ["- ping", FOOTER.replace("describe_tool", "tool_help")]
    assert tool_catalog_index([]) == ""


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ([{"description": "no name"}], r"tools\[0\] has no tool name"),
        ([{"type": "function", "function": {"description": "x"}}], r"tools\[0\]\.function has no tool name"),
        ([{"name": "a"}, {"name": "a"}], r"tools\[1\]: duplicate tool name 'a'"),
    ],
)
def test_catalog_index_rejects_tools_it_cannot_name(tools: list[object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        tool_catalog_index(tools)


def test_hosted_tool_without_a_name_is_listed_by_its_type() -> None:
    assert tool_catalog_index([{"type": "web_search"}]).splitlines()[0] == "- web_search"


def test_describe_tool_returns_the_full_definition_and_a_clear_line_for_unknown_names() -> None:
    definition = json.loads(describe_tool(OPENAI_TOOLS, "read_file"))
    assert definition == {
        "name": "read_file",
        "description": OPENAI_TOOLS[0]["function"]["description"],  # type: ignore[index]
        "parameters": OPENAI_TOOLS[0]["function"]["parameters"],  # type: ignore[index]
    }
    assert describe_tool(ANTHROPIC_TOOLS, "nope") == 'unknown tool "nope" — known tools: read_file, run'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("List files. Hidden ones too.", "List files."),
        ("Search the web!  Returns links.", "Search the web!"),
        ("Is it up? Pings a host.", "Is it up?"),
        ("Run   a\n  command\nacross lines. Then more.", "Run a command across lines."),
        ("First paragraph without a stop\n\nSecond paragraph.", "First paragraph without a stop"),
        ("Fetch a URL, e.g. a docs page. Then parse it.", "Fetch a URL, e.g. a docs page."),
        ("Version 1.2.3 of the tool. More.", "Version 1.2.3 of the tool."),
        ("", ""),
        (None, ""),
    ],
)
def test_one_line_description_takes_the_first_sentence(text: str | None, expected: str) -> None:
    assert one_line_description(text) == expected


def test_one_line_description_cuts_long_sentences_at_a_word_with_an_ellipsis() -> None:
    text = "word " * 60 + "end."
    line = one_line_description(text)
    assert len(line) <= 120 and line.endswith("word…") and "\n" not in line
    assert one_line_description(text, limit=20) == "word word word word…"
    with pytest.raises(ConfigError, match="limit >= 1"):
        one_line_description(text, limit=0)
