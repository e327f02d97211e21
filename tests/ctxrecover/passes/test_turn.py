"""TurnPasses: the session's passes stay usable after a step raises half-way."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from ctxrecover.archive import MemoryArchive
from ctxrecover.errors import ArchiveFullError
from ctxrecover.messages import Message, ToolCall
from ctxrecover.passes.turn import TurnPasses
from ctxrecover.policy import Policy


class RefusingOnce(MemoryArchive):
    """A memory archive whose next write is refused as full, once."""

    refuse = False

    def _check(self, needed: int) -> None:
        if self.refuse:
            self.refuse = False
            raise ArchiveFullError("full", path="<memory>", needed=needed, max_bytes=0, pinned_bytes=0)

    def put(self, content: str) -> str:
        self._check(len(content))
        return super().put(content)

    def put_keyed(self, entries: Sequence[tuple[str, str]]) -> None:
        self._check(sum(len(content) for _, content in entries))
        super().put_keyed(entries)


def _history(turns: int) -> list[Message]:
    history: list[Message] = [Message.system("sys")]
    for n in range(turns):
        call = ToolCall(f"c{n}", "run", "{}")
        history += [
            Message.user(f"turn {n}"),
            Message.assistant("", tool_calls=(call,)),
            Message.tool(f"c{n}", f"output {n} " * 400),
        ]
    return history


@pytest.mark.parametrize("incremental", [True, False], ids=["incremental", "full"])
def test_a_fold_refused_by_the_archive_is_not_made_and_the_passes_stay_equal_to_the_full_ones(
    incremental: bool,
) -> None:
    policy = Policy(microcompact_truncate_turns=2, microcompact_summarize_turns=4)
    archive, reference_archive = RefusingOnce(), MemoryArchive()
    passes = TurnPasses(policy, archive, "openai-chat", model="m", incremental=incremental)
    reference = TurnPasses(policy, reference_archive, "openai-chat", model="m", incremental=False)
    history = _history(3)
    passes.microcompact(history)
    archive.refuse = True
    history = _history(8)  # old results cross the truncation age: microcompact archives them
    unchanged, report = passes.microcompact(history)  # housekeeping: refused, so not folded
    assert unchanged is history and not report.changed
    folded, report = passes.microcompact(history)  # the archive has room again: the fold happens
    assert report.changed and (folded, report) == reference.microcompact(history)
    assert passes.weight(history) == reference.weight(history)


def test_dedup_refused_by_the_archive_keeps_every_read() -> None:
    read = ToolCall("r1", "read_file", '{"path": "a.py"}')
    again = ToolCall("r2", "read_file", '{"path": "a.py"}')
    text = "<<< FILE: a.py >>>\n" + "\n".join(f"{n:>6}\tline {n}" for n in range(1, 400))
    history = [
        Message.user("read a.py twice"),
        Message.assistant("", tool_calls=(read,)),
        Message.tool("r1", text),
        Message.assistant("", tool_calls=(again,)),
        Message.tool("r2", text),
    ]
    archive = RefusingOnce()
    passes = TurnPasses(Policy(), archive, "openai-chat", model="m")
    archive.refuse = True
    assert passes.dedup(history) is history
    assert passes.dedup(history)[2].content.startswith("[Earlier read of a.py superseded")
