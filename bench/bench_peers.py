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
``emergency_keep_messages``, archive the dropped range, repair again) as a session's
recovery runs it (``ctxrecover.turn.rejection``): on P1's ~5 MB, 2,000-message history
(:func:`bench_turn.build_history`, which the turn-boundary passes leave whole) after it
entered through :meth:`Session.add <ctxrecover.session.Session.add>` (each message's
archive keys computed as it was appended) and the session completed a turn with it (its
passes indexed the history), all untimed — the state a rejected request finds. The step
gets the facts the session hands (:meth:`TurnPasses.facts
<ctxrecover.passes.turn.TurnPasses.facts>`: pairing validity, content chars, system
messages and what archiving a range stores, kept at the cost of what changed) and
writes to the session's archive. Against ``trim_messages`` keeping the same messages of
the same history (budget: the system prompt plus the last ten messages' characters).
Target < 1, everything Level 2 drops archived. For reference: ``P3.session_recomputing``,
the same step without the handed facts (each step scans the history itself: what the
handed state saves), and ``P3.session_accounted``, the step with its writes attributed to
recovery as the turn runs it, so the session archive also counts what each source
archived (``SessionStats.chars_archived_by_source``: a set operation over the members' keys).
For reference: the same Level 3 with an archive that stores nothing (what the cut
itself costs, without the content-addressing of the dropped text: UTF-8 encoding and
sha256 of megabytes) and a whole :meth:`HistoryCompactor.compact` without a summarizer
(trim, then Level 3). The target is the system prompt plus the last ``KEEP_RECENT``
messages, less 5 %, so both keep about the last ten messages and shrinking has work.

Without ``langchain-core`` (``pip install -e ".[bench]"``) the comparison is skipped,
not failed. Run it with ``python bench/bench_peers.py``; ``run()`` returns the measures.
"""

from __future__ import annotations

import contextlib
import gc
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import bench_turn
from bench_compaction import build_history

from ctxrecover.archive import Archive, MemoryArchive, SessionArchive
from ctxrecover.compaction import HistoryCompactor
from ctxrecover.messages import Message
from ctxrecover.passes.facts import HistoryFacts
from ctxrecover.passes.shrink import shrink_to_budget
from ctxrecover.passes.truncate import emergency_truncate, keep_last
from ctxrecover.policy import DEFAULT_POLICY
from ctxrecover.recovery import Level2, RecoveryContext
from ctxrecover.session import Session
from ctxrecover.sizes import total_weight

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


SESSION_TURN = Message.user("Now run the tests again and tell me what fails.")
# (name, the facts the session hands, the session archive's per-source accounting) of each Level 2 timed
VARIANTS = (("handed", True, False), ("recomputing", False, False), ("accounted", True, True))


def session_after_a_turn(history: list[Message]) -> Session:
    """``history`` entered through :meth:`Session.add` (archive keys computed on append), then one
    completed turn (its passes indexed it): the session a rejected request finds."""
    session, _, _ = bench_turn.make_session(history[:1])
    for message in history[1:]:
        session.add(message)
    session.add(SESSION_TURN)
    session.complete()
    return session


def recovery_context(session: Session, facts: HistoryFacts | None) -> RecoveryContext:
    """The context the session's recovery builds (``ctxrecover.turn.rejection``), with ``facts``."""
    return RecoveryContext(
        policy=session.policy,
        archive=session.archive,
        tool_result_budget_chars=session.tool_result_budget_chars,
        tool_result_max_chars=session.tool_result_max_chars,
        facts=facts,
    )


def session_level2(session: Session, *, handed: bool = True, accounted: bool = False) -> list[Message]:
    """Recovery Level 2 on the session's history with the session's archive: given the facts the
    session hands (``handed``; without them the step scans the history itself); with ``accounted``
    the writes are attributed to recovery as the turn does it, so the session archive also counts
    what each source archived (``SessionStats.chars_archived_by_source``)."""
    history = session.conversation.history
    ctx = recovery_context(session, session.passes.facts(history) if handed else None)
    with session.archive.attributed("recovery") if accounted else contextlib.nullcontext():
        kept, _ = Level2()(history, ctx)
    return kept


def _dropped_chars(before: list[Message], after: list[Message]) -> int:
    """Content chars of the messages of ``before`` that are not in ``after``."""
    kept = {id(m) for m in after}
    return sum(len(m.content) for m in before if id(m) not in kept)


def level2_parts(session: Session) -> dict[str, float]:
    """Seconds of Level 2's parts, each timed alone on the same session (the profile of P3.session):
    the facts the session hands (what changed since its last look); the cut (``keep_last`` given those
    facts, into a fresh archive); within it, storing the dropped range's members by their memoized
    keys (``put_keyed`` of the handed parts); and the same through a session archive counting
    recovery's writes (the accounting ``P3.session_accounted`` adds)."""
    history = session.conversation.history
    facts = session.passes.facts(history)
    keep = DEFAULT_POLICY.emergency_keep_messages
    members = facts.range_parts(1, len(history) - keep).members

    def counted_put() -> None:
        archive = SessionArchive(MemoryArchive(), on_archived=lambda source, chars: None)
        with archive.attributed("recovery"):
            archive.put_keyed(members)

    timed = {
        "facts": lambda: session.passes.facts(history),
        "keep_last": lambda: keep_last(history, keep, archive=MemoryArchive(), facts=facts),
        "put_members": lambda: MemoryArchive().put_keyed(members),
        "counted_put_members": counted_put,
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


def measure_session(*, messages: int, target_bytes: int, repeats: int) -> dict[str, Any]:
    """P3.session: Level 2 as a session's recovery runs it, with and without the facts it hands, and
    ``trim_messages`` to the same kept messages, alternately on the same history (medians)."""
    history = bench_turn.build_history(messages=messages, target_bytes=target_bytes)
    trim = langchain_trim(level2_budget(history))
    converted = to_langchain(history)
    times: dict[str, list[float]] = {"langchain": [], "handed": [], "recomputing": [], "accounted": []}
    parts: dict[str, list[float]] = {}
    kept_lc: list[Any] = []
    entered: list[Message] = []
    kept: list[Message] = []
    archived = 0
    for _ in range(repeats):
        for name, handed, accounted in VARIANTS:
            session = session_after_a_turn(
                bench_turn.build_history(messages=messages, target_bytes=target_bytes)
            )
            store = session.archive.store
            assert isinstance(store, MemoryArchive)
            before, entered = store.total_chars, session.conversation.history
            elapsed, kept = _timed(
                lambda: session_level2(session, handed=handed, accounted=accounted)  # noqa: B023
            )
            times[name].append(elapsed)
            if name == "handed":
                archived = store.total_chars - before
        elapsed, kept_lc = _timed(lambda: trim(converted))
        times["langchain"].append(elapsed)
        for part, seconds in level2_parts(session_after_a_turn(history)).items():
            parts.setdefault(part, []).append(seconds)
    ms = {name: statistics.median(samples) * 1e3 for name, samples in times.items()}
    dropped = _dropped_chars(entered, kept)
    return {
        "session_messages": len(entered),
        "langchain_l2_ms": ms["langchain"],
        "session_level2_ms": ms["handed"],
        "session_level2_recomputing_ms": ms["recomputing"],
        "ratio_session": ms["handed"] / ms["langchain"],
        "ratio_session_recomputing": ms["recomputing"] / ms["langchain"],
        "session_level2_accounted_ms": ms["accounted"],
        "ratio_session_accounted": ms["accounted"] / ms["langchain"],
        "session_level2_parts_ms": {part: statistics.median(v) * 1e3 for part, v in parts.items()},
        "langchain_l2_kept_messages": len(kept_lc),
        "session_level2_kept_messages": len(kept),
        "session_level2_dropped_chars": dropped,
        "session_level2_archived_chars": archived,
        "passed_session": ms["handed"] / ms["langchain"] < TARGET_RATIO and archived >= dropped,
    }


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
    }
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
        **measure_session(messages=messages, target_bytes=target_bytes, repeats=repeats),
    )
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
