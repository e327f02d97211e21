"""No path that removes or rewrites content loses an image (issue 26 item 1), checked by the exact ledger.

A hypothesis state machine grows an agent history whose messages carry images at
random positions — user screenshots, images inside tool results, on assistant
messages, on verbatim recalls and on tool feedback; PNG, JPEG, GIF and WebP
headers of random sizes, URL-only images, undecodable data and the same image
sent again — and drives every path that cuts or rewrites a history: the
turn-boundary passes (microcompact, dedup of reads, tool-result budget, pairing
repair, skill aging), planned compaction at random budgets with an extractive
summarizer (which quotes the image notes it reads) or a failing one, emergency
truncation and shrinking, recovery Levels 1–3 (also filling the cap), archiving images,
setting a message aside, withholding a content block's culprit and mirroring the provider's
context editing. After every step
the simulator's :class:`~simulator.research.ledger.LossLedger` — occurrence
exact, each archive write counted — finds every original piece, image bytes
included, in the history or behind a marker it reaches, and no marker
dangles.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from ctxrecover.classify import Failure, FailureKind
from ctxrecover.compaction import HistoryCompactor
from ctxrecover.messages import Image, Message, ToolCall
from ctxrecover.passes import (
    age_skill_blocks,
    apply_microcompact,
    cap_assistant_messages,
    dedup_repeated_reads,
    emergency_truncate,
    enforce_tool_result_budget,
    keep_last,
    repair_pairing,
    shrink_to_budget,
    trim_history,
)
from ctxrecover.passes.parts import archive_images, set_aside
from ctxrecover.passes.withhold import parts_of, withhold
from ctxrecover.policy import Policy
from ctxrecover.recovery import RecoveryContext, RecoveryLadder, recover
from ctxrecover.sizes import total_weight
from ctxrecover.summarize.context_editing import mirror_applied_edits
from simulator.recorder import CountingArchive
from simulator.research.ledger import Losses, LossLedger
from simulator.summarizers import ExtractiveSummarizer, FailingSummarizer

POLICY = Policy()
LADDER = RecoveryLadder.default(POLICY)
FORMATS = ("png", "jpeg", "gif", "webp", "url", "undecodable")
SIZES = st.sampled_from([40, 300, 3500, 9000, 24_000])


def image_bytes(fmt: str, width: int, height: int, filler: int) -> bytes:
    """A file of ``fmt`` whose header states ``width`` × ``height``, then ``filler`` bytes of noise."""
    noise = bytes((i * 131 + width * 7 + height) % 256 for i in range(filler))
    if fmt == "png":
        ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
        chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
        return b"\x89PNG\r\n\x1a\n" + chunk + noise
    if fmt == "gif":
        return b"GIF89a" + struct.pack("<HH", width, height) + noise
    if fmt == "webp":
        vp8x = b"VP8X" + struct.pack("<I", 10) + b"\x00" * 4
        vp8x += (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
        return b"RIFF" + struct.pack("<I", 4 + len(vp8x) + len(noise)) + b"WEBP" + vp8x + noise
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + b"\x00" * 9 + sof + noise


@st.composite
def any_image(draw: st.DrawFn) -> Image:
    fmt = draw(st.sampled_from(FORMATS))
    if fmt == "url":
        return Image(url=f"https://example.test/shot-{draw(st.integers(0, 5))}.png")
    if fmt == "undecodable":
        return Image(data="!!not base64!!" * draw(st.integers(1, 400)), media_type="image/png")
    width, height = draw(st.integers(1, 4000)), draw(st.integers(1, 4000))
    raw = image_bytes(fmt, width, height, draw(st.sampled_from([0, 200, 3000, 20_000])))
    return Image(data=base64.b64encode(raw).decode("ascii"), media_type=f"image/{fmt}")


class ImagesMachine(RuleBasedStateMachine):
    """One history under random growth (images anywhere) and every rewriting path."""

    def __init__(self) -> None:
        super().__init__()
        self.archive = CountingArchive()
        self.ledger = LossLedger(self.archive, track_writes=True)
        self.archive.on_write = self.ledger.archived
        self.compactor = HistoryCompactor(POLICY, self.archive)
        self.history: list[Message] = []
        self.seen: list[Image] = []  # images sent before, sent again by some messages
        self.counter = 0
        self.tool_limits = (POLICY.tool_result_budget_chars, POLICY.tool_result_max_chars)

    # -- building blocks ----------------------------------------------------------------------
    def text(self, size: int, prefix: str = "") -> str:
        self.counter += 1
        tag = f"[m{self.counter}]"
        filler = f"line {self.counter} of some output\n" * max(0, (size - 2 * len(tag)) // 28)
        return f"{prefix}{tag} {filler}{tag}"

    def images(self, data: st.DataObject) -> tuple[Image, ...]:
        drawn: list[Image] = []
        for _ in range(data.draw(st.sampled_from([0, 0, 1, 1, 2, 3]))):
            again: bool = data.draw(st.booleans()) if self.seen else False
            if again:
                drawn.append(data.draw(st.sampled_from(self.seen)))  # the same screenshot again
            else:
                drawn.append(data.draw(any_image()))
                self.seen.append(drawn[-1])
        return tuple(drawn)

    def add(self, *messages: Message) -> None:
        self.history.extend(messages)
        self.ledger.add_originals(messages)

    # -- growth -------------------------------------------------------------------------------
    @initialize(system=st.booleans())
    def start(self, system: bool) -> None:
        if system:
            self.add(Message.system("You are a careful coding agent. Use the tools."))
        self.add(Message.user(self.text(120, "Task: ")))

    @rule(
        data=st.data(), kind=st.sampled_from(["user", "feedback", "assistant", "tools", "read", "verbatim"])
    )
    def grow(self, data: st.DataObject, kind: str) -> None:
        size = data.draw(SIZES)
        if kind == "user":
            self.add(Message.user(self.text(size), images=self.images(data)))
        elif kind == "feedback":
            self.add(Message.user(self.text(max(size, 3500)), images=self.images(data), agent_feedback=True))
        elif kind == "assistant":
            self.add(Message.assistant(self.text(size), images=self.images(data)))
        elif kind == "verbatim":
            self.add(
                Message.user(
                    self.text(size, "@recall result: "), images=self.images(data), preserve_verbatim=True
                )
            )
        else:
            self.add_tools(data, size, read=kind == "read")

    def add_tools(self, data: st.DataObject, size: int, *, read: bool) -> None:
        count = data.draw(st.integers(1, 3))
        calls = [
            ToolCall(f"call_{self.counter}_{i}", "read_file", json.dumps({"path": f"src/f{i % 2}.py"}))
            for i in range(count)
        ]
        results = []
        for call in calls:
            body = self.text(size)
            if read:
                path = json.loads(call.arguments)["path"]
                numbered = "".join(f"{n:>6}\t{line}\n" for n, line in enumerate(body.splitlines(), 1))
                body = f"<<< FILE: {path} >>>\n{numbered}"
            results.append(Message.tool(call.id, body, images=self.images(data)))
        if data.draw(st.booleans()) and len(results) > 1:
            results.insert(1, Message.user(self.text(60, "Also: ")))  # relocated by pairing repair
        if data.draw(st.booleans()):
            results.pop()  # a dangling call: pairing repair adds a synthetic result
        self.add(
            Message.assistant(self.text(40, "Calling tools. "), calls, images=self.images(data)), *results
        )

    # -- the paths that cut or rewrite ---------------------------------------------------------
    @rule(turns=st.tuples(st.integers(1, 3), st.integers(3, 6)))
    def microcompact(self, turns: tuple[int, int]) -> None:
        self.history, _ = apply_microcompact(
            self.history, archive=self.archive, truncate_turns=turns[0], summarize_turns=turns[1]
        )

    @rule()
    def dedup(self) -> None:
        self.history, _ = dedup_repeated_reads(self.history, archive=self.archive)

    @rule(limits=st.sampled_from([(6000, 2000), (20_000, 5000), (200_000, 20_000)]))
    def tool_budget(self, limits: tuple[int, int]) -> None:
        budget, max_chars = limits
        self.history, _ = enforce_tool_result_budget(
            self.history,
            archive=self.archive,
            turn_budget_chars=budget,
            max_result_chars=max_chars,
            preview_head=max_chars // 2,
            preview_tail=max_chars // 5,
        )

    @rule()
    def pairing(self) -> None:
        self.history, _ = repair_pairing(self.history, archive=self.archive)

    @rule()
    def trim(self) -> None:
        self.history, _ = trim_history(self.history, archive=self.archive)

    @rule()
    def skills(self) -> None:
        self.history, _ = age_skill_blocks(self.history, archive=self.archive, age_turns=1)

    @rule(percent=st.integers(1, 100))
    def shrink(self, percent: int) -> None:
        budget = total_weight(self.history) * percent // 100
        self.history, _ = shrink_to_budget(self.history, budget, archive=self.archive)

    @rule(keep=st.integers(0, 12))
    def emergency(self, keep: int) -> None:
        self.history, _ = emergency_truncate(self.history, keep, archive=self.archive)

    @rule(cap=st.sampled_from([200, 1000, 5000]))
    def cap_assistants(self, cap: int) -> None:
        self.history, _ = cap_assistant_messages(self.history, cap, archive=self.archive)

    @rule(keep=st.integers(2, 12), cap=st.sampled_from([None, 200, 4000]))
    def keep_last(self, keep: int, cap: int | None) -> None:
        self.history, _ = keep_last(self.history, keep, archive=self.archive, per_message_cap=cap)

    @rule(keep=st.integers(0, 8), user_first=st.booleans())
    def images_to_archive(self, keep: int, user_first: bool) -> None:
        self.history, _ = archive_images(
            self.history, archive=self.archive, keep_recent=keep, user_first=user_first
        )

    @rule(data=st.data())
    def set_aside(self, data: st.DataObject) -> None:
        self.history, _ = set_aside(
            self.history, data.draw(st.integers(0, len(self.history) - 1)), archive=self.archive
        )

    @rule(data=st.data())
    def withhold(self, data: st.DataObject) -> None:
        """A content block's culprit withheld (SPEC §12): text and images archived behind the stub."""
        parts = parts_of(self.history, [data.draw(st.integers(0, len(self.history) - 1))])
        if parts:
            self.history, _ = withhold(
                self.history, [data.draw(st.sampled_from(parts))], archive=self.archive
            )

    @rule(cleared=st.integers(1, 6))
    def context_editing(self, cleared: int) -> None:
        response = {"context_management": {"applied_edits": [{"cleared_tool_uses": cleared}]}}
        self.history, _ = mirror_applied_edits(self.history, response, archive=self.archive)

    @rule(
        percent=st.integers(2, 110),
        keep=st.integers(0, 10),
        summarizer=st.sampled_from(["extractive", "failing", "none"]),
        images_first=st.booleans(),
    )
    def compact(self, percent: int, keep: int, summarizer: str, images_first: bool) -> None:
        """A planned compaction; with ``images_first`` as a session plans it (images outside the kept
        messages archived first, so a summary reads and may quote their notes)."""
        if images_first:
            self.history, _ = archive_images(
                self.history, archive=self.archive, keep_recent=keep, user_first=False
            )
        self.compactor.summarizer = {
            "extractive": ExtractiveSummarizer(),
            "failing": FailingSummarizer(),
            "none": None,
        }[summarizer]
        budget = max(400, total_weight(self.history) * percent // 100)
        self.history = self.compactor.compact(self.history, budget_chars=budget, keep_recent=keep).history

    @rule(
        attempt=st.integers(1, 3),
        kind=st.sampled_from([FailureKind.CONTEXT_OVERFLOW, FailureKind.WAF_REJECTION]),
        fill=st.one_of(st.none(), st.integers(0, 100)),
    )
    def recover(self, attempt: int, kind: FailureKind, fill: int | None) -> None:
        """A ladder step; with ``fill`` the retry of a size rejection that fills the cap (SPEC §12):
        images and assistant messages cut oldest first, only down to that share of the weight."""
        ctx = RecoveryContext(
            policy=POLICY,
            archive=self.archive,
            tool_result_budget_chars=self.tool_limits[0],
            tool_result_max_chars=self.tool_limits[1],
            fill_chars=None if fill is None else total_weight(self.history) * fill // 100,
        )
        result = recover(self.history, Failure(kind), attempt, ladder=LADDER, ctx=ctx)
        self.tool_limits = (result.tool_result_budget_chars, result.tool_result_max_chars)
        self.history = result.history

    # -- the check ----------------------------------------------------------------------------
    @invariant()
    def nothing_is_lost(self) -> None:
        self.ledger.observe(self.history)
        lost = [(field, value[:40], missing) for field, value, missing in self.ledger.deficits()[:3]]
        assert self.ledger.losses == Losses(), f"lost: {lost}"
        assert self.ledger.dangling_markers == 0


def test_no_path_loses_an_image_or_anything_else() -> None:
    run_state_machine_as_test(
        ImagesMachine,
        settings=settings(
            max_examples=80,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        ),
    )


def test_the_check_catches_an_image_dropped_without_its_bytes_archived() -> None:
    machine = ImagesMachine()
    machine.start(system=False)
    shot = Image(data=base64.b64encode(image_bytes("png", 800, 600, 100)).decode("ascii"))
    machine.add(Message.user("look", images=(shot,)), Message.assistant("seen"))
    machine.nothing_is_lost()
    machine.history[1] = machine.history[1].replace(images=())  # a pass that forgets the image
    try:
        machine.nothing_is_lost()
    except AssertionError as error:
        assert "image" in str(error)
    else:
        raise AssertionError("the ledger's check let a dropped image through")
