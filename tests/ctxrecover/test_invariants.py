"""Stateful invariants of planned compaction and the recovery ladder (hypothesis ``stateful``).

Random agent histories grow (user text, parallel tool calls with their results —
sometimes with a user message in between, sometimes left dangling —, verbatim
recalls, huge results, images, reasoning blocks, format errors) while planned
compactions at random budgets and recovery-ladder steps rewrite them. After every
step: the outgoing copy pairs, the system prefix is byte-identical, verbatim
messages survive (or age out under the 25% cap / the Level-3 cap), the history
starts with a user message after Levels 2–3, every original text is still in the
history or recallable through its markers, inputs are never mutated, compaction
converges and the ladder ends within its attempts.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from ctxrecover.archive import Archive, MemoryArchive
from ctxrecover.classify import Failure, FailureKind
from ctxrecover.compaction import (
    LEVEL_SUMMARY,
    LEVEL_TRUNCATION,
    CompactionReport,
    HistoryCompactor,
)
from ctxrecover.errors import SummarizerError
from ctxrecover.events import EventBus
from ctxrecover.messages import Image, Message, ToolCall
from ctxrecover.passes.pairing import repair_pairing, validate_pairing
from ctxrecover.passes.truncate import leading_system_count
from ctxrecover.policy import Policy
from ctxrecover.recovery import (
    PAYLOAD_LIMIT_MARKER,
    GatewayModel,
    Level2,
    RecoveryContext,
    RecoveryLadder,
    recover,
    repair_malformed,
)
from ctxrecover.sizes import total_weight, weight
from ctxrecover.summarize import CancelToken, SummaryResult

POLICY = Policy()
LADDER = RecoveryLadder.default(POLICY)
RECOVERABLE_KINDS = (
    FailureKind.CONTEXT_OVERFLOW,
    FailureKind.PAYLOAD_TOO_LARGE,
    FailureKind.WAF_REJECTION,
    FailureKind.SUSPECTED_PAYLOAD,
    FailureKind.MALFORMED_HISTORY,
)
# Fixed texts a compaction may add in place of what it removes (summary header and
# recall note, truncation notice, recall suffixes): the most a history may grow by.
NOTICE_ALLOWANCE = 1000
PNG_1X1 = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
    )
).decode()

SIZES = st.sampled_from([30, 200, 900, 3500, 7000])
HUGE = st.integers(21_000, 30_000)
GROWTH = ("user", "assistant", "tool_turn", "huge_tool_result", "verbatim_recall", "image")


class DeterministicSummarizer:
    """Answers from the prompt's length (stable), refuses, or fails, as configured."""

    window_tokens = 16_000

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour

    def summarize(
        self,
        prompt: str,
        *,
        instruction: str | None = None,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
    ) -> SummaryResult:
        if self.behaviour == "fail":
            raise SummarizerError("summarizer down")
        if self.behaviour == "refuse":
            return SummaryResult("I'm sorry, I cannot help with that.")
        return SummaryResult(
            "## Current Task State\n"
            f"- a segment prompt of {len(prompt)} chars was summarized deterministically\n"
            "## Key Decisions\n- none recorded\n"
        )


def snapshot(history: Sequence[Message]) -> tuple[list[Message], list[dict[str, Any]]]:
    return list(history), [m.to_dict() for m in history]


def assert_unmutated(history: Sequence[Message], before: tuple[list[Message], list[dict[str, Any]]]) -> None:
    objects, dicts = before
    assert len(history) == len(objects) and all(a is b for a, b in zip(history, objects, strict=True))
    assert [m.to_dict() for m in history] == dicts


def first_after_system(history: Sequence[Message]) -> Message | None:
    return next((m for m in history[leading_system_count(history) :]), None)


class HistoryMachine(RuleBasedStateMachine):
    """One session's history under random growth, compaction and recovery."""

    #: ``assert_nothing_lost`` from tests/conftest.py, installed by the test below.
    nothing_lost: ClassVar[Callable[[Sequence[Message], Sequence[Message], Archive], None]]

    def __init__(self) -> None:
        super().__init__()
        self.archive = MemoryArchive()
        self.events = EventBus()
        self.compactor = HistoryCompactor(POLICY, self.archive, events=self.events)
        self.gateway = GatewayModel()
        self.system: list[Message] = []
        self.history: list[Message] = []
        self.originals: list[Message] = []
        self.counter = 0
        self.tool_limits = (POLICY.tool_result_budget_chars, POLICY.tool_result_max_chars)

    # -- building blocks --------------------------------------------------------------------
    def text(self, size: int, prefix: str = "") -> str:
        """A unique text of about ``size`` chars: a tag at both ends, so no cut keeps it whole."""
        self.counter += 1
        tag = f"[m{self.counter}]"
        filler = f"line {self.counter} of some output\n" * max(0, (size - 2 * len(tag)) // 28)
        return f"{prefix}{tag} {filler}{tag}"

    def add(self, *messages: Message) -> None:
        self.history.extend(messages)
        self.originals.extend(m for m in messages if m.content)

    def call_id(self, index: int, reuse: bool) -> str:
        return f"web_fetch:{index}" if reuse else f"call_{self.counter}_{index}"

    # -- growth rules -----------------------------------------------------------------------
    @initialize(systems=st.integers(0, 2))
    def start(self, systems: int) -> None:
        if systems >= 1:
            self.system.append(Message.system("You are a careful coding agent. Use the tools."))
        if systems == 2:
            parts = ("## Tools\nread_file, run", "## Skills\nrefactoring")
            self.system.append(Message.system("\n\n".join(parts), system_parts=parts))
        self.history = list(self.system)
        self.add(Message.user(self.text(120, "Task: ")))

    @rule(data=st.data(), kinds=st.lists(st.sampled_from(GROWTH), min_size=1, max_size=4))
    def grow(self, data: st.DataObject, kinds: list[str]) -> None:
        """Append a few turns (one rule, so rewriting steps are drawn as often as growth)."""
        for kind in kinds:
            getattr(self, f"add_{kind}")(data)

    def add_user(self, data: st.DataObject) -> None:
        size = data.draw(SIZES)
        kind = data.draw(st.sampled_from(["plain", "format_error", "feedback"]))
        if kind == "format_error":
            self.add(Message.user(self.text(size, "FORMAT ERROR: "), agent_feedback=True))
        elif kind == "feedback":
            block = "<tool_output>" + self.text(max(size, 6000)) + "</tool_output>"
            self.add(Message.user(self.text(size) + block, agent_feedback=True))
        else:
            self.add(Message.user(self.text(size)))

    def add_assistant(self, data: st.DataObject) -> None:
        body = self.text(data.draw(SIZES))
        if data.draw(st.booleans()):
            body = "<reasoning>" + self.text(data.draw(SIZES)) + "</reasoning>\n\n\n\n" + body
        self.add(Message.assistant(body))

    def add_tool_turn(self, data: st.DataObject) -> None:
        """Parallel calls and their results, sometimes with a user message between two results
        (relocated by pairing repair) and sometimes with the last call left dangling."""
        sizes = data.draw(st.lists(SIZES, min_size=1, max_size=3))
        reuse_ids = data.draw(st.booleans())  # providers reuse ids like web_fetch:0 across turns
        calls = [
            ToolCall(self.call_id(i, reuse_ids), "read_file", f'{{"n": {i}}}') for i in range(len(sizes))
        ]
        results = [Message.tool(call.id, self.text(size)) for call, size in zip(calls, sizes, strict=True)]
        if data.draw(st.booleans()):
            results.pop()
        if data.draw(st.booleans()) and results:
            results.insert(1, Message.user(self.text(60, "Also: ")))
        self.add(Message.assistant(self.text(40, "Calling tools. "), calls), *results)

    def add_huge_tool_result(self, data: st.DataObject) -> None:
        call = ToolCall(self.call_id(0, False), "run", '{"cmd": "cat big.log"}')
        self.add(Message.assistant("", [call]), Message.tool(call.id, self.text(data.draw(HUGE))))

    def add_verbatim_recall(self, data: st.DataObject) -> None:
        size = data.draw(SIZES)
        if data.draw(st.booleans()):
            call = ToolCall(self.call_id(0, False), "recall", '{"key": "<<ccr:0123456789abcdef>>"}')
            result = Message.tool(call.id, self.text(size, "recalled: "), preserve_verbatim=True)
            self.add(Message.assistant("", [call]), result)
        else:
            self.add(Message.user(self.text(size, "@recall result: "), preserve_verbatim=True))

    def add_image(self, data: st.DataObject) -> None:
        image = Image(data=PNG_1X1) if data.draw(st.booleans()) else Image(url="https://example.test/d.png")
        self.add(Message.user(self.text(80, "See the image: "), images=(image,)))

    # -- rewriting rules --------------------------------------------------------------------
    @rule(
        budget_percent=st.integers(2, 120),
        keep=st.integers(0, 10),
        behaviour=st.sampled_from(["none", "good", "refuse", "fail"]),
    )
    def compact(self, budget_percent: int, keep: int, behaviour: str) -> None:
        """A planned compaction at a budget between 2% and 120% of the current weight."""
        self.compactor.summarizer = None if behaviour == "none" else DeterministicSummarizer(behaviour)
        source = self.history
        budget = max(400, total_weight(source) * budget_percent // 100)
        before = snapshot(source)
        was_valid = validate_pairing(source)
        result = self.compactor.compact(source, budget_chars=budget, keep_recent=keep)
        assert_unmutated(source, before)
        report = result.report
        out = result.history

        assert report.chars_before == total_weight(source) and report.chars_after == total_weight(out)
        if total_weight(source) <= budget:
            assert report.skipped and out == source
        if was_valid:
            assert validate_pairing(out), "compaction broke the pairing of a valid history"
        self.check_convergence(out, report)
        self.check_verbatim_survives(source, out, budget, report)
        if report.level in (LEVEL_SUMMARY, LEVEL_TRUNCATION):
            first = first_after_system(out)
            assert first is None or first.role == "user"
        self.history = out

    @rule(
        kind=st.sampled_from(RECOVERABLE_KINDS),
        attempts=st.sampled_from([(1,), (2,), (3,), (1, 2, 3)]),
        size_known=st.booleans(),
    )
    def recover_step(self, kind: FailureKind, attempts: tuple[int, ...], size_known: bool) -> None:
        """One ladder step for a random attempt, or a whole turn's worth of attempts."""
        for attempt in attempts:
            self.recover(kind, attempt, size_known)
        if len(attempts) > 1 and kind is not FailureKind.MALFORMED_HISTORY:
            # the ladder ends within its attempts: the last 4 messages (≤ 4000 chars each)
            # plus at most the recall note, the compacted-context notice and the payload notice
            non_system = self.history[leading_system_count(self.history) :]
            assert len(non_system) <= POLICY.nuclear_keep_messages + 3
            assert all(len(m.content) <= POLICY.nuclear_message_max_chars for m in non_system)

    def recover(self, kind: FailureKind, attempt: int, size_known: bool) -> None:
        source = self.history
        before = snapshot(source)
        rejected = (
            total_weight(source) * 2 + 10_000
            if size_known and kind is not FailureKind.MALFORMED_HISTORY
            else None
        )
        failure = Failure(kind, rejected_bytes=rejected)
        ctx = RecoveryContext(
            policy=POLICY,
            archive=self.archive,
            tool_result_budget_chars=self.tool_limits[0],
            tool_result_max_chars=self.tool_limits[1],
        )
        self.gateway = self.gateway.judge(failure, request_bytes=rejected, policy=POLICY).model
        if kind is FailureKind.MALFORMED_HISTORY:  # what a turn does for it: pairing repair, no ladder
            repaired, _ = repair_malformed(source, self.archive)
            assert_unmutated(source, before)
            assert validate_pairing(repaired), "pairing repair must leave a pairing-valid history"
            self.history = repaired
            return
        payload_notice = failure.is_payload and not self.gateway.payload_notice_sent
        result = recover(source, failure, attempt, ladder=LADDER, ctx=ctx, payload_notice=payload_notice)
        assert_unmutated(source, before)
        if payload_notice:
            self.gateway = self.gateway.replace(payload_notice_sent=True)
        out = result.history
        assert result.level == min(attempt, len(LADDER))
        assert validate_pairing(out), "a ladder step must leave a pairing-valid history"
        if result.level == 1:
            self.check_verbatim_survives(source, out, None, None)
        if result.level >= 2:
            first = first_after_system(out)
            assert first is not None and first.role == "user"
        self.tool_limits = (result.tool_result_budget_chars, result.tool_result_max_chars)
        assert self.tool_limits[0] <= POLICY.tool_result_budget_chars
        self.history = out

    # -- per-step checks --------------------------------------------------------------------
    def check_convergence(self, out: list[Message], report: CompactionReport) -> None:
        assert report.chars_after <= max(report.chars_before, report.budget_chars) + NOTICE_ALLOWANCE
        if report.reached_budget:
            return
        # Over budget after Level 3 only when shrinking ran out of room: every message it may cut is
        # at its floor, and what remains is system prompt, verbatim text, tool calls and images.
        shrinkable = [m for m in out if m.role != "system" and not m.preserve_verbatim]
        assert all(len(m.content) <= POLICY.shrink_min_chars for m in shrinkable), [
            len(m.content) for m in shrinkable
        ]

    def check_verbatim_survives(
        self,
        source: list[Message],
        out: list[Message],
        budget: int | None,
        report: CompactionReport | None,
    ) -> None:
        verbatim = [m for m in source if m.preserve_verbatim and m.role != "system"]
        contents = [m.content for m in out]
        missing = [m for m in verbatim if not any(m.content in c for c in contents)]
        if not missing:
            return
        assert report is not None and budget is not None, "a Level-1 recovery lost a verbatim message"
        # aged out (a recall stub, which Level 3 may then drop into its archived transcript)
        assert len(missing) <= report.verbatim_aged_out
        assert sum(weight(m) for m in verbatim) > budget * POLICY.verbatim_budget_fraction

    # -- invariants ------------------------------------------------------------------------
    @invariant()
    def outgoing_copy_pairs(self) -> None:
        outgoing, _ = repair_pairing(self.history, archive=self.archive)
        assert validate_pairing(outgoing)

    @invariant()
    def system_prefix_is_byte_identical(self) -> None:
        prefix = self.history[: len(self.system)]
        assert [m.to_dict() for m in prefix] == [m.to_dict() for m in self.system]
        assert leading_system_count(self.history) == len(self.system)

    @invariant()
    def nothing_is_lost(self) -> None:
        present = {m.content for m in self.history}
        missing = [m for m in self.originals if m.content not in present]
        if missing:
            type(self).nothing_lost(missing, self.history, self.archive)

    @invariant()
    def payload_notice_at_most_once(self) -> None:
        assert sum(PAYLOAD_LIMIT_MARKER in m.content for m in self.history) <= 1


def test_compaction_and_recovery_invariants(
    assert_nothing_lost: Callable[[Sequence[Message], Sequence[Message], Archive], None],
) -> None:
    HistoryMachine.nothing_lost = staticmethod(assert_nothing_lost)  # type: ignore[assignment]
    run_state_machine_as_test(
        HistoryMachine,
        settings=settings(
            max_examples=30,
            stateful_step_count=15,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        ),
    )


# -- a case the machine finds, pinned down ----------------------------------------------------


def test_a_recovery_cut_inside_a_tool_block_keeps_the_cut_result_recallable(
    assert_nothing_lost: Callable[[Sequence[Message], Sequence[Message], Archive], None],
) -> None:
    """Level 2/3 without a Level 1 before them (a custom ladder, or attempt 2 on a fresh
    history): the kept window starts at a user message interposed between two results, so
    the second result loses its call. Whatever pairing repair then removes must stay
    recallable through a marker in the history."""
    calls = [ToolCall("a", "read_file", "{}"), ToolCall("b", "read_file", "{}")]
    history = [
        Message.user("Read both files."),
        Message.assistant("", calls),
        Message.tool("a", "contents of file a"),
        Message.user("Also check the tests."),
        Message.tool("b", "contents of file b"),
    ]
    archive = MemoryArchive()
    ctx = RecoveryContext.from_policy(POLICY, archive)
    for ladder in (LADDER, RecoveryLadder(Level2(keep=2))):
        attempt = len(ladder)
        result = recover(
            history,
            Failure(FailureKind.CONTEXT_OVERFLOW),
            attempt,
            ladder=ladder,
            ctx=ctx,
        )
        assert validate_pairing(result.history)
        assert_nothing_lost(history, result.history, archive)
