"""ctxrecover: recover long LLM agent sessions without losing the conversation.

The public API in one namespace. See :class:`Session` for the turn loop,
:func:`classify` for failure classification, and :class:`Policy` for every knob.
"""

from __future__ import annotations

from ctxrecover.archive import (
    Archive,
    DiskArchive,
    MemoryArchive,
    RecallResult,
    RecallTool,
    SessionArchive,
    extract_keys,
    marker,
    recall,
)
from ctxrecover.catalog import context_window, max_output_tokens
from ctxrecover.classify import Failure, FailureKind, classify
from ctxrecover.compactor import CompactionReport, HistoryCompactor
from ctxrecover.errors import (
    ArchiveCorruptError,
    ArchiveError,
    ArchiveFullError,
    ArchiveIntegrityError,
    ArchiveWriteError,
    CompactionCancelled,
    ConfigError,
    CtxRecoverError,
    MessageError,
    NestingTooDeepError,
    PayloadFloorError,
    RecoveryError,
    RecoveryExhausted,
    SummarizerError,
    UnencodableTextError,
    UnrecoverableFailure,
)
from ctxrecover.events import (
    EventBus,
    Notice,
    PostCompact,
    PreCompact,
    SessionStats,
    StatusEvent,
    StderrRenderer,
)
from ctxrecover.loops import Panel, oneshot
from ctxrecover.messages import Image, Message, ToolCall
from ctxrecover.policy import CHAT_POLICY, DEFAULT_POLICY, ConfigWarning, Policy
from ctxrecover.recovery import Level1, Level2, Level3, OutputEscalation, PayloadCapState, RecoveryLadder
from ctxrecover.senders import (
    AnthropicSDKSender,
    ChatRequest,
    ChatResponse,
    HttpxSender,
    OpenAISDKSender,
    Sender,
    SendFailed,
)
from ctxrecover.session import Session
from ctxrecover.sizes import (
    char_budget,
    format_payload_size,
    needs_compaction,
    parse_payload_size,
    total_weight,
    weight,
)
from ctxrecover.summarize import (
    CancelToken,
    ContextEngineSummarizer,
    HttpSummarizer,
    Summarizer,
    SummaryResult,
)
from ctxrecover.wire import (
    WireFormat,
    WireSizeTracker,
    encode_body,
    encode_request,
    parse_response,
    render_request,
    request_size,
    system_bytes,
)

__version__ = "0.1.0"

__all__ = [
    "AnthropicSDKSender",
    "Archive",
    "ArchiveCorruptError",
    "ArchiveError",
    "ArchiveFullError",
    "ArchiveIntegrityError",
    "ArchiveWriteError",
    "CHAT_POLICY",
    "CancelToken",
    "ChatRequest",
    "ChatResponse",
    "CompactionCancelled",
    "CompactionReport",
    "ConfigError",
    "ConfigWarning",
    "ContextEngineSummarizer",
    "CtxRecoverError",
    "DEFAULT_POLICY",
    "DiskArchive",
    "EventBus",
    "Failure",
    "FailureKind",
    "HistoryCompactor",
    "HttpSummarizer",
    "HttpxSender",
    "Image",
    "Level1",
    "Level2",
    "Level3",
    "MemoryArchive",
    "Message",
    "MessageError",
    "NestingTooDeepError",
    "Notice",
    "OpenAISDKSender",
    "OutputEscalation",
    "Panel",
    "PayloadCapState",
    "PayloadFloorError",
    "Policy",
    "PostCompact",
    "PreCompact",
    "RecallResult",
    "RecallTool",
    "RecoveryError",
    "RecoveryExhausted",
    "RecoveryLadder",
    "SendFailed",
    "Sender",
    "Session",
    "SessionArchive",
    "SessionStats",
    "StatusEvent",
    "StderrRenderer",
    "Summarizer",
    "SummarizerError",
    "SummaryResult",
    "ToolCall",
    "UnencodableTextError",
    "UnrecoverableFailure",
    "WireFormat",
    "WireSizeTracker",
    "char_budget",
    "classify",
    "context_window",
    "encode_body",
    "encode_request",
    "extract_keys",
    "format_payload_size",
    "marker",
    "max_output_tokens",
    "needs_compaction",
    "oneshot",
    "parse_payload_size",
    "parse_response",
    "recall",
    "render_request",
    "request_size",
    "system_bytes",
    "total_weight",
    "weight",
]
