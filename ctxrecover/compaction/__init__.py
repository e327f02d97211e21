"""Planned compaction (SPEC §5): trim → summary → emergency truncation → shrink, as composable levels."""

from ctxrecover.compaction.compactor import MANUAL_KEEP_RECENT, HistoryCompactor
from ctxrecover.compaction.levels import (
    DEFAULT_LEVELS,
    VERBATIM_AGED_OUT_STUB,
    CompactionLevel,
    ComposedLevels,
    LevelBase,
    Summary,
    Trim,
    Truncation,
    run_level,
)
from ctxrecover.compaction.run import (
    LEVEL_NONE,
    LEVEL_SUMMARY,
    LEVEL_TRIM,
    LEVEL_TRUNCATION,
    SUMMARY_HEADER,
    SUMMARY_RECALL_NOTE,
    Backoff,
    CompactionReport,
    CompactionResult,
    CompactionRun,
)

__all__ = [
    "DEFAULT_LEVELS",
    "LEVEL_NONE",
    "LEVEL_SUMMARY",
    "LEVEL_TRIM",
    "LEVEL_TRUNCATION",
    "MANUAL_KEEP_RECENT",
    "SUMMARY_HEADER",
    "SUMMARY_RECALL_NOTE",
    "VERBATIM_AGED_OUT_STUB",
    "Backoff",
    "CompactionLevel",
    "CompactionReport",
    "CompactionResult",
    "CompactionRun",
    "ComposedLevels",
    "HistoryCompactor",
    "LevelBase",
    "Summary",
    "Trim",
    "Truncation",
    "run_level",
]
