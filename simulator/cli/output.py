"""Console lines of ``ctxsim run`` and ``ctxsim replay``: one per attempt, event and run; the summary."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from ctxrecover.events import Event, PostCompact, PreCompact, StatusEvent
from ctxrecover.sizes import format_payload_size
from simulator.recorder import ReplayEvent
from simulator.replay import ReplayResult, expectation_problems
from simulator.research.metrics import AttemptRecord, summary_table

__all__ = ["attempt_line", "event_line", "format_summary", "run_line"]


# Console table: (header, summary key, alignment); numbers right-aligned.
SUMMARY_HEADERS: tuple[tuple[str, str, str], ...] = (
    ("scenario", "scenario", "<"),
    ("runs", "runs", ">"),
    ("turns", "turns", ">"),
    ("failures by kind", "failures_by_kind", "<"),
    ("recovered", "recovered", ">"),
    ("failed", "failed", ">"),
    ("rejected", "rejected_requests", ">"),
    ("wire bytes", "wire_bytes", ">"),
    ("summarizer $", "summarizer_cost_usd", ">"),
    ("chars lost", "chars_lost", ">"),
    ("outcome", "outcome", "<"),
    ("expected", "expected", "<"),
)
CHECK_PASSED = "✓"
CHECK_FAILED = "✗"


def _event_text(event: Event) -> str:
    if isinstance(event, StatusEvent):
        return f"│ {event.text}"
    if isinstance(event, PreCompact | PostCompact):
        return f"⚙ {event.text}"
    return event.text


def attempt_line(record: AttemptRecord) -> str:
    """One attempt as a log line: size, outcome, and what was in force."""
    parts = [f"→ {record.request_bytes:,} B", record.outcome]
    if record.failure_kind and record.failure_kind not in record.outcome:
        parts.append(record.failure_kind)
    if record.compaction_level is not None:
        parts.append(f"after compaction L{record.compaction_level}")
    if record.learned_cap is not None:
        parts.append(f"learned cap {record.learned_cap:,} B")
    if record.identical_retry:
        parts.append("identical retry")
    return " · ".join(parts)


def event_line(event: ReplayEvent) -> str:
    """A replay event as one log line, prefixed with its turn and attempt."""
    item = event.item
    text = attempt_line(item) if isinstance(item, AttemptRecord) else _event_text(item)
    return f"[turn {event.turn} · attempt {event.attempt}] {text}"


def run_line(result: ReplayResult) -> str:
    """One replay in a line: outcome against the expectation and the problems."""
    problems = expectation_problems(result)
    check = CHECK_PASSED if not problems else f"{CHECK_FAILED} {'; '.join(problems)}"
    return (
        f"{result.scenario.name} × {result.transcript.name}: {result.outcome} "
        f"(expected {result.scenario.expect.outcome}) {check} — "
        f"{result.turns_completed}/{result.turns} turns, "
        f"{len(result.records)} attempts, {result.summary['rejected_requests']} rejected, "
        f"{format_payload_size(result.summary['wire_bytes'])} sent, {result.chars_lost} chars lost, "
        f"fact survival {result.fact_survival:.0%}"
    )


def _counts(values: Iterable[str]) -> str:
    counts = Counter(values)
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{value}×{count}" for value, count in sorted(counts.items()))


def format_summary(results: Sequence[ReplayResult]) -> str:
    """The per-scenario summary table printed by ``ctxsim run`` (scenarios in first-seen order)."""
    table = summary_table([r.summary for r in results])
    rows: list[dict[str, str]] = []
    for scenario, row in table.iterrows():
        runs = [r for r in results if r.scenario.name == scenario]
        passed = all(not expectation_problems(r) for r in runs)
        values = {
            "scenario": str(scenario),
            "runs": str(row["runs"]),
            "turns": str(row["turns"]),
            "failures_by_kind": row["failures_by_kind"] or "—",
            "recovered": str(row["recovered"]),
            "failed": str(row["failed"]),
            "rejected_requests": str(row["rejected_requests"]),
            "wire_bytes": format_payload_size(int(row["wire_bytes"])),
            "summarizer_cost_usd": f"{row['summarizer_cost_usd']:.4f}",
            "chars_lost": f"{int(row['chars_lost']):,}",
            "outcome": _counts(r.outcome for r in runs),
            "expected": f"{runs[0].scenario.expect.outcome} {CHECK_PASSED if passed else CHECK_FAILED}",
        }
        rows.append(values)
    widths = {key: max([len(header)] + [len(row[key]) for row in rows]) for header, key, _ in SUMMARY_HEADERS}
    lines = ["  ".join(f"{header:{align}{widths[key]}}" for header, key, align in SUMMARY_HEADERS)]
    lines.append("  ".join("─" * widths[key] for _, key, _ in SUMMARY_HEADERS))
    lines.extend(
        "  ".join(f"{row[key]:{align}{widths[key]}}" for _, key, align in SUMMARY_HEADERS) for row in rows
    )
    return "\n".join(line.rstrip() for line in lines)
