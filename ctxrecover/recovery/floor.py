"""Floor diagnosis (SPEC §6 step 2, §11): can compaction still get a request under the rejected size?

Real bytes against real bytes, and the message names what is over: the system
prompt (SPEC §6.2's ``✖`` text), the system prompt with the tool definitions, or —
when compaction did all it could — the smallest request it produced, with its parts.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctxrecover.errors import ConfigError
from ctxrecover.events import Notice
from ctxrecover.policy import Policy
from ctxrecover.recovery.notices import (
    FLOOR_FAIL_CODE,
    FLOOR_FAIL_NOTICE,
    FLOOR_NEAR_FAIL_NOTICE,
    FLOOR_SMALLEST_FAIL_NOTICE,
    FLOOR_TOOLS_FAIL_NOTICE,
    FLOOR_WARNING_CODE,
    FLOOR_WARNING_NOTICE,
)
from ctxrecover.sizes import format_payload_size

__all__ = ["FloorDiagnosis", "diagnose_floor", "smallest_request_diagnosis"]

SYSTEM_PROMPT = "system_prompt"
TOOL_DEFINITIONS = "tool_definitions"
SMALLEST_REQUEST = "smallest_request"


@dataclass(frozen=True, slots=True)
class FloorDiagnosis:
    """Whether compaction is doomed (``fail_fast``), what is over (``over``, ``over_bytes``), what to say."""

    fail_fast: bool = False
    notice: Notice | None = None
    over: str | None = None
    over_bytes: int = 0


def _check(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"floor diagnosis needs {name} >= 0 bytes (got {value!r})")


def diagnose_floor(
    system_bytes: int, rejected_bytes: int | None, *, policy: Policy, tools_bytes: int = 0
) -> FloorDiagnosis:
    """Compare the non-compactable base with the smallest rejected size.

    ``system_bytes`` is a request carrying only the leading system messages;
    ``tools_bytes`` what the tool definitions add to it. System prompt at or over
    the rejected size → fail fast with SPEC §6.2's ``✖`` text; system prompt and
    tool definitions together → fail fast naming both; system prompt at or above
    ``policy.floor_warning_fraction`` (¾) of it → the ``⚠`` warning; unknown size →
    nothing to say.
    """
    _check("system_bytes", system_bytes)
    _check("tools_bytes", tools_bytes)
    if not rejected_bytes or rejected_bytes <= 0:
        return FloorDiagnosis()
    system_text, rejected_text = format_payload_size(system_bytes), format_payload_size(rejected_bytes)
    if system_bytes >= rejected_bytes:
        message = FLOOR_FAIL_NOTICE % (system_text, rejected_text)
        return FloorDiagnosis(True, Notice(FLOOR_FAIL_CODE, message), SYSTEM_PROMPT, system_bytes)
    if system_bytes + tools_bytes >= rejected_bytes:
        message = FLOOR_TOOLS_FAIL_NOTICE % (system_text, format_payload_size(tools_bytes), rejected_text)
        base = system_bytes + tools_bytes
        return FloorDiagnosis(True, Notice(FLOOR_FAIL_CODE, message), TOOL_DEFINITIONS, base)
    if system_bytes >= policy.floor_warning_fraction * rejected_bytes:
        return FloorDiagnosis(notice=Notice(FLOOR_WARNING_CODE, FLOOR_WARNING_NOTICE % system_text))
    return FloorDiagnosis()


def smallest_request_diagnosis(
    request_bytes: int, rejected_bytes: int, *, system_bytes: int, tools_bytes: int, resolution: float = 0.0
) -> FloorDiagnosis:
    """Compaction did all it could and its smallest request (``request_bytes``) is still at or over
    ``rejected_bytes`` — or below it by less than ``resolution`` of it: fail fast naming that
    request and its parts (system prompt, tool definitions, the newest messages it kept)."""
    for name, value in (("request_bytes", request_bytes), ("system_bytes", system_bytes)):
        _check(name, value)
    _check("tools_bytes", tools_bytes)
    messages = max(0, request_bytes - system_bytes - tools_bytes)
    parts = (
        format_payload_size(request_bytes),
        format_payload_size(system_bytes),
        format_payload_size(tools_bytes),
        format_payload_size(messages),
    )
    if request_bytes >= rejected_bytes:
        message = FLOOR_SMALLEST_FAIL_NOTICE % (*parts, format_payload_size(rejected_bytes))
    else:
        share = f"{resolution * 100:.2g}%"
        message = FLOOR_NEAR_FAIL_NOTICE % (*parts, share, format_payload_size(rejected_bytes))
    return FloorDiagnosis(True, Notice(FLOOR_FAIL_CODE, message), SMALLEST_REQUEST, request_bytes)
