"""OpenTelemetry export: a recovered turn's spans and events in the SDK's in-memory exporter."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

import ctxrecover.recovery.notices as notice_codes
import ctxrecover.turn.rejection as rejection

pytest.importorskip("opentelemetry.sdk", reason="needs the otel extra: pip install 'ctxrecover[otel]'")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from ctxrecover import HttpxSender, MemoryArchive, Message, Session, StderrRenderer, ToolCall  # noqa: E402
from ctxrecover.events import Event, EventBus, Notice, PostCompact, PreCompact  # noqa: E402
from ctxrecover.recovery.notices import LEARNED_CAP_CODE, RECOVERABLE_FAILURE_CODE  # noqa: E402
from ctxrecover.telemetry import (  # noqa: E402
    GEN_AI_CONVERSATION_ID,
    GEN_AI_OPERATION_NAME,
    NOTICE_EVENTS,
    OpenTelemetryHandler,
)

WAF_AT = 129 * 1024
WAF_NOTICE = "⚠ Recoverable failure (proxy/WAF rejection (403 + security signals)) — compacting and retrying"


def gateway(request: httpx.Request) -> httpx.Response:
    """A corporate WAF in front of Bedrock: HTML 403 for every body of 129 KB or more."""
    if len(request.content) >= WAF_AT:
        return httpx.Response(
            403,
            text="<html><body>Blocked by security policy</body></html>",
            headers={"content-type": "text/html"},
        )
    answer = {"role": "assistant", "content": [{"text": "Fixed."}]}
    return httpx.Response(
        200,
        json={
            "output": {"message": answer},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 9, "outputTokens": 3},
        },
    )


@pytest.fixture
def exported() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def recovered_turn(handler: OpenTelemetryHandler) -> Session:
    sender = HttpxSender(
        "bedrock-converse",
        base_url="https://bedrock.internal",
        model="anthropic.claude-3-5-sonnet",
        transport=httpx.MockTransport(gateway),
    )
    session = Session(sender, archive=MemoryArchive(), on_event=handler)
    session.add(Message.system("You are a coding agent."))
    session.add(Message.user("Fix the failing test."))
    reads = [ToolCall(f"c{i}", "read_file", f'{{"path": "src/m{i}.py"}}') for i in range(8)]
    session.add(Message.assistant("Reading the modules.", reads))
    for call in reads:
        session.add(Message.tool(call.id, "def f():\n    return 42\n" * 800))
    return session


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def test_a_recovered_turn_shows_as_a_recovery_span_and_notice_events_under_the_llm_call(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    handler = OpenTelemetryHandler(
        provider, conversation_id="ticket-4711", model="anthropic.claude-3-5-sonnet"
    )
    session = recovered_turn(handler)
    with provider.get_tracer("agent").start_as_current_span("chat anthropic.claude-3-5-sonnet"):
        assert session.complete().content == "Fixed."

    spans = exporter.get_finished_spans()
    (call,) = by_name(spans, "chat anthropic.claude-3-5-sonnet")
    (recovery,) = by_name(spans, "ctxrecover.recovery")
    assert recovery.parent is not None and recovery.parent.span_id == call.context.span_id
    assert recovery.context.trace_id == call.context.trace_id
    assert recovery.attributes is not None
    assert dict(recovery.attributes) == {
        GEN_AI_CONVERSATION_ID: "ticket-4711",
        "gen_ai.request.model": "anthropic.claude-3-5-sonnet",
        "ctxrecover.trigger": "recovery",
        "ctxrecover.outcome": "applied",
    }
    events = {event.name: dict(event.attributes or {}) for event in call.events}
    failure = events[NOTICE_EVENTS[RECOVERABLE_FAILURE_CODE]]
    assert failure["ctxrecover.notice.message"] == WAF_NOTICE
    assert failure["ctxrecover.severity"] == "warning" and failure[GEN_AI_CONVERSATION_ID] == "ticket-4711"
    learned = events[NOTICE_EVENTS[LEARNED_CAP_CODE]]
    assert str(learned["ctxrecover.notice.message"]).startswith("ℹ Gateway rejected a ")
    assert learned["ctxrecover.severity"] == "info"
    assert [span.name for span in spans] == ["ctxrecover.recovery", "chat anthropic.claude-3-5-sonnet"]


def test_the_summary_step_is_a_chat_span_inside_its_compaction(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    handler = OpenTelemetryHandler(provider)
    from ctxrecover.events import StatusEvent

    for event in (
        PreCompact("auto"),
        StatusEvent("start", "📦 Compacting history (9 msgs, 119.1 KB → target 112.5 KB)"),
        StatusEvent("trim", "🧹 Trim: stripping reasoning/dedup (no LLM)…"),
        StatusEvent("summary", "🧠 Summarizing old messages via LLM (may take 30-90s — ESC cancels)…"),
        StatusEvent("summary_applied", "✓ Summary applied (9 → 4 msgs, 119.1 KB → 20.0 KB)"),
        PostCompact("auto", "applied"),
    ):
        handler(event)

    (compaction,) = by_name(exporter.get_finished_spans(), "ctxrecover.compaction")
    (summary,) = by_name(exporter.get_finished_spans(), "ctxrecover.compaction.summary")
    assert summary.parent is not None and summary.parent.span_id == compaction.context.span_id
    assert dict(summary.attributes or {}) == {GEN_AI_OPERATION_NAME: "chat", "ctxrecover.outcome": "applied"}
    assert [e.name for e in compaction.events] == [
        "ctxrecover.compaction.start",
        "ctxrecover.compaction.trim",
    ]
    assert [e.name for e in summary.events] == [
        "ctxrecover.compaction.summary",
        "ctxrecover.compaction.summary_applied",
    ]
    assert dict(compaction.attributes or {})["ctxrecover.outcome"] == "applied"


@dataclass(frozen=True, slots=True)
class ContentBlockWithheld(Event):
    """An event kind the library may add later (issue 22): no row needed to export it."""

    message_index: int
    size: int


def test_new_event_kinds_and_notice_codes_are_exported_without_a_new_row(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    handler = OpenTelemetryHandler(provider)
    with provider.get_tracer("agent").start_as_current_span("chat m"):
        handler(ContentBlockWithheld(12, 8294))
        handler(Notice("brand_new_code", "✖ something new"))
    (call,) = exporter.get_finished_spans()
    first, second = call.events
    assert (first.name, dict(first.attributes or {})) == (
        "ctxrecover.content_block_withheld",
        {"ctxrecover.message_index": 12, "ctxrecover.size": 8294},
    )
    assert (
        second.name == "ctxrecover.notice" and dict(second.attributes or {})["ctxrecover.severity"] == "error"
    )


def test_forward_keeps_another_handler_and_close_ends_what_a_failed_turn_left_open(
    exported: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = exported
    stream = io.StringIO()
    seen: list[Event] = []
    handler = OpenTelemetryHandler(provider, forward=EventBus(StderrRenderer(stream), seen.append).emit)
    handler(PreCompact("recovery"))
    handler(
        Notice("preflight", "ℹ pre-flight: history 121.1 KB ≈ 101% of learned cap (119.4 KB) — compacting")
    )
    assert exporter.get_finished_spans() == ()
    handler.close()
    (recovery,) = exporter.get_finished_spans()
    assert dict(recovery.attributes or {})["ctxrecover.outcome"] == "unfinished"
    assert [e.name for e in recovery.events] == ["ctxrecover.preflight"]
    assert (
        stream.getvalue() == "ℹ pre-flight: history 121.1 KB ≈ 101% of learned cap (119.4 KB) — compacting\n"
    )
    assert len(seen) == 2


def test_importing_the_module_does_not_import_opentelemetry() -> None:
    code = "import sys, ctxrecover, ctxrecover.telemetry; print('opentelemetry' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_every_notice_code_the_library_emits_has_its_own_event_name() -> None:
    codes = {
        value
        for module in (notice_codes, rejection)
        for name, value in vars(module).items()
        if name.endswith("_CODE") and isinstance(value, str)
    }
    assert codes - set(NOTICE_EVENTS) == set()
