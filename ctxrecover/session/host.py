"""What the session's helpers read and change of the Session: the protocol it satisfies, named in full."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ctxrecover.archive import SessionArchive
from ctxrecover.compaction import HistoryCompactor
from ctxrecover.events import EventBus, SessionStats
from ctxrecover.messages import Message
from ctxrecover.passes.turn import TurnPasses
from ctxrecover.policy import Policy
from ctxrecover.recovery import GatewayModel, RecoveryLadder
from ctxrecover.recovery.escalation import OutputEscalation
from ctxrecover.summarize import CancelToken
from ctxrecover.transport import ChatRequest
from ctxrecover.wire import WireFormat

__all__ = ["LIVE_HISTORY", "LIVE_OUTGOING", "SessionHost"]

LIVE_HISTORY = "history"  # the SessionArchive lists a session keeps pinned
LIVE_OUTGOING = "outgoing"


class SessionHost(Protocol):
    """The Session as its helpers see it: collaborators, the state they change, and the request builders.

    ``_history`` is a property whose setter re-pins the archive; ``stats`` is replaced by
    ``restore()``, so helpers read both through the session, never keep their own copy.
    """

    policy: Policy
    events: EventBus
    stats: SessionStats
    archive: SessionArchive
    passes: TurnPasses
    compactor: HistoryCompactor
    ladder: RecoveryLadder
    escalation: OutputEscalation
    wire_format: WireFormat
    model: str
    tools: Any
    context_window: int
    chars_per_token: float
    reserved_chars: int
    context_editing: bool
    tool_result_budget_chars: int
    tool_result_max_chars: int
    _history: list[Message]
    _gateway: GatewayModel
    _unproven: dict[int, Message]
    _marked: dict[int, tuple[Message, Message]]

    @property
    def _keep_recent(self) -> int: ...

    def char_budget(self, budget_ratio: float | None = None, *, max_tokens: int | None = None) -> int: ...

    def _prologue(self, max_tokens: int | None, cancel: CancelToken | None) -> ChatRequest: ...

    def _outgoing(self, max_tokens: int | None) -> ChatRequest: ...

    def _request_bytes(self, history: Sequence[Message], max_tokens: int | None) -> int: ...

    def _size_of(self, request: ChatRequest) -> int: ...
