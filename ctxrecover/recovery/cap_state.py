"""What one session learned about its gateway's body cap (SPEC §6 step 1).

Session state, never a module global and never ``os.environ``: two sessions in
one process never see each other's cap.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctxrecover.classify import Failure
from ctxrecover.errors import ConfigError
from ctxrecover.events import Notice
from ctxrecover.policy import Policy
from ctxrecover.recovery.notices import (
    ASSUMED_CAP_CODE,
    ASSUMED_CAP_NOTICE,
    LEARNED_CAP_CODE,
    LEARNED_CAP_NOTICE,
    size_text,
)
from ctxrecover.sizes import format_payload_size

__all__ = ["PayloadCapState"]


@dataclass(slots=True)
class PayloadCapState:
    """What one session knows about its gateway's body cap; mutable, one per session.

    ``configured_cap`` is the user's cap (``policy.payload_cap``, 0 = none);
    ``learned_cap`` is what rejections taught this session. ``notice_sent`` is
    the once-per-session flag of the payload notice message, and
    ``uncapped_warning_sent`` that of the pre-flight "behind a proxy?" warning.

    >>> state = PayloadCapState()
    >>> failure = Failure(FailureKind.PAYLOAD_TOO_LARGE, rejected_bytes=129_434)
    >>> state.learn(failure, policy=Policy())[0].code
    'learned_cap'
    >>> state.effective_cap
    97075
    """

    configured_cap: int = 0
    learned_cap: int | None = None
    notice_sent: bool = False
    uncapped_warning_sent: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.configured_cap, bool) or not isinstance(self.configured_cap, int):
            raise ConfigError(
                f"PayloadCapState.configured_cap must be an int of bytes (got {self.configured_cap!r})"
            )
        if self.configured_cap < 0:
            raise ConfigError(
                "PayloadCapState.configured_cap must be >= 0 bytes, 0 meaning no cap "
                f"(got {self.configured_cap})"
            )

    @classmethod
    def from_policy(cls, policy: Policy) -> PayloadCapState:
        """A fresh state whose configured cap is ``policy.payload_cap``."""
        return cls(configured_cap=policy.payload_cap)

    @property
    def effective_cap(self) -> int:
        """The tighter of the configured and learned caps, in bytes; 0 when neither is set."""
        caps = [c for c in (self.configured_cap, self.learned_cap) if c]
        return min(caps) if caps else 0

    def observe_accepted(self, request_bytes: int) -> None:
        """A request of ``request_bytes`` went through. The ¾ rule ignores it;
        other cap-learning strategies (e.g. bisection) override this."""

    def learn(self, failure: Failure, *, policy: Policy) -> list[Notice]:
        """Learn from a payload failure; return the notices to show (none for other kinds).

        Rejected size known: ``learned = rejected × policy.learned_cap_factor``
        (¾), adopted only when no cap is in force or it is tighter than the cap
        in force — caps only tighten. When the cap in force (configured or
        learned) is already at or below it, nothing changes and nothing is said:
        the tighter cap keeps ruling the budget. Size unknown and no cap:
        ``policy.assumed_payload_cap`` (4 MB) is assumed, which happens at most
        once since a cap is in force afterwards.
        """
        if not failure.is_payload:
            return []
        current = self.effective_cap
        rejected = failure.rejected_bytes
        if rejected:
            learned = int(rejected * policy.learned_cap_factor)
            if learned < 1 or (current and learned >= current):
                return []
            self.learned_cap = learned
            message = LEARNED_CAP_NOTICE % (format_payload_size(rejected), format_payload_size(learned))
            return [Notice(LEARNED_CAP_CODE, message)]
        if current:
            return []
        self.learned_cap = policy.assumed_payload_cap
        return [Notice(ASSUMED_CAP_CODE, ASSUMED_CAP_NOTICE % size_text(policy.assumed_payload_cap))]
