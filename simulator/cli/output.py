"""What ``ctxsim run`` and ``ctxsim replay`` print: one line per attempt, event and run; the summary table;
the same numbers as JSON for scripts (``--json``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ctxrecover.events import Event, PostCompact, PreCompact, StatusEvent
from ctxrecover.sizes import format_payload_size
from simulator.recorder import Rejection, ReplayEvent
from simulator.replay import ReplayResult, expectation_problems
from simulator.research.levels import outcome_words, steps_text
from simulator.research.metrics import EXPERIMENT_BLOCKED, RECOVERED_PREFIX, REJECTED_PREFIX, AttemptRecord
from simulator.research.report import archived_by_source, failure_counts

__all__ = [
    "attempt_line",
    "event_line",
    "format_archive_sources",
    "format_summary",
    "run_document",
    "run_line",
    "scenario_rows",
]


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
    ("chars archived", "chars_archived", ">"),
    ("chars lost", "chars_lost", ">"),
    ("outcome", "outcome", "<"),
    ("expected", "expected", "<"),
)
CHECK_PASSED = "✓"
CHECK_FAILED = "✗"
NONE_TEXT = "—"
COST_DECIMALS = 6  # USD in JSON: rounded, so scripts never see 0.30000000000000004
# Run numbers a scenario row sums over its runs.
SUMMED: tuple[str, ...] = (
    "rejected_requests",
    "wire_bytes",
    "summarizer_cost_usd",
    "chars_archived",
    "chars_lost",
)


def _event_text(event: Event) -> str:
    if isinstance(event, StatusEvent):
        return f"│ {event.text}"
    if isinstance(event, PreCompact | PostCompact):
        return f"⚙ {event.text}"
    return event.text


def attempt_line(record: AttemptRecord) -> str:
    """One attempt as a log line: size, outcome, what rewrote the history before it (in the words of
    :mod:`simulator.research.levels`), and what was in force."""
    recovery_level = record.recovery_level
    if record.outcome.startswith(RECOVERED_PREFIX):
        outcome = "recovered"
        recovery_level = recovery_level or int(record.outcome.removeprefix(RECOVERED_PREFIX))
    else:
        outcome = outcome_words(record.outcome)
    parts = [f"→ {record.request_bytes:,} B", outcome]
    if record.failure_kind and record.failure_kind not in record.outcome:
        parts.append(record.failure_kind)
    steps = steps_text(compaction_level=record.compaction_level, recovery_level=recovery_level)
    if steps is not None:
        parts.append(f"after {steps}")
    if record.learned_cap is not None:
        parts.append(f"learned cap {record.learned_cap:,} B")
    if record.identical_retry:
        parts.append("identical retry")
    return " · ".join(parts)


def event_line(event: ReplayEvent) -> str | None:
    """A replay event as one log line, prefixed with its turn and attempt; None for nothing new.

    A refused attempt prints when it is refused (its :class:`~simulator.recorder.Rejection`), before
    the notices it causes; its final record prints only when the turn gave up on it (``failed``,
    ``fail_fast_floor``), not when another attempt followed.
    """
    item = event.item
    if isinstance(item, AttemptRecord) and (
        item.outcome.startswith(REJECTED_PREFIX) or item.outcome == EXPERIMENT_BLOCKED
    ):
        return None
    if isinstance(item, Rejection):
        text = attempt_line(item.record)
    elif isinstance(item, AttemptRecord):
        text = attempt_line(item)
    else:
        text = _event_text(item)
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


def _kinds_text(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{kind}={count}" for kind, count in sorted(counts.items())) or NONE_TEXT


def run_document(result: ReplayResult) -> dict[str, Any]:
    """One replay as plain JSON values: identity, outcome against ``[expect]``, the run's numbers."""
    summary = result.summary
    problems = expectation_problems(result)
    return {
        "run_id": result.run_id,
        "scenario": result.scenario.name,
        "transcript": result.transcript.name,
        "policy": result.policy_name,
        "seed": result.seed,
        "outcome": result.outcome,
        "expected_outcome": result.scenario.expect.outcome,
        "expectation_met": not problems,
        "problems": problems,
        "error": result.error,
        "turns": result.turns,
        "turns_completed": result.turns_completed,
        "attempts": len(result.records),
        "failures_by_kind": failure_counts(result.frame),
        "recovered_episodes": summary["recovered_episodes"],
        "failed_episodes": summary["failed_episodes"],
        "rejected_requests": summary["rejected_requests"],
        "wire_bytes": summary["wire_bytes"],
        "summarizer_cost_usd": round(summary["summarizer_cost_usd"], COST_DECIMALS),
        "chars_archived": summary["chars_archived"],
        "chars_archived_by_source": archived_by_source(result.stats),
        "chars_lost": result.chars_lost,
        "fact_survival": round(result.fact_survival, COST_DECIMALS),
        "notes": list(result.notes),
    }


def scenario_rows(results: Sequence[ReplayResult]) -> list[dict[str, Any]]:
    """Per-scenario totals over runs (scenarios in first-seen order), as plain values.

    ``failures_by_kind`` counts failure episodes by their first kind and every truncated
    answer (``output_truncated``: an accepted attempt cut at ``max_tokens``).
    """
    rows: dict[str, dict[str, Any]] = {}
    for result in results:
        run = run_document(result)
        row = rows.setdefault(
            run["scenario"],
            {
                "scenario": run["scenario"],
                "runs": 0,
                "turns": 0,
                "failures_by_kind": Counter(),
                "recovered": 0,
                "failed": 0,
                **dict.fromkeys(SUMMED, 0),
                "chars_archived_by_source": Counter(),
                "outcomes": Counter(),
                "expected_outcome": run["expected_outcome"],
                "expectation_met": True,
            },
        )
        row["runs"] += 1
        row["turns"] += result.summary["turns"]
        row["failures_by_kind"].update(run["failures_by_kind"])
        row["recovered"] += run["recovered_episodes"]
        row["failed"] += run["failed_episodes"]
        for name in SUMMED:
            row[name] += run[name]
        row["chars_archived_by_source"].update(run["chars_archived_by_source"])
        row["outcomes"][run["outcome"]] += 1
        row["expectation_met"] = row["expectation_met"] and run["expectation_met"]
    return [
        {
            **row,
            "failures_by_kind": dict(sorted(row["failures_by_kind"].items())),
            "chars_archived_by_source": dict(row["chars_archived_by_source"]),
            "outcomes": dict(row["outcomes"]),
            "summarizer_cost_usd": round(row["summarizer_cost_usd"], COST_DECIMALS),
        }
        for row in rows.values()
    ]


def _table(headers: Sequence[tuple[str, str, str]], rows: Sequence[Mapping[str, str]]) -> str:
    widths = {key: max([len(header)] + [len(row[key]) for row in rows]) for header, key, _ in headers}
    lines = ["  ".join(f"{header:{align}{widths[key]}}" for header, key, align in headers)]
    lines.append("  ".join("─" * widths[key] for _, key, _ in headers))
    lines.extend("  ".join(f"{row[key]:{align}{widths[key]}}" for _, key, align in headers) for row in rows)
    return "\n".join(line.rstrip() for line in lines)


def format_summary(results: Sequence[ReplayResult]) -> str:
    """The per-scenario summary table printed by ``ctxsim run`` (scenarios in first-seen order)."""
    rows = []
    for row in scenario_rows(results):
        outcomes = _counts(outcome for outcome, n in row["outcomes"].items() for _ in range(n))
        check = CHECK_PASSED if row["expectation_met"] else CHECK_FAILED
        rows.append(
            {
                "scenario": row["scenario"],
                "runs": str(row["runs"]),
                "turns": str(row["turns"]),
                "failures_by_kind": _kinds_text(row["failures_by_kind"]),
                "recovered": str(row["recovered"]),
                "failed": str(row["failed"]),
                "rejected_requests": str(row["rejected_requests"]),
                "wire_bytes": format_payload_size(int(row["wire_bytes"])),
                "summarizer_cost_usd": f"{row['summarizer_cost_usd']:.4f}",
                "chars_archived": f"{int(row['chars_archived']):,}",
                "chars_lost": f"{int(row['chars_lost']):,}",
                "outcome": outcomes,
                "expected": f"{row['expected_outcome']} {check}",
            }
        )
    return _table(SUMMARY_HEADERS, rows)


def format_archive_sources(results: Sequence[ReplayResult]) -> str | None:
    """Chars archived per scenario by source (planned, recovery, microcompact, …), when the session's
    stats break them down (:func:`simulator.research.report.archived_by_source`); else None."""
    rows = scenario_rows(results)
    sources = list(dict.fromkeys(source for row in rows for source in row["chars_archived_by_source"]))
    if not sources:
        return None
    headers = (("scenario", "scenario", "<"), *((source, source, ">") for source in sources))
    return _table(
        headers,
        [
            {
                "scenario": row["scenario"],
                **{source: f"{row['chars_archived_by_source'].get(source, 0):,}" for source in sources},
            }
            for row in rows
        ],
    )
