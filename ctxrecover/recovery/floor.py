"""Floor diagnosis (SPEC §6 step 2): can compaction still get a request under the rejected size?"""

from __future__ import annotations

from dataclasses import dataclass

from ctxrecover.errors import ConfigError
from ctxrecover.events import Notice
from ctxrecover.policy import Policy
from ctxrecover.recovery.notices import (
    FLOOR_FAIL_CODE,
    FLOOR_FAIL_NOTICE,
    FLOOR_WARNING_CODE,
    FLOOR_WARNING_NOTICE,
)
from ctxrecover.sizes import format_payload_size

__all__ = ["FloorDiagnosis", "diagnose_floor"]


@dataclass(frozen=True, slots=True)
class FloorDiagnosis:
    """Whether the system prompt alone dooms compaction (``fail_fast``), and what to say."""

    fail_fast: bool = False
    notice: Notice | None = None


def diagnose_floor(
    system_bytes: int, rejected_bytes: int | None, *, policy: Policy, floor_bytes: int | None = None
) -> FloorDiagnosis:
    """Compare the non-compactable base with the rejected request size, real bytes with real bytes.

    ``system_bytes`` is what the leading system messages add to the request
    body (:func:`ctxrecover.wire.system_bytes`); it is the size the notices
    name. ``floor_bytes``, when given, is the smallest request compaction could
    still produce (the most aggressive ladder step applied to the history): a
    gateway that rejected a request no larger than that cannot be satisfied by
    compacting. At or above the rejected size → fail fast (``✖ …``); system
    part at or above ``policy.floor_warning_fraction`` (¾) of it → a warning
    (``⚠ …``); unknown size → nothing to say.
    """
    if system_bytes < 0:
        raise ConfigError(f"diagnose_floor needs system_bytes >= 0 (got {system_bytes})")
    if not rejected_bytes or rejected_bytes <= 0:
        return FloorDiagnosis()
    system_text = format_payload_size(system_bytes)
    if max(system_bytes, floor_bytes or 0) >= rejected_bytes:
        message = FLOOR_FAIL_NOTICE % (system_text, format_payload_size(rejected_bytes))
        return FloorDiagnosis(fail_fast=True, notice=Notice(FLOOR_FAIL_CODE, message))
    if system_bytes >= policy.floor_warning_fraction * rejected_bytes:
        return FloorDiagnosis(notice=Notice(FLOOR_WARNING_CODE, FLOOR_WARNING_NOTICE % system_text))
    return FloorDiagnosis()
