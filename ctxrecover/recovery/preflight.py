"""Pre-flight (SPEC §7, §11): the per-turn payload check against the cap in force, on real bytes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ctxrecover.errors import ConfigError
from ctxrecover.events import Notice
from ctxrecover.policy import Policy
from ctxrecover.recovery.gateway import GatewayModel
from ctxrecover.recovery.notices import (
    PREFLIGHT_CODE,
    PREFLIGHT_LEARNED_NOTICE,
    PREFLIGHT_NOTICE,
    UNCAPPED_HISTORY_CODE,
    UNCAPPED_HISTORY_NOTICE,
)
from ctxrecover.sizes import format_payload_size

__all__ = ["PreflightResult", "preflight", "preflight_threshold"]


@dataclass(frozen=True, slots=True)
class PreflightResult:
    """``budget_ratio_override`` (0.40) when the history is near the cap; the notice to show, if
    any; ``gateway``, the model after the check (it records the once-per-session warning)."""

    gateway: GatewayModel
    budget_ratio_override: float | None = None
    notice: Notice | None = None


def preflight_threshold(cap: int, base_bytes: int, policy: Policy) -> float:
    """The request size above which pre-flight compacts: ``base + 85% × (cap − base)``.

    **Decision (SPEC §11):** the 85% of §7 applies to the room compaction can act on —
    the cap minus the non-compactable base (system prompt, tool definitions) —
    so a base near the cap does not force compaction on every turn; with no base
    it is §7's 85% of the cap.
    """
    return base_bytes + policy.preflight_cap_fraction * max(0, cap - base_bytes)


def preflight(
    history_bytes: int, gateway: GatewayModel, policy: Policy, *, base_bytes: int = 0
) -> PreflightResult:
    """The per-turn payload check (SPEC §7), on real request bytes.

    With a cap in force (configured or learned): a request over
    :func:`preflight_threshold` forces ``policy.preflight_budget_ratio`` (0.40)
    and says so — "of configured cap" or "of learned cap", truthfully. Without a
    cap: a request over ``policy.uncapped_warning_bytes`` (2.5 MB) → one warning
    per session (recorded in the returned ``gateway``).
    """
    if history_bytes < 0 or base_bytes < 0:
        raise ConfigError(
            f"preflight needs history_bytes and base_bytes >= 0 (got {history_bytes}, {base_bytes})"
        )
    cap = gateway.effective_cap
    if cap:
        if history_bytes <= preflight_threshold(cap, base_bytes, policy):
            return PreflightResult(gateway)
        template = PREFLIGHT_NOTICE if gateway.cap_source == "configured" else PREFLIGHT_LEARNED_NOTICE
        message = template % (
            format_payload_size(history_bytes),
            history_bytes * 100 // cap,
            format_payload_size(cap),
        )
        return PreflightResult(gateway, policy.preflight_budget_ratio, Notice(PREFLIGHT_CODE, message))
    if history_bytes <= policy.uncapped_warning_bytes or gateway.uncapped_warning_sent:
        return PreflightResult(gateway)
    message = UNCAPPED_HISTORY_NOTICE % format_payload_size(history_bytes)
    warned = dataclasses.replace(gateway, uncapped_warning_sent=True)
    return PreflightResult(warned, notice=Notice(UNCAPPED_HISTORY_CODE, message))
