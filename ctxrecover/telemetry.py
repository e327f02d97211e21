"""OpenTelemetry export of ctxrecover's events (optional extra ``otel``): recoveries and compactions
as child spans, notices and compaction steps as span events, beside the LLM-call traces.

Pass the handler as a session's ``on_event`` (``forward=`` keeps another handler, e.g. a renderer)::

    from ctxrecover.telemetry import OpenTelemetryHandler

    handler = OpenTelemetryHandler(conversation_id="ticket-4711", forward=StderrRenderer())
    session = Session(sender, on_event=handler)
    with tracer.start_as_current_span("chat claude-sonnet-4"):   # your LLM-call span
        session.complete()

What becomes what (every table below is data, so a new event kind or notice code needs one row):

- ``PreCompact`` … ``PostCompact`` → a child span of the current span (:data:`TRIGGER_SPANS`:
  ``ctxrecover.recovery`` for a recovery, ``ctxrecover.compaction`` otherwise) carrying
  ``ctxrecover.trigger`` and ``ctxrecover.outcome``;
- a compaction status → a span event ``ctxrecover.compaction.<phase>`` on that span; the summary
  step (an LLM call of the summarizer) is its own child span, ``gen_ai.operation.name = chat``
  (:data:`STEP_SPANS`);
- a :class:`~ctxrecover.events.Notice` → a span event named by its code (:data:`NOTICE_EVENTS`,
  ``ctxrecover.notice`` for a code not listed) with ``ctxrecover.notice.code``,
  ``ctxrecover.notice.message`` (its exact text) and ``ctxrecover.severity``;
- any other event → a span event ``ctxrecover.<event_name>`` (:data:`EVENT_NAMES`, else the class
  name in snake case) with its fields as ``ctxrecover.<field>`` attributes.

Every span and event carries the GenAI semantic conventions' ``gen_ai.conversation.id``,
``gen_ai.provider.name`` and ``gen_ai.request.model`` when the handler is given them. Events land
on the innermost open ctxrecover span, else on the current span. ``opentelemetry`` is imported when
a handler is made, never at ``import ctxrecover``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ctxrecover.events import Event, Notice, PostCompact, PreCompact, StatusEvent

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = [
    "EVENT_NAMES",
    "GEN_AI_CONVERSATION_ID",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_REQUEST_MODEL",
    "NOTICE_EVENTS",
    "SEVERITIES",
    "STEP_SPANS",
    "TRIGGER_SPANS",
    "OpenTelemetryHandler",
]

# -- GenAI semantic conventions (opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/) ----------
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
CHAT_OPERATION = "chat"  # GenAiOperationNameValues.CHAT: the summarizer's request is a chat call

# -- our namespace --------------------------------------------------------------------------------
NAMESPACE = "ctxrecover"
INSTRUMENTATION_NAME = "ctxrecover"
TRIGGER_ATTRIBUTE = "ctxrecover.trigger"
OUTCOME_ATTRIBUTE = "ctxrecover.outcome"
STATUS_MESSAGE_ATTRIBUTE = "ctxrecover.status.message"
NOTICE_CODE_ATTRIBUTE = "ctxrecover.notice.code"
NOTICE_MESSAGE_ATTRIBUTE = "ctxrecover.notice.message"
SEVERITY_ATTRIBUTE = "ctxrecover.severity"
UNFINISHED = "unfinished"  # the outcome of a span still open when the handler is closed
#: PreCompact/PostCompact trigger → the child span they open and close.
TRIGGER_SPANS: Mapping[str, str] = MappingProxyType(
    {"recovery": "ctxrecover.recovery", "auto": "ctxrecover.compaction", "manual": "ctxrecover.compaction"}
)
#: Compaction status phases that open a step span → (span name, attributes); the phases that close
#: it follow (SPEC §5 status texts: the summary is an LLM call that takes seconds).
STEP_SPANS: Mapping[str, tuple[str, Mapping[str, str]]] = MappingProxyType(
    {"summary": ("ctxrecover.compaction.summary", MappingProxyType({GEN_AI_OPERATION_NAME: CHAT_OPERATION}))}
)
STEP_ENDS: Mapping[str, str] = MappingProxyType(
    {"summary_applied": "applied", "summary_failed": "failed", "cancelled": "cancelled"}
)
STATUS_EVENT = "ctxrecover.compaction.{phase}"
#: Notice code (ctxrecover.recovery.notices and the session's own) → span event name.
NOTICE_EVENTS: Mapping[str, str] = MappingProxyType(
    {
        "recoverable_failure": "ctxrecover.recovery.failure",
        "learned_cap": "ctxrecover.gateway.learned_cap",
        "assumed_cap": "ctxrecover.gateway.assumed_cap",
        "learned_window": "ctxrecover.gateway.learned_window",
        "inferred_window": "ctxrecover.gateway.inferred_window",
        "context_editing": "ctxrecover.provider.context_editing",
        "header_fault": "ctxrecover.gateway.header_fault",
        "payload_floor": "ctxrecover.gateway.floor",
        "payload_floor_warning": "ctxrecover.gateway.floor_warning",
        "content_block": "ctxrecover.content_block",
        "content_withheld": "ctxrecover.content_block.withheld",
        "block_not_reproduced": "ctxrecover.content_block.not_reproduced",
        "block_budget": "ctxrecover.content_block.budget",
        "content_floor": "ctxrecover.content_block.floor",
        "policy_block": "ctxrecover.gateway.policy_block",
        "content_refused": "ctxrecover.provider.content_refused",
        "output_limit": "ctxrecover.output_limit",
        "preflight": "ctxrecover.preflight",
        "uncapped_history": "ctxrecover.preflight.uncapped_history",
        "microcompact": "ctxrecover.pass.microcompact",
        "skill_aging": "ctxrecover.pass.skill_aging",
        "images_archived": "ctxrecover.pass.images_archived",
        "archive_refused": "ctxrecover.archive.refused",
        "archive_pins": "ctxrecover.archive.pins",
        "config": "ctxrecover.config",
    }
)
DEFAULT_NOTICE_EVENT = "ctxrecover.notice"
#: Event class name → span event name, for event kinds that are neither notices nor compaction hooks.
EVENT_NAMES: Mapping[str, str] = MappingProxyType({})
#: A notice's leading symbol → its severity (the notice texts' own convention).
SEVERITIES: Mapping[str, str] = MappingProxyType({"ℹ": "info", "⚠": "warning", "✖": "error"})
CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
OTEL_EXTRA_HINT = 'OpenTelemetryHandler needs the "otel" extra: pip install "ctxrecover[otel]"'

Attributes = dict[str, str | bool | int | float]


@dataclass(slots=True)
class _Open:
    span: Span
    trigger: str | None  # None for a step span


def _scalar(value: object) -> str | bool | int | float:
    return value if isinstance(value, str | bool | int | float) else str(value)


def _event_name(event: Event) -> str:
    kind = type(event).__name__
    return EVENT_NAMES.get(kind, f"{NAMESPACE}.{CAMEL_BOUNDARY.sub('_', kind).lower()}")


class OpenTelemetryHandler:
    """An ``on_event`` handler that records ctxrecover's events on OpenTelemetry spans (module docs).

    ``tracer_provider`` defaults to the global one; ``conversation_id``, ``provider_name`` and
    ``model`` become the GenAI attributes of everything recorded; ``forward`` receives every event
    afterwards (a renderer, an event bus). :meth:`close` ends spans a failed turn left open.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        conversation_id: str | None = None,
        provider_name: str | None = None,
        model: str | None = None,
        forward: Callable[[Event], Any] | None = None,
    ) -> None:
        try:
            from opentelemetry import trace
        except ModuleNotFoundError as error:
            raise ModuleNotFoundError(OTEL_EXTRA_HINT, name=error.name) from error
        from ctxrecover import __version__

        self._trace = trace
        self._tracer: Tracer = trace.get_tracer(
            INSTRUMENTATION_NAME, __version__, tracer_provider=tracer_provider
        )
        known = {
            GEN_AI_CONVERSATION_ID: conversation_id,
            GEN_AI_PROVIDER_NAME: provider_name,
            GEN_AI_REQUEST_MODEL: model,
        }
        self._common: Attributes = {key: value for key, value in known.items() if value is not None}
        self._forward = forward
        self._open: list[_Open] = []

    def __call__(self, event: Event) -> None:
        if isinstance(event, PreCompact):
            self._start(TRIGGER_SPANS.get(event.trigger, f"{NAMESPACE}.compaction"), event.trigger, {})
        elif isinstance(event, PostCompact):
            self._finish_trigger(event.trigger, event.outcome)
        elif isinstance(event, StatusEvent):
            self._status(event)
        elif isinstance(event, Notice):
            self._target().add_event(
                NOTICE_EVENTS.get(event.code, DEFAULT_NOTICE_EVENT),
                {
                    **self._common,
                    NOTICE_CODE_ATTRIBUTE: event.code,
                    NOTICE_MESSAGE_ATTRIBUTE: event.message,
                    SEVERITY_ATTRIBUTE: SEVERITIES.get(event.message[:1], SEVERITIES["ℹ"]),
                },
            )
        else:
            fields = dataclasses.asdict(event) if dataclasses.is_dataclass(event) else {}
            attributes = {f"{NAMESPACE}.{name}": _scalar(value) for name, value in fields.items()}
            self._target().add_event(_event_name(event), {**self._common, **attributes})
        if self._forward is not None:
            self._forward(event)

    def close(self) -> None:
        """End every span still open (a turn that raised mid-compaction), innermost first."""
        while self._open:
            done = self._open.pop()
            done.span.set_attribute(OUTCOME_ATTRIBUTE, UNFINISHED)
            done.span.end()

    # -- spans ------------------------------------------------------------------------------------
    def _target(self) -> Span:
        return self._open[-1].span if self._open else self._trace.get_current_span()

    def _start(self, name: str, trigger: str | None, attributes: Mapping[str, str]) -> None:
        context = self._trace.set_span_in_context(self._target())
        extra: Attributes = {TRIGGER_ATTRIBUTE: trigger} if trigger is not None else {}
        span = self._tracer.start_span(
            name, context=context, attributes={**self._common, **attributes, **extra}
        )
        self._open.append(_Open(span, trigger))

    def _finish_step(self, outcome: str) -> None:
        if self._open and self._open[-1].trigger is None:
            step = self._open.pop()
            step.span.set_attribute(OUTCOME_ATTRIBUTE, outcome)
            step.span.end()

    def _finish_trigger(self, trigger: str, outcome: str) -> None:
        if not any(opened.trigger == trigger for opened in self._open):
            return  # a PostCompact without its PreCompact (a handler attached mid-compaction)
        while self._open:
            opened = self._open.pop()
            opened.span.set_attribute(OUTCOME_ATTRIBUTE, outcome)
            opened.span.end()
            if opened.trigger == trigger:
                return

    def _status(self, event: StatusEvent) -> None:
        if event.phase in STEP_ENDS:
            self._target().add_event(
                STATUS_EVENT.format(phase=event.phase),
                {**self._common, STATUS_MESSAGE_ATTRIBUTE: event.message},
            )
            self._finish_step(STEP_ENDS[event.phase])
            return
        if event.phase in STEP_SPANS:
            self._finish_step("ended")
            name, attributes = STEP_SPANS[event.phase]
            self._start(name, None, attributes)
        elif self._open and self._open[-1].trigger is None:
            self._finish_step("ended")  # the next step began: the summary's span ends here
        self._target().add_event(
            STATUS_EVENT.format(phase=event.phase), {**self._common, STATUS_MESSAGE_ATTRIBUTE: event.message}
        )
