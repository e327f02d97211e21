"""Recovery: the ladder, the payload-cap state, floor diagnosis, pre-flight and output escalation."""

from ctxrecover.recovery.cap_state import PayloadCapState
from ctxrecover.recovery.escalation import OutputEscalation
from ctxrecover.recovery.floor import FloorDiagnosis, diagnose_floor
from ctxrecover.recovery.ladder import (
    ComposedStep,
    Level1,
    Level2,
    Level3,
    RecoveryContext,
    RecoveryLadder,
    RecoveryStep,
    StepBase,
    StepReport,
)
from ctxrecover.recovery.notices import (
    ASSUMED_CAP_CODE,
    ASSUMED_CAP_NOTICE,
    FLOOR_FAIL_CODE,
    FLOOR_FAIL_NOTICE,
    FLOOR_WARNING_CODE,
    FLOOR_WARNING_NOTICE,
    LEARNED_CAP_CODE,
    LEARNED_CAP_NOTICE,
    PAYLOAD_LIMIT_MARKER,
    PAYLOAD_LIMIT_NOTICE,
    PREFLIGHT_CODE,
    PREFLIGHT_NOTICE,
    RECOVERABLE_FAILURE_CODE,
    UNCAPPED_HISTORY_CODE,
    UNCAPPED_HISTORY_NOTICE,
)
from ctxrecover.recovery.preflight import PreflightResult, preflight
from ctxrecover.recovery.recover import MALFORMED_HISTORY_ATTEMPTS, RecoveryResult, recover, repair_malformed

__all__ = [
    "ASSUMED_CAP_CODE",
    "ASSUMED_CAP_NOTICE",
    "ComposedStep",
    "FLOOR_FAIL_CODE",
    "FLOOR_FAIL_NOTICE",
    "FLOOR_WARNING_CODE",
    "FLOOR_WARNING_NOTICE",
    "FloorDiagnosis",
    "LEARNED_CAP_CODE",
    "LEARNED_CAP_NOTICE",
    "Level1",
    "Level2",
    "Level3",
    "MALFORMED_HISTORY_ATTEMPTS",
    "OutputEscalation",
    "PAYLOAD_LIMIT_MARKER",
    "PAYLOAD_LIMIT_NOTICE",
    "PREFLIGHT_CODE",
    "PREFLIGHT_NOTICE",
    "PayloadCapState",
    "PreflightResult",
    "RECOVERABLE_FAILURE_CODE",
    "RecoveryContext",
    "RecoveryLadder",
    "RecoveryResult",
    "RecoveryStep",
    "StepBase",
    "StepReport",
    "UNCAPPED_HISTORY_CODE",
    "UNCAPPED_HISTORY_NOTICE",
    "diagnose_floor",
    "preflight",
    "recover",
    "repair_malformed",
]
