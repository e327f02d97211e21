"""The CCR archive: stores that keep what compaction cuts, composite ranges, recall and the recall tool."""

from ctxrecover.archive.disk import ArchiveStats, DiskArchive
from ctxrecover.archive.keys import KEY_LENGTH, MARKER_RE, archive_key, extract_keys, has_marker, marker
from ctxrecover.archive.live import WITHHELD_RECALL, SessionArchive, message_keys
from ctxrecover.archive.lookup import RECALL_JSON_FIELDS, RecallResult, parse_recall_keys, recall
from ctxrecover.archive.pressure import PRESSURE_WARN_FRACTION, ArchiveHolder, ArchivePressure
from ctxrecover.archive.ranges import (
    RANGE_HEADER,
    UNKNOWN_KEY_TEXT,
    archive_message,
    archive_range,
    expand_entry,
    member_keys,
    read_original,
    render_transcript,
)
from ctxrecover.archive.recall_tool import RECALL_TOOL_NAME, RecallTool, ToolDefinition
from ctxrecover.archive.store import DEFAULT_NAMESPACE, Archive, MemoryArchive, PinningArchive, put_entries

__all__ = [
    "DEFAULT_NAMESPACE",
    "Archive",
    "ArchiveHolder",
    "ArchivePressure",
    "ArchiveStats",
    "DiskArchive",
    "KEY_LENGTH",
    "MARKER_RE",
    "MemoryArchive",
    "PinningArchive",
    "PRESSURE_WARN_FRACTION",
    "RANGE_HEADER",
    "RECALL_JSON_FIELDS",
    "RECALL_TOOL_NAME",
    "RecallResult",
    "RecallTool",
    "SessionArchive",
    "WITHHELD_RECALL",
    "ToolDefinition",
    "UNKNOWN_KEY_TEXT",
    "archive_key",
    "archive_message",
    "archive_range",
    "expand_entry",
    "extract_keys",
    "has_marker",
    "marker",
    "member_keys",
    "message_keys",
    "parse_recall_keys",
    "put_entries",
    "read_original",
    "recall",
    "render_transcript",
]
