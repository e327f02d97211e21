"""P1 — incremental wire sizing versus re-serialising the whole body.

Builds a ~5 MB, 2,000-message agent history (user turns, assistant tool calls,
large tool results, answers; some non-ASCII, quotes and escapes), then in one
run and for each wire format measures

(a) one ``json.dumps`` of the whole rendered body (median of several), and
(b) the budget check after appending one new message through
    :class:`ctxrecover.wire.WireSizeTracker` (median of many),

and reports the ratio (b)/(a); the target is ≤ 0.01. For reference it also
times a warm ``request_size`` of the whole history (every message cached). Run it with
``python bench/bench_sizing.py``; ``run()`` returns the measures as a dict.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from typing import Any

import _histories

from ctxrecover.messages import Message, ToolCall
from ctxrecover.wire import WireFormat, WireSizeTracker, encode_body, render_request, request_size

MESSAGES = 2_000
TARGET_BYTES = 5 * 1024 * 1024
TARGET_RATIO = 0.01
DUMPS_REPEATS = 7
APPEND_REPEATS = 400
SEED = 1234
MODEL = "bench-model"
PAYLOAD_CAP = 8 * 1024 * 1024

WORDS = (
    "the function returns a value when called with the right arguments and "
    "otherwise raises an error naïve café résumé 日本語 テスト 😀 ✓ — "
    'quote " backslash \\ tab \t path/to/file.py def class import return'
).split(" ")
SYSTEM_PROMPT = "You are a careful coding agent. Réponds en français si demandé."
TURN_OVERHEAD_CHARS = 1_500  # a turn's chars besides its tool result


def _text(rng: random.Random, chars: int) -> str:
    return _histories.random_text(rng, chars, WORDS)


def _turn(rng: random.Random, index: int, tool_chars: int) -> list[Message]:
    """One agent turn: user ask, assistant tool call, tool result, assistant answer."""
    call = ToolCall(
        f"call_{index}", "read_file", json.dumps({"path": f"src/módulo_{index}.py", "lines": [1, 400]})
    )
    return [
        Message.user(_text(rng, 300)),
        Message.assistant(_text(rng, 200), tool_calls=[call]),
        Message.tool(call.id, _text(rng, tool_chars), name="read_file"),
        Message.assistant(_text(rng, 900)),
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


def _median_ns(samples: list[int]) -> float:
    return float(statistics.median(samples))


def measure(history: list[Message], fresh: list[Message], fmt: WireFormat) -> dict[str, Any]:
    """Time (a) a full dumps of the body and (b) append-one-message + budget check."""
    body = render_request(history, fmt, model=MODEL)
    dumps_ns = []
    for _ in range(DUMPS_REPEATS):
        start = time.perf_counter_ns()
        json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        dumps_ns.append(time.perf_counter_ns() - start)

    tracker = WireSizeTracker(fmt, model=MODEL)
    tracker.reset(history)
    append_ns = []
    for msg in fresh:
        start = time.perf_counter_ns()
        tracker.append(msg)
        _fits = tracker.size <= PAYLOAD_CAP
        append_ns.append(time.perf_counter_ns() - start)

    recount_ns = []
    for _ in range(DUMPS_REPEATS):
        start = time.perf_counter_ns()
        request_size(history, fmt, model=MODEL)
        recount_ns.append(time.perf_counter_ns() - start)

    exact = tracker.size == len(encode_body(render_request([*history, *fresh], fmt, model=MODEL)))
    full, append = _median_ns(dumps_ns), _median_ns(append_ns)
    return {
        "body_bytes": len(encode_body(body)),
        "full_dumps_ms": full / 1e6,
        "append_check_ms": append / 1e6,
        "warm_recount_ms": _median_ns(recount_ns) / 1e6,
        "ratio": append / full,
        "exact": exact,
    }


def run(*, seed: int = SEED) -> dict[str, Any]:
    """Measure every wire format in one run; returns the numbers for ``bench/run.py``."""
    history = build_history(seed=seed)
    rng = random.Random(seed + 1)
    # fresh objects, so each append measures its message for the first time
    fresh = [m for i in range(APPEND_REPEATS // 4) for m in _turn(rng, MESSAGES + i, 2_500)]
    formats = {str(fmt): measure(history, fresh, fmt) for fmt in WireFormat}
    worst = max(f["ratio"] for f in formats.values())
    return {
        "benchmark": "P1 incremental wire sizing",
        "messages": len(history),
        "history_chars": sum(len(m.content) for m in history),
        "appended_messages": len(fresh),
        "target_ratio": TARGET_RATIO,
        "worst_ratio": worst,
        "passed": worst <= TARGET_RATIO and all(f["exact"] for f in formats.values()),
        "formats": formats,
    }


def main() -> int:
    result = run()
    print(f"P1 incremental sizing — {result['messages']} messages, {result['history_chars']:,} chars")
    header = f"{'format':<18}{'body bytes':>12}{'(a) dumps ms':>14}{'(b) append ms':>15}{'(b)/(a)':>10}"
    print(f"{header}{'warm recount ms':>17}  exact")
    for name, f in result["formats"].items():
        print(
            f"{name:<18}{f['body_bytes']:>12,}{f['full_dumps_ms']:>14.3f}"
            f"{f['append_check_ms']:>15.4f}{f['ratio']:>10.5f}{f['warm_recount_ms']:>17.3f}  {f['exact']}"
        )
    verdict = "PASS" if result["passed"] else "FAIL"
    print(f"worst ratio {result['worst_ratio']:.5f} (target ≤ {TARGET_RATIO}) — {verdict}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
