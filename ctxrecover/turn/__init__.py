"""The turn as a sans-IO generator: it yields actions (send, sleep, summarize) and decides everything else.

:func:`turn_flow` is one turn of a :class:`Conversation`; :mod:`.rejection` is the one module that
decides what a rejected request gets; ``Session`` and ``AsyncSession`` (:mod:`ctxrecover.session`)
are its two drivers.
"""

from ctxrecover.turn.actions import Action, Flow, Send, Sleep, is_provider_failure
from ctxrecover.turn.conversation import Checkpoint, Conversation, Mode
from ctxrecover.turn.flow import manual_compaction_flow, turn_flow

__all__ = [
    "Action",
    "Checkpoint",
    "Conversation",
    "Flow",
    "Mode",
    "Send",
    "Sleep",
    "is_provider_failure",
    "manual_compaction_flow",
    "turn_flow",
]
