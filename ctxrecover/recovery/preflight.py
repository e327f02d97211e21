"""Pre-flight (SPEC §7): the per-turn payload check against the cap in force, on real bytes."""

from __future__ import annotations

from dataclasses import dataclass

from ctxrecover.errors import ConfigError
from ctxrecover.events import Notice
from ctxrecover.policy import Policy
from ctxrecover.recovery.cap_state import PayloadCapState
from ctxrecover.recovery.notices import (
    PREFLIGHT_CODE,
    PREFLIGHT_NOTICE,
    UNCAPPED_HISTORY_CODE,
    UNCAPPED_HISTORY_NOTICE,
)
from ctxrecover.sizes import format_payload_size

__all__ = ["PreflightResult", "preflight"]


@dataclass(frozen=True, slots=True)
class PreflightResult:
    """``budget_ratio_override`` (0.40) when the history is near the cap; the notice to show, if any."""

    budget_ratio_override: float | None = None
    notice: Notice | None = None


def preflight(history_bytes: int, cap_state: PayloadCapState, policy: Policy) -> PreflightResult:
    """The per-turn payload check (SPEC §7), on real history bytes.

    With a cap in force (configured or learned): history over
    ``policy.preflight_cap_fraction`` (85%) of it → force
    ``policy.preflight_budget_ratio`` (0.40) and say so. Without a cap: history
    over ``policy.uncapped_warning_bytes`` (2.5 MB) → one warning per session
    (sets ``cap_state.uncapped_warning_sent``).
    """
    if history_bytes < 0:
        raise ConfigError(f"preflight needs history_bytes >= 0 (got {history_bytes})")
    cap = cap_state.effective_cap
    if cap:
        if history_bytes <= policy.preflight_cap_fraction * cap:
            return PreflightResult()
        message = PREFLIGHT_NOTICE % (
            format_payload_size(history_bytes),
            history_bytes * 100 // cap,
            format_payload_size(cap),
        )
        return PreflightResult(policy.preflight_budget_ratio, Notice(PREFLIGHT_CODE, message))
    if history_bytes <= policy.uncapped_warning_bytes or cap_state.uncapped_warning_sent:
        return PreflightResult()
    cap_state.uncapped_warning_sent = True
    message = UNCAPPED_HISTORY_NOTICE % format_payload_size(history_bytes)
    return PreflightResult(notice=Notice(UNCAPPED_HISTORY_CODE, message))
