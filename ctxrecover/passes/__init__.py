"""LLM-free history passes (SPEC §3 and the no-LLM levels of §5–§6).

Each pass is a pure function ``pass(history, ...) -> (history, report)``: it
never mutates its input, archives whatever it cuts before cutting, and returns
the input list itself when it has nothing to do.
"""

from __future__ import annotations

from ctxrecover.passes.dedup_reads import (
    DEFAULT_READ_PARSERS,
    DedupReport,
    ReadBlock,
    ReadParser,
    dedup_repeated_reads,
    parse_cat_n,
    parse_file_blocks,
)
from ctxrecover.passes.floor import (
    InjectionResult,
    SkillAgingReport,
    SkillBlock,
    SkillInjector,
    age_skill_blocks,
    describe_tool,
    one_line_description,
    tool_catalog_index,
)
from ctxrecover.passes.microcompact import MicrocompactReport, apply_microcompact, content_kind
from ctxrecover.passes.pairing import PairingReport, repair_pairing, validate_pairing
from ctxrecover.passes.parts import (
    IMAGE_ARCHIVED_NOTE,
    SET_ASIDE_NOTE,
    ImageReport,
    archive_images,
    set_aside,
)
from ctxrecover.passes.shrink import ShrinkReport, shrink_to_budget
from ctxrecover.passes.tool_budget import ToolBudgetReport, enforce_tool_result_budget, tool_result_preview
from ctxrecover.passes.trim import TrimReport, trim_history
from ctxrecover.passes.truncate import (
    CapReport,
    EmergencyReport,
    KeepLastReport,
    cap_assistant_messages,
    emergency_truncate,
    keep_last,
    render_transcript,
    snap_to_tool_boundary,
    truncate_head_tail,
)

__all__ = [
    "DEFAULT_READ_PARSERS",
    "IMAGE_ARCHIVED_NOTE",
    "SET_ASIDE_NOTE",
    "CapReport",
    "DedupReport",
    "EmergencyReport",
    "ImageReport",
    "InjectionResult",
    "KeepLastReport",
    "MicrocompactReport",
    "PairingReport",
    "ReadBlock",
    "ReadParser",
    "ShrinkReport",
    "SkillAgingReport",
    "SkillBlock",
    "SkillInjector",
    "ToolBudgetReport",
    "TrimReport",
    "age_skill_blocks",
    "apply_microcompact",
    "archive_images",
    "cap_assistant_messages",
    "content_kind",
    "dedup_repeated_reads",
    "describe_tool",
    "emergency_truncate",
    "enforce_tool_result_budget",
    "keep_last",
    "one_line_description",
    "parse_cat_n",
    "parse_file_blocks",
    "render_transcript",
    "repair_pairing",
    "set_aside",
    "shrink_to_budget",
    "snap_to_tool_boundary",
    "tool_catalog_index",
    "tool_result_preview",
    "trim_history",
    "truncate_head_tail",
    "validate_pairing",
]
