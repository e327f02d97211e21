"""The Session class: a conversation's state and history, and the turn loop that sends and recovers."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import ctxrecover.catalog as catalog
from ctxrecover.archive import Archive, MemoryArchive, SessionArchive, member_keys
from ctxrecover.classify import Failure, classify
from ctxrecover.compaction import CompactionReport, HistoryCompactor
from ctxrecover.errors import ArchiveError, MessageError
from ctxrecover.events import Event, EventBus, SessionStats
from ctxrecover.messages import Message, check_encodable
from ctxrecover.passes.parts import archive_images, set_aside
from ctxrecover.passes.truncate import leading_system_count
from ctxrecover.passes.turn import TurnPasses
from ctxrecover.policy import DEFAULT_POLICY, Policy
from ctxrecover.recovery import GatewayModel, RecoveryLadder
from ctxrecover.recovery.escalation import OutputEscalation
from ctxrecover.recovery.probe import unmarked
from ctxrecover.session.accounting import Accounting
from ctxrecover.session.failures import FailureHandler
from ctxrecover.session.host import LIVE_HISTORY, LIVE_OUTGOING
from ctxrecover.session.planning import RequestPlanner
from ctxrecover.session.summarizer import resolve_summarizer
from ctxrecover.sizes import char_budget, total_weight
from ctxrecover.summarize import CancelToken, ContextEngine, Summarizer
from ctxrecover.summarize.context_editing import context_management_request
from ctxrecover.transport import ChatRequest, Sender
from ctxrecover.wire import DEFAULT_ANTHROPIC_MAX_TOKENS, WireFormat, request_size

__all__ = ["Mode", "Session"]

Mode = Literal["agent", "chat"]

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


class Session:
    """One conversation with a provider, recovering from every recoverable failure.

    ``sender`` is the one-method network seam (:class:`~ctxrecover.transport.HttpxSender`
    or an SDK adapter); its ``wire_format`` decides how requests are sized.
    ``mode="chat"`` uses the chat budget (ratio 0.75, keep 10) instead of the
    agent's (0.60, keep 8). ``sleep`` is injected for transient-network retries.
    ``gateway`` starts the session from a known :class:`~ctxrecover.recovery.GatewayModel`
    (default: none learned, ``policy.payload_cap`` configured, ``policy.cap_strategy``);
    ``classifier`` replaces :func:`~ctxrecover.classify.classify` (same signature).

    A turn costs what changed since the last one, not the whole history: the
    turn-boundary passes and every size a decision reads are kept incrementally
    (:class:`~ctxrecover.passes.turn.TurnPasses`), and each message's archive keys
    are computed once, as it enters (:func:`~ctxrecover.archive.member_keys`).
    ``incremental=False`` runs every pass over the whole history at every turn
    instead: the same results, the reference the incremental path is tested against.
    """

    def __init__(
        self,
        sender: Sender,
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
        sleep: Callable[[float], None] = time.sleep,
        classifier: Callable[..., Failure] = classify,
        incremental: bool = True,
    ) -> None:
        if mode not in ("agent", "chat"):
            raise ValueError(f"mode must be 'agent' or 'chat', got {mode!r}")
        self.sender = sender
        self.policy = policy or DEFAULT_POLICY
        self.events = EventBus(on_event)
        self.stats = stats or SessionStats()
        self.archive = SessionArchive(
            archive if archive is not None else MemoryArchive(),
            on_error=self._archive_failed,
            on_archived=lambda source, chars: self.stats.count_archived(source, chars),
            on_pressure=lambda p: self.events.notice(
                ARCHIVE_PRESSURE_CODE, ARCHIVE_PRESSURE_NOTICE % p.notice_fields()
            ),
        )
        self.mode: Mode = mode
        self.wire_format = WireFormat(getattr(sender, "wire_format", WireFormat.OPENAI_CHAT))
        self.model = model or str(getattr(sender, "model", "") or "")
        self.provider = provider or PROVIDER_BY_FORMAT[self.wire_format]
        self.context_window = self.policy.context_window or catalog.context_window(
            self.provider, self.model, env={}
        )
        self.output_cap = min(
            catalog.max_output_tokens(self.provider, self.model), self.policy.max_output_tokens_cap
        )
        self.max_tokens = max_tokens
        self.tools = tools
        # Tool definitions ride along with every request: measured once, reserved from the budget.
        self.reserved_chars = len(json.dumps(tools, ensure_ascii=False)) if tools else 0
        self._gateway = gateway or GatewayModel.from_policy(self.policy)
        self.compactor = compactor or HistoryCompactor(
            self.policy,
            self.archive,
            summarizer=resolve_summarizer(
                self.policy, summarizer, context_engine, env=os.environ if env is None else env
            ),
            events=self.events,
            stats=self.stats,
            memory_sink=memory_sink,
        )
        self.ladder = ladder or RecoveryLadder.default(self.policy)
        self.escalation = OutputEscalation(self.policy, provider_cap=self.output_cap)
        self.tool_result_budget_chars = self.policy.tool_result_budget_chars
        self.tool_result_max_chars = self.policy.tool_result_max_chars
        self.chars_per_token = self.policy.chars_per_token
        self.context_editing = (
            self.policy.context_engine == "provider" and self.wire_format is WireFormat.ANTHROPIC
        )
        self._accounting = Accounting(self)
        self._planner = RequestPlanner(self)
        self._failures = FailureHandler(
            self, classifier=classifier, sleep=sleep, transient_retries=transient_retries
        )
        self.passes = TurnPasses(
            self.policy, self.archive, self.wire_format, model=self.model, incremental=incremental
        )
        self._history = self._admitted(history, start=0)
        self._env_reported = False
        # Messages no accepted request carried yet (added, or answered, since the last one), by id.
        self._unproven: dict[int, Message] = {}
        self._marked: dict[int, tuple[Message, Message]] = {}  # probe marks, for undo snapshots

    # -- state ----------------------------------------------------------------
    @property
    def history(self) -> list[Message]:
        """A copy of the current (compacted) history."""
        return list(self._history)

    @property
    def gateway(self) -> GatewayModel:
        """What the session has learned of its gateway (SPEC §11): a frozen value, replaced as it learns."""
        return self._gateway

    @property
    def _history(self) -> list[Message]:
        return self._live_history

    @_history.setter
    def _history(self, messages: list[Message]) -> None:
        # Every change of the history reaches the archive's pins (O(changed); see SessionArchive).
        self._live_history = messages
        self.archive.track(LIVE_HISTORY, messages)

    @property
    def learned_cap(self) -> int | None:
        """The payload cap learned from the gateway's answers, if any."""
        return self._gateway.learned_cap

    @property
    def payload_cap(self) -> int:
        """The payload cap in force (configured or learned, the tighter one); 0 = none."""
        return self._gateway.effective_cap

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
        admitted = self._admitted(messages, start=len(self._history))
        self._history.extend(admitted)
        self._unproven.update((id(m), m) for m in admitted)
        self.archive.track(LIVE_HISTORY, self._history)

    @staticmethod
    def _admitted(messages: Iterable[Message], *, start: int) -> list[Message]:
        admitted = list(messages)
        for index, message in enumerate(admitted, start):
            if not isinstance(message, Message):
                raise MessageError(
                    f"message {index}: Session.add needs a Message (e.g. Message.user(text)), "
                    f"got {type(message).__name__}",
                    field="message",
                    index=index,
                )
            check_encodable(message, index=index)
        for message in admitted:
            member_keys(message)  # archive on append: hashed now, so a later cut stores by key
        return admitted

    def set_aside(self, index: int) -> str:
        """Archive message ``index`` of the history whole and leave a stub with its recall marker.

        For the message a gateway's content rule refuses to carry
        (:attr:`ContentBlockedError.message_index`); tool-call pairing is kept.
        Returns the archive key of its text.
        """
        with self.archive.attributed("set_aside"):
            self._history, key = set_aside(self._history, index, archive=self.archive)
        return key

    def char_budget(self, budget_ratio: float | None = None, *, max_tokens: int | None = None) -> int:
        """The char budget the history must fit at ``budget_ratio`` (the mode's by default).

        When the request asks for ``max_tokens`` (Anthropic always does), the
        provider reserves them inside the window: the budget never exceeds the
        window minus that reservation, even at a generous ratio.

        Under a payload cap, the budget keeps ``1 − policy.payload_cap_headroom``
        (30%) of the room the cap leaves *beyond the non-compactable base*
        (system prompt, tool definitions): ``system weight + 70% × (cap − base)``.
        **Decision (SPEC §11):** with §1.3's ``70% × cap`` a system prompt over 30%
        of the cap made every turn compact to a budget it could never reach.
        """
        ratio = budget_ratio if budget_ratio is not None else self._mode_ratio
        budget = char_budget(
            self.context_window,
            ratio,
            chars_per_token=self.chars_per_token,
            reserved_chars=self.reserved_chars,
        )
        anthropic_default = DEFAULT_ANTHROPIC_MAX_TOKENS if self.wire_format is WireFormat.ANTHROPIC else 0
        reserve = max_tokens or anthropic_default
        room = self.context_window - reserve
        if reserve and room > 0:
            budget = min(budget, int(room * self.chars_per_token) - self.reserved_chars)
        cap = self._gateway.effective_cap
        if not cap:
            return budget
        system = self._history[: leading_system_count(self._history)]
        room = max(0, cap - self._request_bytes(system, max_tokens))
        # The policy's headroom, not sizes' module default: the knob must take effect.
        return min(budget, total_weight(system) + int(room * self.policy.payload_cap_headroom))

    @property
    def _mode_ratio(self) -> float:
        return self.policy.chat_budget_ratio if self.mode == "chat" else self.policy.budget_ratio

    @property
    def _keep_recent(self) -> int:
        return self.policy.chat_keep_recent if self.mode == "chat" else self.policy.keep_recent

    # -- the turn -------------------------------------------------------------
    def complete(self, *, max_tokens: int | None = None, cancel: CancelToken | None = None) -> Message:
        """Run one turn and return the assistant's message (appended to the history).

        Raises :class:`~ctxrecover.errors.PayloadFloorError` when what compaction
        cannot shrink is over the gateway's limit (no request wasted on it),
        :class:`~ctxrecover.errors.ContentBlockedError` when the gateway refuses the
        content rather than the size, :class:`~ctxrecover.errors.HeaderFaultError`
        for an HTTP 431, :class:`~ctxrecover.errors.UnrecoverableFailure` for
        failures compaction cannot fix (auth, rate limit, …),
        :class:`~ctxrecover.errors.RecoveryExhausted` after the last attempt, and
        :class:`~ctxrecover.errors.CompactionCancelled` when ``cancel`` fires during
        compaction (history untouched). A request known to fail — as large as a
        size the gateway rejected, or identical (recall keys aside) to a refused
        one — is never sent.
        """
        self._report_env_problems()
        self.stats.turns += 1
        self.escalation.start_turn()
        turn = self._failures.new_turn(
            self.escalation.observe_user_override(max_tokens if max_tokens is not None else self.max_tokens)
        )
        request = self._prologue(turn.max_tokens, cancel)
        self._failures.refuse_known_failure(request, turn)
        while True:
            self.stats.requests += 1
            try:
                response = self.sender.send(request)
            except Exception as exc:  # every failure is classified, never swallowed
                request = self._failures.after_failure(exc, request, turn, cancel)
                continue
            self._accounting.account(request, response)
            self._unproven = {id(response.message): response.message}  # the answer was never sent
            accepted = self._gateway.accepted(response.request_bytes, policy=self.policy)
            self._failures.update_gateway(accepted, accepted=True)
            turn.before_recovery, turn.size_signatures = None, set()
            if turn.attempts:
                self.stats.recoveries += 1
                turn.attempts = 0
            if response.truncated:
                room = self.context_window - self._accounting.input_tokens(request, response)
                grown = self.escalation.next_max_tokens(turn.max_tokens, room=room)
                if grown is not None:
                    self.stats.escalations += 1
                    known = len(self._history)
                    self._history = self.escalation.continuation(self._history, response.message)
                    self._unproven.update((id(m), m) for m in self._history[known:])
                    turn.max_tokens = grown
                    request = self._prologue(turn.max_tokens, cancel)
                    continue
            member_keys(response.message)
            self._history.append(response.message)
            return response.message

    def _size_of(self, request: ChatRequest) -> int:
        return self.passes.request_bytes(
            request.messages, max_tokens=request.max_tokens, tools=request.tools, extra=request.extra or None
        )

    def _prologue(self, max_tokens: int | None, cancel: CancelToken | None) -> ChatRequest:
        """The turn's request, after the turn-boundary passes and planned compaction (:mod:`.planning`)."""
        return self._planner.prologue(max_tokens, cancel)

    def _outgoing(self, max_tokens: int | None) -> ChatRequest:
        """The request for the history: pairing repair and the tool-result budget applied to a copy,
        never to the history itself."""
        outgoing = self.passes.outgoing(
            self._history, budget_chars=self.tool_result_budget_chars, max_chars=self.tool_result_max_chars
        )
        self.archive.track(LIVE_OUTGOING, outgoing)  # the model sees the previews' markers: keep them too
        headers: dict[str, str] = {}
        extra: dict[str, Any] = {}
        if self.context_editing:
            headers, extra = context_management_request()
        return ChatRequest(
            tuple(outgoing), max_tokens=max_tokens, tools=self.tools, headers=headers, extra=extra
        )

    def _request_bytes(self, history: Sequence[Message], max_tokens: int | None) -> int:
        return request_size(
            history, self.wire_format, model=self.model, max_tokens=max_tokens, tools=self.tools
        )

    def _archive_failed(self, exc: ArchiveError, stage: str) -> None:
        """The archive refused a write (the cut was abandoned) or a pin change: count it and say so."""
        if stage == "put":
            self.stats.archive_refusals += 1
            self.events.notice("archive_refused", ARCHIVE_REFUSED_NOTICE % exc)
        else:
            self.events.notice("archive_pins", ARCHIVE_PINS_NOTICE % exc)

    def _report_env_problems(self) -> None:
        if self._env_reported:
            return
        self._env_reported = True
        for problem in self.policy.env_problems:
            self.events.notice("config", problem)

    # -- manual compaction ------------------------------------------------------
    def compact(
        self, instruction: str | None = None, *, cancel: CancelToken | None = None
    ) -> CompactionReport:
        """``/compact [instruction]``: compact now at the manual budget ratio (0.50).

        With an instruction, a guided summary that keeps the last 4 messages.
        """
        budget = self.char_budget(self.policy.manual_budget_ratio)
        keep = 4 if instruction else self._keep_recent
        with self.archive.attributed("images"):
            self._history, _ = archive_images(
                self._history, archive=self.archive, keep_recent=keep, user_first=False
            )
        result = self.compactor.compact(
            self._history,
            budget_chars=budget,
            keep_recent=keep,
            trigger="manual",
            cancel=cancel,
            instruction=instruction,
        )
        self._history = result.history
        return result.report

    def undo_compaction(self) -> bool:
        """Restore the history from before the newest compaction; False when there is none."""
        snapshot = self.compactor.undo()
        if snapshot is None:
            return False
        self._history = unmarked(snapshot, self._marked)
        return True

    # -- persistence --------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """What persists with the session: history, counters, the gateway model, the learned output
        cap, calibration and the session's tool-result limits (plain JSON-ready data)."""
        return {
            "history": [m.to_dict() for m in self._history],
            "stats": self.stats.to_dict(),
            "gateway": self._gateway.to_dict(),
            "output_cap": self.escalation.learned_cap,
            "chars_per_token": self.chars_per_token,
            "context_window": self.context_window,
            "tool_result_budget_chars": self.tool_result_budget_chars,
            "tool_result_max_chars": self.tool_result_max_chars,
            "archive_owner": self.archive.owner,
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Load what :meth:`state` saved (into a session built with the same sender and policy).

        The session takes over the archive pins its saved self held (``archive_owner``),
        so what the restored history reaches is still there however long ago it was saved.
        """
        owner = state.get("archive_owner")
        if isinstance(owner, str) and owner:
            self.archive.adopt(owner)
        history = [Message.from_dict(d) for d in state.get("history", [])]
        for message in history:
            member_keys(message)  # as if each entered now (see _admitted)
        self._history = history
        self.stats = SessionStats.from_dict(state.get("stats", {}))
        self.compactor.stats = self.stats
        if "gateway" in state:
            self._gateway = GatewayModel.from_dict(state["gateway"])
        if state.get("output_cap"):
            self.escalation.learn_output_cap(int(state["output_cap"]))
        self.chars_per_token = float(state.get("chars_per_token", self.chars_per_token))
        self.context_window = int(state.get("context_window", self.context_window))
        self.tool_result_budget_chars = int(
            state.get("tool_result_budget_chars", self.tool_result_budget_chars)
        )
        self.tool_result_max_chars = int(state.get("tool_result_max_chars", self.tool_result_max_chars))
