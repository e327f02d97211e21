"""One conversation as its turns see it: :class:`Conversation`, the state that persists and the
collaborators that act on it.

The turn engine (:mod:`ctxrecover.turn.flow`) reads and replaces these public attributes; nothing
else does. ``Session`` and ``AsyncSession`` own one each and expose it read-only. What persists
with :meth:`Conversation.state` is plain data; what the collaborators keep (the gateway model, the
escalation, the compactor's undo stack and back-off) is restored by :meth:`rollback` when a turn is
interrupted, so a cancelled turn leaves the conversation as it found it.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ctxrecover.archive import SessionArchive, member_keys
from ctxrecover.compaction import HistoryCompactor
from ctxrecover.errors import MessageError
from ctxrecover.events import EventBus, SessionStats
from ctxrecover.failure import Failure
from ctxrecover.messages import Message, check_encodable
from ctxrecover.passes.turn import TurnPasses
from ctxrecover.policy import Policy
from ctxrecover.recovery import GatewayModel, RecoveryLadder
from ctxrecover.recovery.escalation import OutputEscalation
from ctxrecover.wire import WireFormat

__all__ = ["LIVE_HISTORY", "LIVE_OUTGOING", "Checkpoint", "Conversation", "Mode", "admitted"]

Mode = Literal["agent", "chat"]
LIVE_HISTORY = "history"  # the SessionArchive lists a conversation keeps pinned
LIVE_OUTGOING = "outgoing"


def admitted(messages: Iterable[Message], *, start: int) -> list[Message]:
    """``messages`` checked to enter a history at index ``start`` (all or none), their archive keys hashed.

    Raises :class:`~ctxrecover.errors.MessageError` for anything but a :class:`Message` and its
    :class:`~ctxrecover.errors.UnencodableTextError` for text holding a lone surrogate.
    """
    entering = list(messages)
    for index, message in enumerate(entering, start):
        if not isinstance(message, Message):
            raise MessageError(
                f"message {index}: Session.add needs a Message (e.g. Message.user(text)), "
                f"got {type(message).__name__}",
                field="message",
                index=index,
            )
        check_encodable(message, index=index)
    for message in entering:
        member_keys(message)  # archive on append: hashed now, so a later cut stores by key
    return entering


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The conversation at one moment, to return to it (:meth:`Conversation.rollback`).

    The history list is kept by identity with its length: the engine replaces lists and
    only ever appends in place, so the list as it was is the first ``length`` items.
    """

    history: list[Message]
    length: int
    gateway: GatewayModel
    tool_result_budget_chars: int
    tool_result_max_chars: int
    context_window: int
    accepted_prompt_tokens: int
    chars_per_token: float
    unproven: dict[int, Message]
    last_accepted: tuple[Message, ...]
    escalation: OutputEscalation
    compactor: tuple[deque[list[Message]], int, dict[int, Message]]


class Conversation:
    """The state of one conversation and its collaborators (see the module docstring).

    State (replaced by the turn engine, persisted by :meth:`state`): ``history`` (a property
    that keeps the archive's pins in step), ``gateway``, the tool-result limits, the
    ``context_window`` with ``accepted_prompt_tokens`` (the largest prompt the provider accepted, by
    its own count: the window's lower bound) and the calibrated ``chars_per_token``; ``unproven`` holds the
    messages no accepted request carried yet (by id): a block's first suspects.
    Collaborators: ``policy``, ``events``, ``stats``, ``archive``, ``passes``, ``compactor``,
    ``ladder``, ``escalation`` and ``classify``.
    """

    def __init__(
        self,
        *,
        policy: Policy,
        events: EventBus,
        stats: SessionStats,
        archive: SessionArchive,
        passes: TurnPasses,
        compactor: HistoryCompactor,
        ladder: RecoveryLadder,
        escalation: OutputEscalation,
        gateway: GatewayModel,
        classify: Callable[..., Failure],
        wire_format: WireFormat,
        model: str,
        provider: str,
        mode: Mode,
        tools: Any,
        reserved_chars: int,
        context_window: int,
        context_editing: bool,
        transient_retries: int,
    ) -> None:
        self.policy = policy
        self.events = events
        self.stats = stats
        self.archive = archive
        self.passes = passes
        self.compactor = compactor
        self.ladder = ladder
        self.escalation = escalation
        self._gateway = gateway
        self.archive.withheld = frozenset(gateway.withheld)
        self.classify = classify
        self.wire_format = wire_format
        self.model = model
        self.provider = provider
        self.mode: Mode = mode
        self.tools = tools
        self.reserved_chars = reserved_chars
        self.context_window = context_window
        self.accepted_prompt_tokens = 0
        self.context_editing = context_editing
        self.transient_retries = transient_retries
        self.tool_result_budget_chars = policy.tool_result_budget_chars
        self.tool_result_max_chars = policy.tool_result_max_chars
        self.chars_per_token = policy.chars_per_token
        self.env_reported = False
        self._history: list[Message] = []
        self.unproven: dict[int, Message] = {}
        #: The messages of the last request the gateway accepted (what a block's suspects are new to).
        self.last_accepted: tuple[Message, ...] = ()

    # -- the gateway and the history ------------------------------------------------------------------
    @property
    def gateway(self) -> GatewayModel:
        """What the conversation learned of its gateway (a frozen value the engine replaces)."""
        return self._gateway

    @gateway.setter
    def gateway(self, model: GatewayModel) -> None:
        if model.withheld != self._gateway.withheld:  # refused content is never recalled through it
            self.archive.withheld = frozenset(model.withheld)
        self._gateway = model

    @property
    def history(self) -> list[Message]:
        """The live history (the engine replaces it; read it, do not change it in place)."""
        return self._history

    @history.setter
    def history(self, messages: list[Message]) -> None:
        # Every change of the history reaches the archive's pins (O(changed); see SessionArchive).
        self._history = messages
        self.archive.track(LIVE_HISTORY, messages)

    def append(self, messages: Sequence[Message]) -> None:
        """Append messages in place (already :func:`admitted`, or the provider's own answer): new
        to the gateway (unproven), their keys hashed, pinned."""
        for message in messages:
            member_keys(message)
        self._history.extend(messages)
        self.unproven = {**self.unproven, **{id(m): m for m in messages}}
        self.archive.track(LIVE_HISTORY, self._history)

    @property
    def keep_recent(self) -> int:
        """Messages planned compaction keeps whole: the mode's (agent 8, chat 10 by default)."""
        return self.policy.chat_keep_recent if self.mode == "chat" else self.policy.keep_recent

    @property
    def mode_ratio(self) -> float:
        """The budget ratio of the mode (agent 0.60, chat 0.75 by default)."""
        return self.policy.chat_budget_ratio if self.mode == "chat" else self.policy.budget_ratio

    # -- interruption -------------------------------------------------------------------------------
    def checkpoint(self) -> Checkpoint:
        """The conversation now (O(1) in the history: its list is kept by identity); until
        :meth:`commit` or :meth:`rollback`, what the archive newly stores is journaled."""
        compactor = self.compactor
        self.archive.begin_journal()
        return Checkpoint(
            history=self._history,
            length=len(self._history),
            gateway=self.gateway,
            tool_result_budget_chars=self.tool_result_budget_chars,
            tool_result_max_chars=self.tool_result_max_chars,
            context_window=self.context_window,
            accepted_prompt_tokens=self.accepted_prompt_tokens,
            chars_per_token=self.chars_per_token,
            unproven=self.unproven,
            last_accepted=self.last_accepted,
            escalation=copy.copy(self.escalation),
            compactor=compactor.checkpoint(),
        )

    def rollback(self, checkpoint: Checkpoint) -> None:
        """Return to ``checkpoint`` (an interrupted turn): history, gateway model, limits, window,
        calibration, escalation and the compactor's undo stack and back-off; the archive's pins
        follow the history, and what the turn newly stored that nothing holds is deleted from a
        pinning store (a store without pins may be shared unseen: its entries stay, unreferenced).
        Counters are kept: the requests were sent."""
        history = checkpoint.history
        del history[checkpoint.length :]
        self.history = history
        self.archive.track(LIVE_OUTGOING, ())
        self.archive.end_journal(discard=True)  # what the turn stored and nothing holds goes again
        self.gateway = checkpoint.gateway
        self.tool_result_budget_chars = checkpoint.tool_result_budget_chars
        self.tool_result_max_chars = checkpoint.tool_result_max_chars
        self.context_window = checkpoint.context_window
        self.accepted_prompt_tokens = checkpoint.accepted_prompt_tokens
        self.chars_per_token = checkpoint.chars_per_token
        self.unproven = checkpoint.unproven
        self.last_accepted = checkpoint.last_accepted
        self.escalation = checkpoint.escalation
        self.compactor.rollback(checkpoint.compactor)

    def commit(self) -> None:
        """The turn since :meth:`checkpoint` ended (answered or raised): what it did stays."""
        self.archive.end_journal()

    # -- persistence --------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """What persists: history, counters, the gateway model, the learned output cap, calibration,
        the window and the tool-result limits (plain JSON-ready data)."""
        return {
            "history": [m.to_dict() for m in self._history],
            "stats": self.stats.to_dict(),
            "gateway": self.gateway.to_dict(),
            "output_cap": self.escalation.learned_cap,
            "chars_per_token": self.chars_per_token,
            "context_window": self.context_window,
            "accepted_prompt_tokens": self.accepted_prompt_tokens,
            "tool_result_budget_chars": self.tool_result_budget_chars,
            "tool_result_max_chars": self.tool_result_max_chars,
            "archive_owner": self.archive.owner,
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Load what :meth:`state` saved; the archive pins of the saved owner are taken over."""
        owner = state.get("archive_owner")
        if isinstance(owner, str) and owner:
            self.archive.adopt(owner)
        history = [Message.from_dict(d) for d in state.get("history", [])]
        for message in history:
            member_keys(message)  # as if each entered now (see admitted)
        self.history = history
        self.stats = SessionStats.from_dict(state.get("stats", {}))
        self.compactor.stats = self.stats
        if "gateway" in state:
            self.gateway = GatewayModel.from_dict(state["gateway"])
        if state.get("output_cap"):
            self.escalation.learn_output_cap(int(state["output_cap"]))
        self.chars_per_token = float(state.get("chars_per_token", self.chars_per_token))
        self.context_window = int(state.get("context_window", self.context_window))
        self.accepted_prompt_tokens = int(state.get("accepted_prompt_tokens", 0))
        self.tool_result_budget_chars = int(
            state.get("tool_result_budget_chars", self.tool_result_budget_chars)
        )
        self.tool_result_max_chars = int(state.get("tool_result_max_chars", self.tool_result_max_chars))
