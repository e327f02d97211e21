"""Usage accounting of a session's answered requests and the chars-per-token calibration it feeds."""

from __future__ import annotations

import math

from ctxrecover.session.host import SessionHost
from ctxrecover.summarize.context_editing import mirror_applied_edits
from ctxrecover.transport import ChatRequest, ChatResponse

__all__ = ["Accounting"]

CALIBRATION_MIN_TOKENS = 200  # ignore tiny requests when calibrating chars per token
CALIBRATION_WEIGHT = 0.3  # exponential moving average of observed chars per token
CALIBRATION_BOUNDS = (1.0, 8.0)


class Accounting:
    """A :class:`~ctxrecover.session.Session`'s token counts: the provider's reported usage added to
    ``session.stats``, and ``session.chars_per_token`` calibrated on it (text only)."""

    def __init__(self, session: SessionHost) -> None:
        self.session = session

    def input_tokens(self, request: ChatRequest, response: ChatResponse | None = None) -> int:
        """The request's input tokens: the provider's count when it reported one, else an estimate
        (text at the session's chars per token, images at their token cost)."""
        if response is not None:
            usage = response.usage
            reported = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
            if reported:
                return reported
        weights = self.session.passes.request_weights(request.messages)
        text = weights.weight - weights.image_chars + self.session.reserved_chars
        return math.ceil(text / self.session.chars_per_token) + weights.image_tokens

    def account(self, request: ChatRequest, response: ChatResponse) -> None:
        """Count the answer's usage, mirror edits the provider's context editing applied, and calibrate
        chars per token on the text (not after an edit: the history it counted is gone)."""
        usage = response.usage
        self.session.stats.provider_input_tokens += (
            usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        )
        self.session.stats.provider_output_tokens += usage.output_tokens
        edited = False
        if self.session.context_editing:
            with self.session.archive.attributed("context_editing"):
                self.session._history, report = mirror_applied_edits(
                    self.session._history, response.raw, archive=self.session.archive
                )
            if report.applied:
                edited = True
                self.session.stats.cache_rebuilds_expected += 1
                self.session.events.notice(
                    "context_editing",
                    f"ℹ provider context editing cleared {report.cleared_tool_uses} tool result(s), "
                    f"{report.cleared_input_tokens} tokens — mirrored locally (recoverable via @recall)",
                )
        # Calibrate on text only: images weigh their wire bytes but cost the model their token estimate.
        weights = self.session.passes.request_weights(request.messages)
        prompt_tokens = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        text_tokens = prompt_tokens - weights.image_tokens
        if not edited and text_tokens >= CALIBRATION_MIN_TOKENS:
            chars = weights.weight - weights.image_chars + self.session.reserved_chars
            observed = chars / text_tokens
            low, high = CALIBRATION_BOUNDS
            blended = (1 - CALIBRATION_WEIGHT) * self.session.chars_per_token + CALIBRATION_WEIGHT * observed
            self.session.chars_per_token = min(high, max(low, blended))
