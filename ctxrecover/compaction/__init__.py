"""Planned compaction (SPEC §5): trim → structured summary → emergency truncation → shrink."""

from ctxrecover.compaction.compactor import (
    MANUAL_KEEP_RECENT,
    SUMMARY_HEADER,
    SUMMARY_RECALL_NOTE,
    VERBATIM_AGED_OUT_STUB,
    CompactionReport,
    CompactionResult,
    CompactionRun,
    HistoryCompactor,
)

__all__ = [
    "MANUAL_KEEP_RECENT",
    "SUMMARY_HEADER",
    "SUMMARY_RECALL_NOTE",
    "VERBATIM_AGED_OUT_STUB",
    "CompactionReport",
    "CompactionResult",
    "CompactionRun",
    "HistoryCompactor",
]
