"""What an exchange ended in, as data: :class:`FailureKind` and the classified :class:`Failure`.

The ground floor of the library: classification produces these values, errors carry them,
recovery reads them; this module imports nothing of ctxrecover.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "EXPERIMENT_KINDS",
    "PAYLOAD_KINDS",
    "RECOVERABLE_FAILURE_NOTICE",
    "RECOVERABLE_KINDS",
    "Failure",
    "FailureKind",
]

#: SPEC §2.5: the retry notice of a failure compaction recovers.
RECOVERABLE_FAILURE_NOTICE = "⚠ Recoverable failure (%s) — compacting and retrying"


class FailureKind(StrEnum):
    """What an exchange ended in; ``ok`` is a successful, untruncated response."""

    CONTEXT_OVERFLOW = "context_overflow"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    WAF_REJECTION = "waf_rejection"
    SUSPECTED_PAYLOAD = "suspected_payload"
    MALFORMED_HISTORY = "malformed_history"
    OUTPUT_TRUNCATED = "output_truncated"
    OUTPUT_LIMIT = "output_limit"  # a parameter over the model's limit (max_tokens): lower it, never compact
    POLICY_BLOCK = "policy_block"  # the gateway refuses this route or client, whatever is sent (SPEC §12)
    CONTENT_REFUSED = "content_refused"  # the provider itself refused the content (safety filter, SPEC §12)
    BILLING = "billing"  # out of credits, quota or a spend limit: never compact, never retry
    AUTH = "auth"
    RATE_LIMIT = "rate_limit"
    TRANSIENT_NETWORK = "transient_network"
    OTHER = "other"
    OK = "ok"


RECOVERABLE_KINDS: frozenset[FailureKind] = frozenset(
    {
        FailureKind.CONTEXT_OVERFLOW,
        FailureKind.PAYLOAD_TOO_LARGE,
        FailureKind.WAF_REJECTION,
        FailureKind.SUSPECTED_PAYLOAD,
        FailureKind.MALFORMED_HISTORY,
    }
)
#: Kinds no single answer shows: the turn's experiments decide them (SPEC §12), never classify alone.
EXPERIMENT_KINDS: frozenset[FailureKind] = frozenset({FailureKind.POLICY_BLOCK})
PAYLOAD_KINDS: frozenset[FailureKind] = frozenset(
    {
        FailureKind.PAYLOAD_TOO_LARGE,
        FailureKind.WAF_REJECTION,
        FailureKind.SUSPECTED_PAYLOAD,
    }
)


@dataclass(frozen=True, slots=True)
class Failure:
    """The classified outcome of one exchange.

    ``reason``/``reason_text`` are set for the kinds compaction recovers (§2.5);
    ``evidence`` is the phrase or signal that decided; ``stop_reason`` is the
    provider's stop/finish reason of a successful response;
    ``context_limit_tokens`` is the context window an overflow error states, if any, and
    ``input_tokens`` the refused request's input tokens it states (the provider's count);
    ``output_limit_tokens`` the output cap an ``output_limit`` error states, if any.
    """

    kind: FailureKind
    reason: str | None = None
    reason_text: str | None = None
    provider: str | None = None
    status: int | None = None
    rejected_bytes: int | None = None
    evidence: str = ""
    stop_reason: str | None = None
    context_limit_tokens: int | None = None
    output_limit_tokens: int | None = None
    input_tokens: int | None = None

    @property
    def recoverable(self) -> bool:
        """True when the recovery ladder (§6) applies.

        ``malformed_history`` is recoverable by pairing repair; ``output_truncated``
        is not: it is handled by max-token escalation (§8), never by compaction.
        """
        return self.kind in RECOVERABLE_KINDS

    @property
    def is_payload(self) -> bool:
        """True for proxy/gateway body-size failures (413/431, WAF 403, suspected EOF)."""
        return self.kind in PAYLOAD_KINDS

    @property
    def notice(self) -> str | None:
        """``⚠ Recoverable failure (reason) — compacting and retrying``, or None without a reason."""
        return RECOVERABLE_FAILURE_NOTICE % self.reason_text if self.reason_text else None
