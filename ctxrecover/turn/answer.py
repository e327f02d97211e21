"""What an accepted request teaches (SPEC §8, §11): usage, calibration, provider edits, escalation.

:func:`account` counts the provider's usage, mirrors the edits Anthropic's context editing
applied and calibrates ``chars_per_token`` on the text; :func:`input_tokens` is what the
provider counted for a request (or an estimate); :func:`continuation` is the escalation of an
answer cut at ``max_tokens``.
"""

from __future__ import annotations

import math

from ctxrecover.messages import Message
from ctxrecover.summarize.context_editing import mirror_applied_edits
from ctxrecover.transport import ChatRequest, ChatResponse
from ctxrecover.turn.conversation import Conversation

__all__ = [
    "CALIBRATION_BOUNDS",
    "CALIBRATION_MIN_TOKENS",
    "CALIBRATION_WEIGHT",
    "account",
    "calibrate",
    "input_tokens",
]

CALIBRATION_MIN_TOKENS = 200  # ignore tiny requests when calibrating chars per token
CALIBRATION_WEIGHT = 0.3  # exponential moving average of observed chars per token
CALIBRATION_BOUNDS = (1.0, 8.0)
CONTEXT_EDITING_NOTICE = (
    "ℹ provider context editing cleared %d tool result(s), %d tokens — mirrored locally "
    "(recoverable via @recall)"
)


def input_tokens(conv: Conversation, request: ChatRequest, response: ChatResponse | None = None) -> int:
    """The request's input tokens: the provider's count when it reported one, else an estimate
    (text at the conversation's chars per token, images at their token cost)."""
    if response is not None:
        usage = response.usage
        reported = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        if reported:
            return reported
    weights = conv.passes.request_weights(request.messages)
    text = weights.weight - weights.image_chars + conv.reserved_chars
    return math.ceil(text / conv.chars_per_token) + weights.image_tokens


def account(conv: Conversation, request: ChatRequest, response: ChatResponse) -> None:
    """Count the answer's usage, mirror edits the provider's context editing applied, and calibrate
    chars per token on the text (not after an edit: the history it counted is gone)."""
    usage = response.usage
    prompt_tokens = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    conv.stats.provider_input_tokens += prompt_tokens
    conv.accepted_prompt_tokens = max(conv.accepted_prompt_tokens, prompt_tokens)
    conv.stats.provider_output_tokens += usage.output_tokens
    edited = False
    if conv.context_editing:
        with conv.archive.attributed("context_editing"):
            history, report = mirror_applied_edits(conv.history, response.raw, archive=conv.archive)
        if report.applied:
            conv.history = history
            edited = True
            conv.stats.cache_rebuilds_expected += 1
            conv.events.notice(
                "context_editing",
                CONTEXT_EDITING_NOTICE % (report.cleared_tool_uses, report.cleared_input_tokens),
            )
    if not edited:
        calibrate(conv, request, prompt_tokens)


def calibrate(
    conv: Conversation,
    request: ChatRequest,
    prompt_tokens: int,
    *,
    weight: float = CALIBRATION_WEIGHT,
    clamp: bool = True,
) -> None:
    """Move chars per token towards what the provider counted for ``request`` (``weight`` of the way):
    on text only, since images weigh their wire bytes but cost the model their token estimate. An
    observation outside :data:`CALIBRATION_BOUNDS` is clamped, or ignored without ``clamp`` (a count
    no text of this request could give is not a count of it)."""
    weights = conv.passes.request_weights(request.messages)
    text_tokens = prompt_tokens - weights.image_tokens
    if text_tokens >= CALIBRATION_MIN_TOKENS:
        chars = weights.weight - weights.image_chars + conv.reserved_chars
        observed = chars / text_tokens
        low, high = CALIBRATION_BOUNDS
        if not clamp and not low <= observed <= high:
            return
        blended = (1 - weight) * conv.chars_per_token + weight * observed
        conv.chars_per_token = min(high, max(low, blended))


def continuation(conv: Conversation, partial: Message) -> list[Message]:
    """The history with the cut answer and the continuation request appended (SPEC §8), both new to
    the gateway."""
    history = conv.escalation.continuation(conv.history, partial)
    added = history[len(conv.history) :]
    conv.unproven = {**conv.unproven, **{id(m): m for m in added}}
    return history
