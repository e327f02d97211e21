"""The public namespace: a sorted __all__ that changes only on purpose."""

from __future__ import annotations

import subprocess
import sys

import ctxrecover

EXPECTED_PUBLIC_NAMES = {
    # data model, sizes, wire
    "Image",
    "Message",
    "ToolCall",
    "char_budget",
    "format_payload_size",
    "needs_compaction",
    "parse_payload_size",
    "total_weight",
    "weight",
    "WireFormat",
    "WireSizeTracker",
    "encode_body",
    "encode_request",
    "parse_response",
    "render_request",
    "request_size",
    "system_bytes",
    "context_window",
    "max_output_tokens",
    # policy and classification
    "CHAT_POLICY",
    "DEFAULT_POLICY",
    "ConfigWarning",
    "Policy",
    "Failure",
    "FailureKind",
    "classify",
    # archive
    "Archive",
    "DiskArchive",
    "MemoryArchive",
    "RecallResult",
    "RecallTool",
    "SessionArchive",
    "extract_keys",
    "marker",
    "recall",
    # compaction, recovery, escalation, summarizers
    "CompactionReport",
    "HistoryCompactor",
    "Level1",
    "Level2",
    "Level3",
    "OutputEscalation",
    "GatewayModel",
    "Verdict",
    "RecoveryLadder",
    "CancelToken",
    "ContextEngineSummarizer",
    "HttpSummarizer",
    "Summarizer",
    "SummaryResult",
    # events and their export
    "OpenTelemetryHandler",
    "EventBus",
    "Notice",
    "PostCompact",
    "PreCompact",
    "SessionStats",
    "StatusEvent",
    "StderrRenderer",
    # the sessions, the loops and the senders
    "Session",
    "AsyncSession",
    "Panel",
    "AsyncPanel",
    "oneshot",
    "aoneshot",
    "AnthropicSDKSender",
    "AsyncAnthropicSDKSender",
    "AsyncHttpxSender",
    "AsyncOpenAISDKSender",
    "AsyncSender",
    "ChatRequest",
    "ChatResponse",
    "HttpxSender",
    "OpenAISDKSender",
    "SendFailed",
    "Sender",
    # exceptions
    "ArchiveCorruptError",
    "ArchiveError",
    "ArchiveFullError",
    "ArchiveIntegrityError",
    "ArchiveWriteError",
    "ArgumentTypeError",
    "MessageError",
    "NestingTooDeepError",
    "UnencodableTextError",
    "CompactionCancelled",
    "ConfigError",
    "ContentBlockedError",
    "ContentFloorError",
    "ContentRefusedError",
    "CtxRecoverError",
    "HeaderFaultError",
    "PayloadFloorError",
    "PolicyBlockedError",
    "RecoveryError",
    "RecoveryExhausted",
    "ResponseFormatError",
    "SummarizerError",
    "UnrecoverableFailure",
}


def test_all_is_sorted() -> None:
    assert ctxrecover.__all__ == sorted(ctxrecover.__all__)


def test_public_names_change_only_on_purpose() -> None:
    assert set(ctxrecover.__all__) == EXPECTED_PUBLIC_NAMES


def test_every_public_name_resolves() -> None:
    assert all(hasattr(ctxrecover, name) for name in ctxrecover.__all__)


def test_exceptions_share_one_root() -> None:
    for name in EXPECTED_PUBLIC_NAMES:
        obj = getattr(ctxrecover, name)
        if isinstance(obj, type) and issubclass(obj, Exception) and not issubclass(obj, Warning):
            assert issubclass(obj, ctxrecover.CtxRecoverError), name


def test_import_does_not_pull_heavy_optional_dependencies() -> None:
    code = (
        "import sys, ctxrecover; "
        "heavy = ('pandas', 'matplotlib', 'openai', 'anthropic', 'respx', 'faker'); "
        "heavy = [m for m in heavy if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""
