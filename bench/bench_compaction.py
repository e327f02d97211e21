"""P2 — a full planned compaction versus one ``json.dumps`` of the same history.

Builds a seeded agent history (~5 MB, 2,000 messages: user asks, assistant tool
calls, large tool results, long assistant answers with ``<reasoning>`` blocks,
a few verbatim recalls), then in one run measures

(a) ``json.dumps([m.to_dict() for m in history])`` (median of several), and
(b) one :meth:`ctxrecover.compaction.HistoryCompactor.compact` that runs every
    level: trim, a summary from an instant summarizer (a short fixed answer,
    at a budget it cannot reach), then emergency truncation and content
    shrinking (median of several, each on a freshly built history so no size
    cache is warm; the budget is found once by untimed dry runs, ``_budget``),

and reports (b)/(a); the target is ≤ 2. The same ratio at 1, 2, 4, 8 and 16 MB
(400 messages per MB) shows that compaction grows linearly. Run it with
``python bench/bench_compaction.py``; ``run()`` returns the measures as a dict.
"""

from __future__ import annotations

import gc
import json
import random
import statistics
import time
from typing import Any

import _histories

from ctxrecover.archive import MemoryArchive
from ctxrecover.compaction import HistoryCompactor
from ctxrecover.events import EventBus, StatusEvent
from ctxrecover.messages import Message, ToolCall
from ctxrecover.policy import DEFAULT_POLICY
from ctxrecover.sizes import total_weight
from ctxrecover.summarize import CancelToken, SummaryResult

MIB = 1024 * 1024
MESSAGES = 2_000
TARGET_BYTES = 5 * MIB
MESSAGES_PER_MIB = 400
SCALES_MB = (1, 2, 4, 8, 16)
TARGET_RATIO = 2.0
REPEATS = 7
SCALE_REPEATS = 5
SEED = 4321
KEEP_RECENT = 10
VERBATIM_EVERY = 50  # every 50th turn's user message is a verbatim @recall result
REASONING_EVERY = 3  # every 3rd answer carries a <reasoning> block
SHRINK_MARK = "chars omitted for context efficiency"

WORDS = (
    "the function returns a value when called with the right arguments and otherwise "
    "raises an error; see path/to/module.py line 42 for the parser and its tests — "
    'quote " backslash \\ tab \t def class import return naïve café'
).split(" ")
SYSTEM_PROMPT = "You are a careful coding agent."
TURN_OVERHEAD_CHARS = 1_900  # a turn's chars besides its tool result
FIXED_SUMMARY = (
    "## Files Read\n- src/parser.py (400 lines) — tokenizer and grammar\n\n"
    "## Current Task State\n- Done: parser fixes\n- Pending: report writer"
)


class InstantSummarizer:
    """Answers a short fixed summary at once (the LLM's latency is not what is measured)."""

    window_tokens = 128_000

    def summarize(
        self,
        prompt: str,
        *,
        instruction: str | None = None,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
    ) -> SummaryResult:
        return SummaryResult(FIXED_SUMMARY, input_tokens=len(prompt) // 4, output_tokens=40)


def _text(rng: random.Random, chars: int) -> str:
    return _histories.random_text(rng, chars, WORDS)


def _turn(rng: random.Random, index: int, tool_chars: int) -> list[Message]:
    """One agent turn: user ask, assistant tool call, tool result, long assistant answer."""
    call = ToolCall(f"call_{index}", "read_file", json.dumps({"path": f"src/mod_{index}.py"}))
    answer = _text(rng, 1200)
    if index % REASONING_EVERY == 0:
        answer = f"<reasoning>{_text(rng, 600)}</reasoning>\n\n\n\n{answer}"
    return [
        Message.user(_text(rng, 300), preserve_verbatim=index % VERBATIM_EVERY == 0),
        Message.assistant(_text(rng, 120), tool_calls=[call]),
        Message.tool(call.id, _text(rng, tool_chars), name="read_file"),
        Message.assistant(answer),
    ]


def build_history(
    *, seed: int = SEED, messages: int = MESSAGES, target_bytes: int = TARGET_BYTES
) -> list[Message]:
    """A seeded agent history of ``messages`` messages weighing about ``target_bytes``."""
    return _histories.build_history(
        _turn,
        system=SYSTEM_PROMPT,
        seed=seed,
        messages=messages,
        target_bytes=target_bytes,
        turn_overhead=TURN_OVERHEAD_CHARS,
    )


def _budget(history: list[Message]) -> int:
    """The smallest budget at which Level 2 is attempted, by bisection over untimed dry runs.

    The compactor makes no summarizer call a summary could not pay off (even an empty one
    would leave the recent messages over budget). At this budget an empty summary would just
    fit, so the instant summary does not (truncation follows), and the truncation notice, a
    few dozen chars longer than an empty summary's framing, leaves the history over budget
    (content shrinking follows): every level runs.
    """
    lo, hi = total_weight(history[-KEEP_RECENT:]) // 2, 2 * total_weight(history[-KEEP_RECENT:])
    while lo < hi:
        mid = (lo + hi) // 2
        if _compact_at(history, mid)[2]["levels"]["summary"]:
            hi = mid
        else:
            lo = mid + 1
    levels = _compact_at(history, lo)[2]["levels"]
    if not all(levels.values()):
        raise RuntimeError(f"no budget runs every compaction level on this history: {levels}")
    return lo


def _compact_at(history: list[Message], budget: int) -> tuple[list[Message], float, dict[str, Any]]:
    statuses: list[str] = []
    bus = EventBus(lambda e: statuses.append(e.message) if isinstance(e, StatusEvent) else None)
    compactor = HistoryCompactor(DEFAULT_POLICY, MemoryArchive(), summarizer=InstantSummarizer(), events=bus)
    start = time.perf_counter()
    result = compactor.compact(history, budget_chars=budget, keep_recent=KEEP_RECENT)
    elapsed = time.perf_counter() - start
    report = result.report
    levels = {
        "trim": any(s.startswith("🧹") for s in statuses),
        "summary": any(s.startswith("✓ Summary applied") for s in statuses),
        "emergency": any(s.startswith("✂") for s in statuses),
        "shrink": any(SHRINK_MARK in m.content for m in result.history),
    }
    return (
        result.history,
        elapsed,
        {"level": report.level, "reached_budget": report.reached_budget, "levels": levels},
    )


def measure(size_bytes: int, messages: int, repeats: int) -> dict[str, Any]:
    """Median dumps time and median compaction time at one size.

    The two are timed alternately (so a noisy neighbour slows both alike), each after
    a ``gc.collect()``; every compaction gets a freshly built history (cold size caches).
    """
    history = build_history(messages=messages, target_bytes=size_bytes)
    budget = _budget(build_history(messages=messages, target_bytes=size_bytes))  # the same seeded history
    dumps: list[float] = []
    compactions: list[float] = []
    detail: dict[str, Any] = {}
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        json.dumps([m.to_dict() for m in history])
        dumps.append(time.perf_counter() - start)
        fresh = build_history(messages=messages, target_bytes=size_bytes)
        gc.collect()
        _, elapsed, detail = _compact_at(fresh, budget)
        compactions.append(elapsed)
    dumps_s, compact_s = statistics.median(dumps), statistics.median(compactions)
    return {
        "weight_mb": total_weight(history) / MIB,
        "messages": len(history),
        "dumps_ms": dumps_s * 1e3,
        "compact_ms": compact_s * 1e3,
        "ratio": compact_s / dumps_s,
        **detail,
    }


def run() -> dict[str, Any]:
    """Measure the 5 MB / 2,000-message case and the 1–16 MB scaling series."""
    main = measure(TARGET_BYTES, MESSAGES, REPEATS)
    scaling = {mb: measure(mb * MIB, mb * MESSAGES_PER_MIB, SCALE_REPEATS) for mb in SCALES_MB}
    ok = main["ratio"] <= TARGET_RATIO
    return {"main": main, "scaling": scaling, "target_ratio": TARGET_RATIO, "ok": ok}


def _row(label: str, m: dict[str, Any]) -> str:
    return (
        f"{label:>8} {m['weight_mb']:8.2f} {m['messages']:8d} {m['dumps_ms']:9.1f} "
        f"{m['compact_ms']:11.1f} {m['ratio']:6.2f}  L{m['level']} "
        f"{'+'.join(k for k, v in m['levels'].items() if v)}"
    )


def main() -> None:
    results = run()
    print(f"{'case':>8} {'MB':>8} {'msgs':>8} {'dumps ms':>9} {'compact ms':>11} {'ratio':>6}  levels")
    print(_row("main", results["main"]))
    for mb, m in results["scaling"].items():
        print(_row(f"{mb} MB", m))
    verdict = "OK" if results["ok"] else "OVER TARGET"
    print(f"target: compaction ≤ {TARGET_RATIO:g} × json.dumps — {verdict}")


if __name__ == "__main__":
    main()
