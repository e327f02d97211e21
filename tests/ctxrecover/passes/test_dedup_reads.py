"""Dedup repeated reads (SPEC §3.4)."""

from __future__ import annotations

import copy
import json

import pytest

from ctxrecover.archive import MemoryArchive, archive_key, marker, recall
from ctxrecover.messages import Message, ToolCall
from ctxrecover.passes.dedup_reads import (
    DedupReport,
    ReadBlock,
    dedup_repeated_reads,
    parse_cat_n,
    parse_file_blocks,
)

SUPERSEDED = "[Earlier read of %s superseded by a later read of the same file — %d chars cleared]"
RECALL = "\n[full content recoverable via @recall %s]"


def code_lines(first: int, last: int, sep: str = "\t") -> str:
    line = "{n:6d}{sep}value_{n} = compute({n}, 'some longer source text')\n"
    return "".join(line.format(n=n, sep=sep) for n in range(first, last + 1))


def file_block(path: str, first: int = 1, last: int = 40, *, ranged: bool = False) -> str:
    header = f"<<< FILE: {path} (lines {first}-{last}) >>>" if ranged else f"<<< FILE: {path} >>>"
    return header + "\n" + code_lines(first, last)


def read(call_id: str, content: str, **flags: object) -> list[Message]:
    """A coder read: an assistant call and its tool result."""
    return [
        Message.assistant("", tool_calls=[ToolCall(call_id, "coder")]),
        Message.tool(call_id, content, name="coder", **flags),
    ]


def cat_read(call_id: str, arguments: dict[str, object], first: int, last: int) -> list[Message]:
    return [
        Message.assistant("", tool_calls=[ToolCall(call_id, "read_file", json.dumps(arguments))]),
        Message.tool(call_id, code_lines(first, last), name="read_file"),
    ]


def dedup(history: list[Message], **kw: object) -> tuple[list[Message], DedupReport, MemoryArchive]:
    archive = MemoryArchive()
    snapshot = copy.deepcopy(history)
    out, report = dedup_repeated_reads(history, archive=archive, **kw)  # type: ignore[arg-type]
    assert history == snapshot, "the pass mutated its input"
    again, second = dedup_repeated_reads(out, archive=archive, **kw)  # type: ignore[arg-type]
    assert again is out and second == DedupReport(), "the pass is not idempotent"
    return out, report, archive


def expected_stub(paths: str, original: str) -> str:
    return SUPERSEDED % (paths, len(original)) + RECALL % marker(archive_key(original))


def test_a_repeated_read_of_the_same_file_replaces_the_earlier_one() -> None:
    content = file_block("src/app.py")
    history = [Message.user("go"), *read("r1", content), *read("r2", content), Message.assistant("ok")]
    out, report, archive = dedup(history)
    stub = out[2]
    assert stub.content == expected_stub("src/app.py", content)
    assert (stub.tool_call_id, stub.name, stub.role) == ("r1", "coder", "tool")
    assert out[4] is history[4], "the newest read stays intact"
    assert report == DedupReport(reads_superseded=1, chars_cleared=len(content) - len(stub.content))
    assert recall(archive, stub.content).text == content


def test_every_earlier_read_is_superseded_and_only_the_newest_stays() -> None:
    reads = [file_block("a.py", 1, 30), file_block("a.py", 5, 20, ranged=True), file_block("a.py", 1, 35)]
    history = [m for n, c in enumerate(reads) for m in read(f"r{n}", c)]
    out, report, _ = dedup(history)
    assert report.reads_superseded == 2
    assert out[1].content == expected_stub("a.py", reads[0])
    assert out[3].content == expected_stub("a.py", reads[1])
    assert out[5] is history[5]


@pytest.mark.parametrize(
    ("earlier", "later", "superseded"),
    [
        (file_block("a.py", 10, 20, ranged=True), file_block("a.py", 10, 20, ranged=True), True),
        (file_block("a.py", 10, 20, ranged=True), file_block("a.py", 1, 50, ranged=True), True),
        (file_block("a.py", 10, 20, ranged=True), file_block("a.py"), True),
        (file_block("a.py"), file_block("a.py", 10, 20, ranged=True), False),
        (file_block("a.py", 1, 50, ranged=True), file_block("a.py", 10, 20, ranged=True), False),
        (file_block("a.py", 10, 30, ranged=True), file_block("a.py", 20, 40, ranged=True), False),
        (file_block("a.py"), file_block("b.py"), False),
        (file_block("./src/../a.py"), file_block("a.py"), True),
    ],
    ids=["same", "wider", "whole", "narrower-after-whole", "narrower", "overlap", "other-file", "normalised"],
)
def test_only_a_same_or_wider_later_read_supersedes(earlier: str, later: str, superseded: bool) -> None:
    history = [*read("r1", earlier), *read("r2", later)]
    out, report, _ = dedup(history)
    assert (report.reads_superseded == 1) is superseded
    assert (out[1] is history[1]) is not superseded
    assert out[3] is history[3]


def test_multi_file_read_is_superseded_only_when_every_file_is_read_again() -> None:
    both = file_block("a.py") + file_block("b.py")
    partly = [*read("r1", both), *read("r2", file_block("a.py"))]
    out, report, _ = dedup(partly)
    assert out is partly and report.reads_superseded == 0
    fully = [*partly, *read("r3", file_block("b.py"))]
    out, report, _ = dedup(fully)
    assert out[1].content == expected_stub("a.py, b.py", both)
    assert report.reads_superseded == 1


@pytest.mark.parametrize("flags", [{"preserve_verbatim": True}, {"is_summary": True, "summary_of": 2}])
def test_verbatim_and_summaries_are_neither_touched_nor_superseding(flags: dict[str, object]) -> None:
    content = file_block("a.py")
    kept_earlier = [*read("r1", content, **flags), *read("r2", content)]
    out, _, _ = dedup(kept_earlier)
    assert out is kept_earlier
    not_superseding = [*read("r1", content), *read("r2", content, **flags)]
    out, _, _ = dedup(not_superseding)
    assert out is not_superseding


def test_agent_feedback_user_messages_are_reads_too() -> None:
    content = file_block("a.py")
    history = [Message.user(content, agent_feedback=True), Message.user(content, agent_feedback=True)]
    out, report, _ = dedup(history)
    assert out[0].content == expected_stub("a.py", content) and out[0].agent_feedback
    assert report.reads_superseded == 1


def test_real_user_text_is_never_a_read() -> None:
    content = file_block("a.py")
    history = [Message.user(content), Message.user(content)]
    out, _, _ = dedup(history)
    assert out is history


@pytest.mark.parametrize("path_key", ["path", "file_path", "filename"])
def test_cat_n_output_takes_the_path_from_the_call_arguments(path_key: str) -> None:
    history = [*cat_read("c1", {path_key: "lib/x.py"}, 1, 40), *cat_read("c2", {path_key: "lib/x.py"}, 1, 40)]
    out, report, _ = dedup(history)
    assert out[1].content == expected_stub("lib/x.py", history[1].content)
    assert report.reads_superseded == 1


@pytest.mark.parametrize(
    ("earlier", "later", "superseded"),
    [
        (({"offset": 100, "limit": 50}, 100, 149), ({}, 1, 300), True),
        (({"start_line": 100, "end_line": 149}, 100, 149), ({"offset": 90, "limit": 80}, 90, 169), True),
        (({}, 1, 300), ({"offset": 100, "limit": 50}, 100, 149), False),
        (({"offset": 100, "limit": 50}, 100, 149), ({"offset": 120, "limit": 10}, 120, 129), False),
        (({"offset": 0, "limit": 40}, 1, 40), ({"offset": 0, "limit": 30}, 1, 30), False),
    ],
    ids=["whole-after-range", "wider-range", "range-after-whole", "narrower-range", "shorter-from-start"],
)
def test_cat_n_ranges(
    earlier: tuple[dict[str, object], int, int], later: tuple[dict[str, object], int, int], superseded: bool
) -> None:
    (args1, a1, b1), (args2, a2, b2) = earlier, later
    history = [
        *cat_read("c1", {"path": "x.py", **args1}, a1, b1),
        *cat_read("c2", {"path": "x.py", **args2}, a2, b2),
    ]
    _, report, _ = dedup(history)
    assert (report.reads_superseded == 1) is superseded


def test_tiny_reads_are_left_alone_because_a_stub_would_be_longer() -> None:
    tiny = "<<< FILE: a.py >>>\n1: x = 1"
    history = [*read("r1", tiny), *read("r2", tiny)]
    out, _, _ = dedup(history)
    assert out is history


def test_markers_inside_a_superseded_read_keep_their_recall_lines() -> None:
    embedded = marker("0123456789abcdef")
    earlier = file_block("a.py") + f"note {embedded}\n"
    history = [*read("r1", earlier), *read("r2", file_block("a.py"))]
    out, _, _ = dedup(history)
    assert out[1].content == expected_stub("a.py", earlier) + RECALL % embedded


def test_parsers_are_pluggable() -> None:
    def json_reads(message: Message, call: ToolCall | None) -> list[ReadBlock]:
        if not message.content.startswith('{"file"'):
            return []
        data = json.loads(message.content)
        return [ReadBlock(data["file"], data["from"], data["to"])]

    def payload(first: int, last: int) -> str:
        return json.dumps({"file": "k.py", "from": first, "to": last, "text": "z" * 500})

    history = [*read("j1", payload(5, 9)), *read("j2", payload(1, 10))]
    out, report, _ = dedup(history, parsers=[json_reads])
    assert report.reads_superseded == 1
    assert out[1].content == expected_stub("k.py", history[1].content)
    out, _, _ = dedup(history, parsers=[parse_file_blocks])
    assert out is history


def test_each_read_is_parsed_once_however_many_turns_pass() -> None:
    parsed: list[str] = []

    def counting(message: Message, call: ToolCall | None) -> list[ReadBlock]:
        parsed.append(message.tool_call_id or "")
        return parse_file_blocks(message, call)

    history = [*read("r1", file_block("a.py")), Message.user("go on"), *read("r2", file_block("b.py"))]
    for _turn in range(3):
        out, report = dedup_repeated_reads(history, archive=MemoryArchive(), parsers=(counting,))
        assert out is history and not report.changed
    assert parsed == ["r1", "r2"]


@pytest.mark.parametrize(
    ("content", "blocks"),
    [
        ("<<< FILE: a.py >>>\n1: x\n2: y\n", [ReadBlock("a.py", 1, None)]),
        ("<<< FILE: a.py >>>\n     1\tx\n     2\ty\n", [ReadBlock("a.py", 1, None)]),
        ("<<< FILE: a.py >>>\n7: x\n8:\n9: z\n", [ReadBlock("a.py", 7, 9)]),
        ("<<< FILE: a.py (lines 3-8) >>>\n3: x\n", [ReadBlock("a.py", 3, 8)]),
        ("<<< FILE: src/a b.py >>>\n", [ReadBlock("src/a b.py", 1, None)]),
        (
            "<<< FILE: a.py >>>\n1: x\n<<< FILE: b.py >>>\n4\ty\n",
            [ReadBlock("a.py", 1, None), ReadBlock("b.py", 4, 4)],
        ),
        ("no file header here\n1: x\n", []),
    ],
)
def test_file_block_format(content: str, blocks: list[ReadBlock]) -> None:
    assert parse_file_blocks(Message.tool("r", content), None) == blocks


@pytest.mark.parametrize(
    ("arguments", "content", "blocks"),
    [
        ('{"path": "a.py"}', "     1\tx\n     2\ty\n", [ReadBlock("a.py", 1, None)]),
        ('{"file_path": "a.py", "offset": 10}', "    11\tx\n    12\ty\n", [ReadBlock("a.py", 11, 12)]),
        ('{"path": "a.py"}', "     1→x\n     2→y\n", [ReadBlock("a.py", 1, None)]),
        ('{"path": "a.py"}', "Error: no such file\n", []),
        ('{"query": "a.py"}', "     1\tx\n", []),
        ("not json", "     1\tx\n", []),
    ],
)
def test_cat_n_format(arguments: str, content: str, blocks: list[ReadBlock]) -> None:
    call = ToolCall("c", "read_file", arguments)
    assert parse_cat_n(Message.tool("c", content), call) == blocks
    assert parse_cat_n(Message.tool("c", content), None) == []
