"""P3 — ctxrecover's emergency truncation versus LangChain's ``trim_messages``.

Both cut the same seeded agent history (P2's: ~5 MB, 2,000 messages) to the same
target size in characters, in one run:

(a) ``langchain_core.messages.trim_messages`` on the history converted to LangChain
    messages (conversion not timed): ``strategy="last"``, ``include_system=True``,
    ``start_on="human"``, ``token_counter`` counting the characters of the contents.
    What it cuts is gone.
(b) ctxrecover's compaction Level 3 as :class:`~ctxrecover.compaction.HistoryCompactor`
    runs it: :func:`~ctxrecover.passes.truncate.emergency_truncate` (the dropped range
    archived as one transcript behind a ``<<ccr:KEY>>`` marker), then
    :func:`~ctxrecover.passes.shrink.shrink_to_budget` while still over the target
    (each cut message archived first). Everything stays recallable. Each round gets a
    freshly built history, so no per-message cache is warm.

It reports (b)/(a); the target is < 1 (faster while also archiving what it drops).

**P3.session** — the cut users hit: recovery Level 2
(:class:`~ctxrecover.recovery.Level2`: pairing repair, keep the last
``emergency_keep_messages``, archive the dropped range, repair again) on a history
whose messages entered through a :class:`~ctxrecover.session.Session` (so each
message's archive keys were computed as it was appended, untimed, as a
conversation spreads them over its turns), against ``trim_messages`` keeping the
same messages (budget: the system prompt plus the last ten messages' characters).
Target < 1, everything Level 2 drops archived.
For reference: the same Level 3 with an archive that stores nothing (what the cut
itself costs, without the content-addressing of the dropped text: UTF-8 encoding and
sha256 of megabytes) and a whole :meth:`HistoryCompactor.compact` without a summarizer
(trim, then Level 3). The target is the system prompt plus the last ``KEEP_RECENT``
messages, less 5 %, so both keep about the last ten messages and shrinking has work.

Without ``langchain-core`` (``pip install -e ".[bench]"``) the comparison is skipped,
not failed. Run it with ``python bench/bench_peers.py``; ``run()`` returns the measures.
"""

from __future__ import annotations

import gc
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench_compaction import build_history

from ctxrecover.archive import Archive, MemoryArchive, archive_range
from ctxrecover.compaction import HistoryCompactor
from ctxrecover.messages import Message
from ctxrecover.passes.pairing import validate_pairing
from ctxrecover.passes.shrink import shrink_to_budget
from ctxrecover.passes.truncate import emergency_truncate
from ctxrecover.policy import DEFAULT_POLICY
from ctxrecover.recovery import Level2, RecoveryContext
from ctxrecover.recovery.ladder import content_chars
from ctxrecover.session import Session
from ctxrecover.sizes import total_weight
from ctxrecover.wire import WireFormat

MESSAGES = 2_000
TARGET_BYTES = 5 * 1024 * 1024
KEEP_RECENT = 10
TARGET_SLACK = 0.95  # the target sits 5 % under the last KEEP_RECENT messages: shrinking runs
REPEATS = 7
TARGET_RATIO = 1.0
SKIPPED = "skipped: pip install -e .[bench]"
NULL_KEY = "0" * 16


class NullArchive:
    """An archive that keeps nothing and hashes nothing: the cost of the cut alone (reference only)."""

    def put(self, content: str) -> str:
        return NULL_KEY

    def archive(self, content: str) -> str | None:
        return NULL_KEY

    def get(self, key: str) -> str | None:
        return None

    def __contains__(self, key: object) -> bool:
        return False


def target_chars(history: list[Message], keep_recent: int = KEEP_RECENT) -> int:
    """The shared target: system prompt + the last ``keep_recent`` messages, less 5 %."""
    return int((total_weight(history[:1]) + total_weight(history[-keep_recent:])) * TARGET_SLACK)


def ctxrecover_level3(history: list[Message], budget: int, archive: Archive) -> list[Message]:
    """Emergency truncation, then shrinking while over ``budget`` (compaction Level 3)."""
    kept, _ = emergency_truncate(history, KEEP_RECENT, archive=archive)
    if total_weight(kept) > budget:
        kept, _ = shrink_to_budget(kept, budget, archive=archive, min_chars=DEFAULT_POLICY.shrink_min_chars)
    return kept


def ctxrecover_compactor(history: list[Message], budget: int) -> list[Message]:
    """A whole planned compaction without a summarizer: trim, then Level 3."""
    compactor = HistoryCompactor(DEFAULT_POLICY, MemoryArchive())
    return compactor.compact(history, budget_chars=budget, keep_recent=KEEP_RECENT).history


class _NoSender:
    """The sender of a Session that never completes a turn (P3.session only cuts its history)."""

    wire_format = WireFormat.OPENAI_CHAT
    model = "bench-model"

    def send(self, request: Any) -> Any:
        raise AssertionError("P3.session sends nothing")


def session_history(history: list[Message], archive: MemoryArchive) -> tuple[Session, list[Message]]:
    """``history`` entered through a Session (archive keys computed on append) and the session's copy."""
    session = Session(_NoSender(), archive=archive)
    for message in history:
        session.add(message)
    return session, session.history


def session_level2(session: Session, history: list[Message]) -> list[Message]:
    """Recovery Level 2 on the session's history with the session's archive (as its ladder runs it)."""
    kept, _ = Level2()(history, RecoveryContext.from_policy(session.policy, session.archive))
    return kept


def _dropped_chars(before: list[Message], after: list[Message]) -> int:
    """Content chars of the messages of ``before`` that are not in ``after``."""
    kept = {id(m) for m in after}
    return sum(len(m.content) for m in before if id(m) not in kept)


def level2_parts(entered: list[Message], kept: list[Message]) -> dict[str, float]:
    """Seconds of Level 2's parts, each timed alone on the same history (the profile of P3.session):
    the pairing check (run twice: before and after the cut), the content-chars count of its report,
    and archiving the dropped range (keys memoized on append: an index entry and dict updates)."""
    survivors = {id(m) for m in kept}
    dropped = [m for m in entered if id(m) not in survivors and m.role != "system"]
    timed = {
        "validate_pairing": lambda: validate_pairing(entered),
        "content_chars": lambda: content_chars(entered),
        "archive_range": lambda: archive_range(MemoryArchive(), dropped),
    }
    return {part: _timed(fn)[0] for part, fn in timed.items()}


def level2_budget(history: list[Message]) -> int:
    """Chars of the system prompt and the last ``emergency_keep_messages``: what Level 2 keeps."""
    return total_weight(history[:1]) + total_weight(history[-DEFAULT_POLICY.emergency_keep_messages :])


def to_langchain(history: list[Message]) -> list[Any]:
    """The history as LangChain messages (tool calls with parsed arguments)."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    converted: list[Any] = []
    for msg in history:
        if msg.role == "system":
            converted.append(SystemMessage(msg.content))
        elif msg.role == "user":
            converted.append(HumanMessage(msg.content))
        elif msg.role == "tool":
            converted.append(ToolMessage(msg.content, tool_call_id=msg.tool_call_id or ""))
        else:
            calls = [
                {"id": c.id, "name": c.name, "args": json.loads(c.arguments or "{}")} for c in msg.tool_calls
            ]
            converted.append(AIMessage(msg.content, tool_calls=calls))
    return converted


def langchain_trim(budget: int) -> Callable[[list[Any]], list[Any]]:
    """``trim_messages`` to ``budget`` characters (raises ImportError without langchain-core)."""
    from langchain_core.messages import BaseMessage, trim_messages

    def count_chars(messages: list[BaseMessage]) -> int:
        return sum(len(m.content) for m in messages)

    def trim(messages: list[Any]) -> list[Any]:
        return trim_messages(
            messages,
            max_tokens=budget,
            token_counter=count_chars,
            strategy="last",
            include_system=True,
            start_on="human",
        )

    return trim


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def run(
    *, messages: int = MESSAGES, target_bytes: int = TARGET_BYTES, repeats: int = REPEATS
) -> dict[str, Any]:
    """Time the contenders alternately on the same history (medians); ``skipped`` says what is missing."""
    history = build_history(messages=messages, target_bytes=target_bytes)
    budget = target_chars(history)
    result: dict[str, Any] = {
        "benchmark": "P3 emergency truncation vs LangChain trim_messages",
        "messages": len(history),
        "history_chars": total_weight(history),
        "target_chars": budget,
        "target_ratio": TARGET_RATIO,
    }
    try:
        trim = langchain_trim(budget)
    except ImportError:
        return {**result, "skipped": SKIPPED, "passed": None}
    converted = to_langchain(history)
    times: dict[str, list[float]] = {
        "langchain": [],
        "level3": [],
        "level3_no_archive": [],
        "compactor": [],
        "langchain_l2": [],
        "session_level2": [],
    }
    trim_l2 = langchain_trim(level2_budget(history))
    kept_l2: list[Message] = []
    kept_lc_l2: list[Any] = []
    session_archive = MemoryArchive()
    entered: list[Message] = []
    parts: dict[str, list[float]] = {}
    kept_lc: list[Any] = []
    kept: list[Message] = []
    archive = MemoryArchive()
    for _ in range(repeats):
        elapsed, kept_lc = _timed(lambda: trim(converted))
        times["langchain"].append(elapsed)
        archive = MemoryArchive()
        fresh = build_history(messages=messages, target_bytes=target_bytes)
        elapsed, kept = _timed(lambda: ctxrecover_level3(fresh, budget, archive))  # noqa: B023
        times["level3"].append(elapsed)
        fresh = build_history(messages=messages, target_bytes=target_bytes)
        elapsed, _ = _timed(lambda: ctxrecover_level3(fresh, budget, NullArchive()))  # noqa: B023
        times["level3_no_archive"].append(elapsed)
        fresh = build_history(messages=messages, target_bytes=target_bytes)
        elapsed, _ = _timed(lambda: ctxrecover_compactor(fresh, budget))  # noqa: B023
        times["compactor"].append(elapsed)
        elapsed, kept_lc_l2 = _timed(lambda: trim_l2(converted))
        times["langchain_l2"].append(elapsed)
        session_archive = MemoryArchive()
        session, entered = session_history(
            build_history(messages=messages, target_bytes=target_bytes), session_archive
        )
        elapsed, kept_l2 = _timed(lambda: session_level2(session, entered))  # noqa: B023
        times["session_level2"].append(elapsed)
        for part, elapsed in level2_parts(entered, kept_l2).items():
            parts.setdefault(part, []).append(elapsed)
    ms = {name: statistics.median(samples) * 1e3 for name, samples in times.items()}
    lc_chars = sum(len(m.content) for m in kept_lc)
    result.update(
        langchain_ms=ms["langchain"],
        level3_ms=ms["level3"],
        level3_no_archive_ms=ms["level3_no_archive"],
        compactor_ms=ms["compactor"],
        ratio_langchain=ms["level3"] / ms["langchain"],
        ratio_no_archive=ms["level3_no_archive"] / ms["langchain"],
        ratio_compactor=ms["compactor"] / ms["langchain"],
        langchain_kept_messages=len(kept_lc),
        langchain_kept_chars=lc_chars,
        langchain_lost_chars=sum(len(m.content) for m in history) - lc_chars,
        level3_kept_messages=len(kept),
        level3_kept_chars=total_weight(kept),
        level3_archived_chars=archive.total_chars,
        langchain_l2_ms=ms["langchain_l2"],
        session_level2_ms=ms["session_level2"],
        ratio_session=ms["session_level2"] / ms["langchain_l2"],
        session_level2_parts_ms={part: statistics.median(v) * 1e3 for part, v in parts.items()},
        langchain_l2_kept_messages=len(kept_lc_l2),
        session_level2_kept_messages=len(kept_l2),
        session_level2_dropped_chars=_dropped_chars(entered, kept_l2),
        session_level2_archived_chars=session_archive.total_chars,
    )
    archived_all = result["session_level2_archived_chars"] >= result["session_level2_dropped_chars"]
    result["passed_session"] = result["ratio_session"] < TARGET_RATIO and archived_all
    result["passed"] = result["ratio_langchain"] < TARGET_RATIO and result["level3_kept_chars"] <= budget
    return result


def main() -> int:
    result = run()
    print(
        f"P3 — {result['messages']} messages, {result['history_chars']:,} chars → target "
        f"{result['target_chars']:,} chars"
    )
    if result.get("skipped"):
        print(f"P3 {result['skipped']}")
        return 0
    rows = [
        (
            "langchain trim_messages",
            result["langchain_ms"],
            result["langchain_kept_messages"],
            result["langchain_kept_chars"],
            f"lost ({result['langchain_lost_chars']:,} chars)",
        ),
        (
            "ctxrecover L3 (truncate + shrink)",
            result["level3_ms"],
            result["level3_kept_messages"],
            result["level3_kept_chars"],
            f"archived ({result['level3_archived_chars']:,} chars)",
        ),
    ]
    print(f"{'contender':<36}{'ms':>9}{'kept msgs':>11}{'kept chars':>12}  what it dropped")
    for name, ms, count, chars, dropped in rows:
        print(f"{name:<36}{ms:>9.2f}{count:>11}{chars:>12,}  {dropped}")
    print(f"{'  same L3, archive storing nothing':<36}{result['level3_no_archive_ms']:>9.2f}")
    print(f"{'  HistoryCompactor, no summarizer':<36}{result['compactor_ms']:>9.2f}")
    verdict = "PASS" if result["passed"] else "FAIL"
    print(f"L3 / langchain {result['ratio_langchain']:.3f} (target < {TARGET_RATIO:g}) — {verdict}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
