"""What ``Session`` and ``AsyncSession`` share: building the conversation, reading it, changing it
between turns, persisting it. The turn itself is :func:`ctxrecover.turn.turn_flow`; the two
sessions only drive it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import ctxrecover.catalog as catalog
from ctxrecover.archive import Archive, MemoryArchive, SessionArchive
from ctxrecover.classify import Failure, classify
from ctxrecover.compaction import HistoryCompactor
from ctxrecover.errors import ArchiveError, ConfigError
from ctxrecover.events import Event, EventBus, SessionStats
from ctxrecover.messages import Message
from ctxrecover.passes.parts import set_aside
from ctxrecover.passes.turn import TurnPasses
from ctxrecover.policy import DEFAULT_POLICY, Policy
from ctxrecover.recovery import GatewayModel, RecoveryLadder
from ctxrecover.recovery.escalation import OutputEscalation
from ctxrecover.session.summarizer import resolve_summarizer
from ctxrecover.summarize import ContextEngine, Summarizer
from ctxrecover.turn import Conversation, Mode
from ctxrecover.turn.conversation import admitted
from ctxrecover.turn.request import char_budget
from ctxrecover.wire import WireFormat

__all__ = [
    "ARCHIVE_PINS_NOTICE",
    "ARCHIVE_PRESSURE_CODE",
    "ARCHIVE_PRESSURE_NOTICE",
    "ARCHIVE_REFUSED_NOTICE",
    "PROVIDER_BY_FORMAT",
    "TRANSIENT_RETRIES",
    "SessionBase",
]

PROVIDER_BY_FORMAT: dict[WireFormat, str] = {
    WireFormat.OPENAI_CHAT: "openai",
    WireFormat.OPENAI_RESPONSES: "openai",
    WireFormat.ANTHROPIC: "anthropic",
    WireFormat.GEMINI: "google",
    WireFormat.BEDROCK_CONVERSE: "bedrock",
}
TRANSIENT_RETRIES = 2
# Decision beyond the reference: the archive never evicts what the history reaches, so it may refuse.
ARCHIVE_REFUSED_NOTICE = (
    "⚠ CCR archive refused to store what this turn would cut — that cut was not made, nothing is lost: %s"
)
ARCHIVE_PINS_NOTICE = "⚠ CCR archive could not record which entries this session still uses (will retry): %s"
# Issue 25: once, when live histories hold PRESSURE_WARN_FRACTION of the cap (ArchivePressure.notice_fields).
ARCHIVE_PRESSURE_CODE = "archive_pressure"
ARCHIVE_PRESSURE_NOTICE = (
    "⚠ CCR archive %(path)s is %(percent)d%% full of entries live histories still reach (%(held)s of "
    "max_bytes %(max_bytes)s): this session holds %(session)s, other sessions %(others)s — once it is full, "
    "a turn that must cut stops with ArchiveFullError; %(advice)s"
)


class SessionBase:
    """One conversation with a provider, recovering from every recoverable failure (the shared part).

    ``sender`` is the network seam (a :class:`~ctxrecover.transport.Sender`, or an
    ``AsyncSender`` for ``AsyncSession``); its ``wire_format`` decides how requests are
    sized. ``mode="chat"`` uses the chat budget (ratio 0.75, keep 10) instead of the
    agent's (0.60, keep 8). ``gateway`` starts the session from a known
    :class:`~ctxrecover.recovery.GatewayModel` (default: none learned,
    ``policy.payload_cap`` configured, ``policy.cap_strategy``); ``classifier`` replaces
    :func:`~ctxrecover.classify.classify` (same signature).

    A turn costs what changed since the last one, not the whole history: the
    turn-boundary passes and every size a decision reads are kept incrementally
    (:class:`~ctxrecover.passes.turn.TurnPasses`), and each message's archive keys
    are computed once, as it enters. ``incremental=False`` runs every pass over the
    whole history at every turn instead: the same results, the reference the
    incremental path is tested against.
    """

    def __init__(
        self,
        sender: Any,
        *,
        policy: Policy | None = None,
        archive: Archive | None = None,
        summarizer: Summarizer | None = None,
        on_event: Callable[[Event], Any] | None = None,
        mode: Mode = "agent",
        provider: str | None = None,
        model: str | None = None,
        max_tokens: int | None = None,
        tools: Any = None,
        memory_sink: Callable[[list[Message]], None] | None = None,
        history: Iterable[Message] = (),
        stats: SessionStats | None = None,
        ladder: RecoveryLadder | None = None,
        compactor: HistoryCompactor | None = None,
        gateway: GatewayModel | None = None,
        context_engine: ContextEngine | None = None,
        env: Mapping[str, str] | None = None,
        transient_retries: int = TRANSIENT_RETRIES,
        classifier: Callable[..., Failure] = classify,
        incremental: bool = True,
    ) -> None:
        if mode not in ("agent", "chat"):
            raise ConfigError(f"mode must be 'agent' or 'chat', got {mode!r}")
        self.sender = sender
        self.max_tokens = max_tokens
        policy = policy or DEFAULT_POLICY
        events = EventBus(on_event)
        stats = stats or SessionStats()
        wire_format = WireFormat(getattr(sender, "wire_format", WireFormat.OPENAI_CHAT))
        model = model or str(getattr(sender, "model", "") or "")
        provider = provider or PROVIDER_BY_FORMAT[wire_format]
        session_archive = SessionArchive(
            archive if archive is not None else MemoryArchive(),
            on_error=self._archive_failed,
            on_archived=lambda source, chars: self.stats.count_archived(source, chars),
            on_pressure=lambda pressure: self.events.notice(
                ARCHIVE_PRESSURE_CODE, ARCHIVE_PRESSURE_NOTICE % pressure.notice_fields()
            ),
        )
        output_cap = min(catalog.max_output_tokens(provider, model), policy.max_output_tokens_cap)
        self.output_cap = output_cap
        self.conversation = Conversation(
            policy=policy,
            events=events,
            stats=stats,
            archive=session_archive,
            passes=TurnPasses(policy, session_archive, wire_format, model=model, incremental=incremental),
            compactor=compactor
            or HistoryCompactor(
                policy,
                session_archive,
                summarizer=resolve_summarizer(
                    policy, summarizer, context_engine, env=os.environ if env is None else env
                ),
                events=events,
                stats=stats,
                memory_sink=memory_sink,
            ),
            ladder=ladder or RecoveryLadder.default(policy),
            escalation=OutputEscalation(policy, provider_cap=output_cap),
            gateway=gateway or GatewayModel.from_policy(policy),
            classify=classifier,
            wire_format=wire_format,
            model=model,
            provider=provider,
            mode=mode,
            tools=tools,
            # Tool definitions ride along with every request: measured once, reserved from the budget.
            reserved_chars=len(json.dumps(tools, ensure_ascii=False)) if tools else 0,
            context_window=policy.context_window or catalog.context_window(provider, model, env={}),
            context_editing=policy.context_engine == "provider" and wire_format is WireFormat.ANTHROPIC,
            transient_retries=transient_retries,
        )
        self.conversation.history = admitted(history, start=0)  # given, not new: proven by the caller

    # -- what the conversation holds ------------------------------------------------------------------
    @property
    def history(self) -> list[Message]:
        """A copy of the current (compacted) history."""
        return list(self.conversation.history)

    @property
    def gateway(self) -> GatewayModel:
        """What the session has learned of its gateway (SPEC §11): a frozen value, replaced as it learns."""
        return self.conversation.gateway

    @property
    def learned_cap(self) -> int | None:
        """The payload cap learned from the gateway's answers, if any."""
        return self.conversation.gateway.learned_cap

    @property
    def payload_cap(self) -> int:
        """The payload cap in force (configured or learned, the tighter one); 0 = none."""
        return self.conversation.gateway.effective_cap

    @property
    def policy(self) -> Policy:
        return self.conversation.policy

    @property
    def events(self) -> EventBus:
        return self.conversation.events

    @property
    def stats(self) -> SessionStats:
        return self.conversation.stats

    @property
    def archive(self) -> SessionArchive:
        """The session's view of its store; everything cut from the history is recallable there."""
        return self.conversation.archive

    @property
    def compactor(self) -> HistoryCompactor:
        return self.conversation.compactor

    @property
    def ladder(self) -> RecoveryLadder:
        return self.conversation.ladder

    @property
    def escalation(self) -> OutputEscalation:
        return self.conversation.escalation

    @property
    def passes(self) -> TurnPasses:
        return self.conversation.passes

    @property
    def mode(self) -> Mode:
        return self.conversation.mode

    @property
    def wire_format(self) -> WireFormat:
        return self.conversation.wire_format

    @property
    def model(self) -> str:
        return self.conversation.model

    @property
    def provider(self) -> str:
        return self.conversation.provider

    @property
    def tools(self) -> Any:
        return self.conversation.tools

    @property
    def context_window(self) -> int:
        """The window in tokens the budget aims at (the catalog's, or a smaller one a provider stated)."""
        return self.conversation.context_window

    @property
    def chars_per_token(self) -> float:
        """Chars per token, calibrated on the provider's usage reports."""
        return self.conversation.chars_per_token

    @property
    def tool_result_budget_chars(self) -> int:
        return self.conversation.tool_result_budget_chars

    @property
    def tool_result_max_chars(self) -> int:
        return self.conversation.tool_result_max_chars

    def char_budget(self, budget_ratio: float | None = None, *, max_tokens: int | None = None) -> int:
        """The char budget the history must fit at ``budget_ratio`` (the mode's by default); see
        :func:`ctxrecover.turn.request.char_budget`."""
        return char_budget(self.conversation, budget_ratio, max_tokens=max_tokens)

    # -- between turns --------------------------------------------------------------------------------
    def add(self, message: Message) -> None:
        """Append one message (a user turn, a tool result, …).

        Raises :class:`~ctxrecover.errors.MessageError` for anything but a
        :class:`Message`, and its :class:`~ctxrecover.errors.UnencodableTextError`
        for text holding a lone surrogate (naming the index the message would
        take, the field and the char offset); the history is then unchanged.
        """
        self.extend((message,))

    def extend(self, messages: Iterable[Message]) -> None:
        """Append several messages; all are checked first (like :meth:`add`), so none or all enter."""
        conv = self.conversation
        conv.append(admitted(messages, start=len(conv.history)))

    def set_aside(self, index: int) -> str:
        """Archive message ``index`` of the history whole and leave a stub with its recall marker.

        For the message a gateway's content rule refuses to carry
        (:attr:`ContentBlockedError.message_index`); tool-call pairing is kept.
        Returns the archive key of its text.
        """
        conv = self.conversation
        with conv.archive.attributed("set_aside"):
            conv.history, key = set_aside(conv.history, index, archive=conv.archive)
        return key

    def undo_compaction(self) -> bool:
        """Restore the history from before the newest compaction; False when there is none."""
        conv = self.conversation
        snapshot = conv.compactor.undo()
        if snapshot is None:
            return False
        conv.history = snapshot
        return True

    # -- persistence --------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """What persists with the session: history, counters, the gateway model, the learned output
        cap, calibration and the session's tool-result limits (plain JSON-ready data)."""
        return self.conversation.state()

    def restore(self, state: dict[str, Any]) -> None:
        """Load what :meth:`state` saved (into a session built with the same sender and policy).

        The session takes over the archive pins its saved self held (``archive_owner``),
        so what the restored history reaches is still there however long ago it was saved.
        """
        self.conversation.restore(state)

    # -- internals ----------------------------------------------------------------------------------
    def _archive_failed(self, exc: ArchiveError, stage: str) -> None:
        """The archive refused a write (the cut was abandoned) or a pin change: count it and say so."""
        if stage == "put":
            self.stats.archive_refusals += 1
            self.events.notice("archive_refused", ARCHIVE_REFUSED_NOTICE % exc)
        else:
            self.events.notice("archive_pins", ARCHIVE_PINS_NOTICE % exc)
