"""The gateway model (SPEC §11): what one session has observed of its gateway, and what follows from it.

Evidence, not ratchets. The model keeps the largest request the gateway accepted
and, per failure signature (kind, status, page fingerprint), the smallest request
it rejected; every decision reads it:

- a rejection larger than every accepted request is **size-consistent**: it bounds
  the body cap from above, and the cap strategy (``Policy.cap_strategy``) picks the
  learned cap inside the interval ``[largest accepted, smallest rejected)`` — at once
  for a 413-family answer, after an experiment for a block page (SPEC §12: it may be
  content or policy; :meth:`GatewayModel.size_rejected` records the size reading);
- a rejection at or below an accepted size is a **content/policy block**: no cap,
  no compaction;
- an HTTP 431 is a **header fault**: no body cap at all;
- a dropped connection, an upload timeout, or a 502/503/504 that is not the
  provider's JSON is **ambiguous**: the first one earns a plain retry, a repeat at
  or above its size (or any with a history of 500 000 chars or more) is size evidence.

The model is a frozen value: each observation returns its successor, so a session —
or a replay recording it — can keep, compare and persist every state
(:meth:`GatewayModel.to_dict`).

>>> from ctxrecover.classify import FailureKind
>>> model = GatewayModel().accepted(90_000, policy=Policy())
>>> too_large = Failure(FailureKind.PAYLOAD_TOO_LARGE, status=413)
>>> judged = model.judge(too_large, request_bytes=130_000, policy=Policy())
>>> judged.verdict, judged.model.learned_cap          # max(90 000, ¾ × 130 000)
(<Verdict.SIZE_LIMIT: 'size_limit'>, 97500)
>>> waf = Failure(FailureKind.WAF_REJECTION, status=403)
>>> model.judge(waf, request_bytes=130_000, policy=Policy()).verdict   # size, content or policy?
<Verdict.BLOCK: 'block'>
>>> model.judge(waf, request_bytes=80_000, policy=Policy()).verdict
<Verdict.CONTENT_BLOCK: 'content_block'>
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ctxrecover.classify import Failure, FailureKind
from ctxrecover.errors import ConfigError
from ctxrecover.events import Notice
from ctxrecover.policy import CAP_STRATEGIES, Policy
from ctxrecover.recovery.notices import (
    ASSUMED_CAP_CODE,
    ASSUMED_CAP_NOTICE,
    CAP_LIFTED_NOTICE,
    LEARNED_CAP_CODE,
    LEARNED_CAP_NOTICE,
    SUSPECTED_REPEAT_REASON,
    size_text,
)
from ctxrecover.recovery.signals import failure_signature, is_ambiguous, is_header_fault
from ctxrecover.sizes import format_payload_size

__all__ = ["CAP_TARGETS", "GatewayModel", "Judgement", "RefusedBody", "Rejection", "Verdict", "cap_notice"]

#: Refused bodies remembered (newest kept): enough for every attempt of several recent turns.
REFUSED_MEMORY = 32
COUNT_FIELDS = (
    "configured_cap",
    "largest_accepted",
    "accepted_requests",
    "content_blocks",
    "policy_blocks",
    "header_faults",
)
DEFINITIVE_KINDS = frozenset({FailureKind.PAYLOAD_TOO_LARGE, FailureKind.WAF_REJECTION})


class Verdict(StrEnum):
    """What a rejected request means for the body cap."""

    SIZE_LIMIT = "size_limit"  # size-consistent evidence: compact under the learned cap
    BLOCK = "block"  # a block page above every accepted size: size, content or policy — an experiment decides
    CONTENT_BLOCK = "content_block"  # refused at or below an accepted size: not a size problem
    HEADER_FAULT = "header_fault"  # HTTP 431: the headers, not the body
    RETRY = "retry"  # ambiguous, not (yet) correlated with size: one plain retry
    UNRELATED = "unrelated"  # not a gateway body fault (overflow, auth, rate limit, …)


@dataclass(frozen=True, slots=True)
class Rejection:
    """Evidence of one failure signature: the smallest request size it rejected, and how often."""

    signature: str
    smallest_bytes: int
    count: int = 1


@dataclass(frozen=True, slots=True)
class RefusedBody:
    """A refused request body: its :func:`~ctxrecover.recovery.signals.body_key`, size and verdict."""

    key: str
    size: int
    verdict: str


@dataclass(frozen=True, slots=True)
class Judgement:
    """The successor model, the verdict, the failure as the evidence reads it, and its signature.

    ``failure`` differs from the classified one only when the evidence reinterprets an
    ambiguous network failure as a suspected payload limit.
    """

    model: GatewayModel
    verdict: Verdict
    failure: Failure
    signature: str = ""


# -- cap strategies -------------------------------------------------------------------------------------


def _three_quarters(accepted: int, rejected: int, policy: Policy) -> int:
    return max(accepted, int(rejected * policy.learned_cap_factor))


def _bisection(accepted: int, rejected: int, policy: Policy) -> int:
    if rejected - accepted <= policy.bisection_tolerance * rejected:
        return accepted
    return (accepted + rejected) // 2


#: Policy.cap_strategy → target(largest accepted, smallest rejected, policy); None learns no cap.
CAP_TARGETS: Mapping[str, Callable[[int, int, Policy], int] | None] = {
    "three_quarters": _three_quarters,
    "bisection": _bisection,
    "none": None,
}


# -- the model ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GatewayModel:
    """What one session knows about its gateway; a frozen value, updated by returning successors.

    ``largest_accepted`` and ``rejections`` (size-consistent, one per signature) are the
    evidence; ``suspects`` are ambiguous failures seen once, not yet size evidence.
    ``learned_cap`` is the strategy's target inside the evidence's interval
    (``assumed_cap`` when it is the 4 MB guess of SPEC §6.1 for a rejection of unknown
    size). ``refused`` remembers the newest refused bodies (by ``body_key``), so none is
    sent again; ``withheld`` the archive keys of content withheld because this gateway refused
    it (SPEC §12: never resent through it). ``payload_notice_sent`` / ``uncapped_warning_sent``
    are the once-per-session flags of the payload notice message (§6.6) and the pre-flight warning (§7).
    ``resolution`` (``Policy.retry_min_reduction``) is how finely the model resolves the
    gateway's limit: a body less than that share below a size-consistent rejection (and
    above every accepted size) counts as failing too — sending it would spend a request
    to learn almost nothing.
    """

    configured_cap: int = 0
    strategy: str = "three_quarters"
    resolution: float = 0.005
    largest_accepted: int = 0
    rejections: tuple[Rejection, ...] = ()
    suspects: tuple[Rejection, ...] = ()
    learned_cap: int | None = None
    assumed_cap: bool = False
    refused: tuple[RefusedBody, ...] = ()
    accepted_requests: int = 0
    content_blocks: int = 0
    policy_blocks: int = 0
    header_faults: int = 0
    withheld: tuple[str, ...] = ()
    block_readings: tuple[tuple[str, str], ...] = ()
    payload_notice_sent: bool = False
    uncapped_warning_sent: bool = False

    def __post_init__(self) -> None:
        for name in COUNT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"GatewayModel.{name} must be an int >= 0 (got {value!r})")
        if self.strategy not in CAP_STRATEGIES:
            raise ConfigError(
                f"GatewayModel.strategy must be one of {', '.join(map(repr, CAP_STRATEGIES))} "
                f"(got {self.strategy!r})"
            )
        if (
            isinstance(self.resolution, bool)
            or not isinstance(self.resolution, int | float)
            or not (0 <= self.resolution < 1)
        ):
            raise ConfigError(
                f"GatewayModel.resolution must be a fraction in [0, 1) (got {self.resolution!r})"
            )
        learned = self.learned_cap
        if learned is not None and (isinstance(learned, bool) or not isinstance(learned, int) or learned < 1):
            raise ConfigError(f"GatewayModel.learned_cap must be a positive int or None (got {learned!r})")

    @classmethod
    def from_policy(cls, policy: Policy) -> GatewayModel:
        """A model with no evidence yet: the policy's configured cap, cap strategy and resolution."""
        return cls(
            configured_cap=policy.payload_cap,
            strategy=policy.cap_strategy,
            resolution=policy.retry_min_reduction,
        )

    def replace(self, **changes: Any) -> GatewayModel:
        """A copy with ``changes`` (validated)."""
        return dataclasses.replace(self, **changes)

    # -- what the evidence says -------------------------------------------------------------------
    @property
    def smallest_rejected(self) -> int | None:
        """The smallest size-consistent rejection over every signature, or None."""
        return min((r.smallest_bytes for r in self.rejections), default=None)

    @property
    def hard_limit(self) -> int | None:
        """Bodies at or above this size are known to fail and are never sent (None: no such size).

        The smallest size-consistent rejection lowered by the model's ``resolution``, never
        to or below the largest accepted size; None under the ``none`` strategy, which
        learns nothing from rejections.
        """
        rejected = self.smallest_rejected
        if self.strategy == "none" or rejected is None:
            return None
        within = math.ceil(rejected * (1 - self.resolution))
        return max(self.largest_accepted + 1, min(rejected, within))

    def known_too_large(self, size: int) -> bool:
        """True when a body of ``size`` bytes is known to fail: at or above the :attr:`hard_limit`."""
        limit = self.hard_limit
        return limit is not None and size >= limit

    @property
    def effective_cap(self) -> int:
        """The cap in force, in bytes: the tighter of the configured and learned caps; 0 = none."""
        caps = [c for c in (self.configured_cap, self.learned_cap) if c]
        return min(caps) if caps else 0

    @property
    def cap_source(self) -> str | None:
        """``"configured"`` or ``"learned"``: where the cap in force comes from (None without one)."""
        cap = self.effective_cap
        if not cap:
            return None
        return "configured" if cap == self.configured_cap else "learned"

    def refusal(self, size: int, key: Callable[[], str]) -> RefusedBody | None:
        """The refused body a request of ``size`` bytes repeats, if any.

        ``key`` computes the request's :func:`body_key`; it is called only when a refused
        body has the same size (normalising recall keys never changes a body's length).
        """
        same_size = [r for r in self.refused if r.size == size]
        if not same_size:
            return None
        wanted = key()
        return next((r for r in same_size if r.key == wanted), None)

    # -- observations -----------------------------------------------------------------------------
    def accepted(self, request_bytes: int, *, policy: Policy) -> GatewayModel:
        """The gateway accepted a request of ``request_bytes``.

        Raises the largest accepted size; drops the evidence it contradicts (a rejection
        or a suspect at or below this size was not about size); the learned cap follows.
        """
        if request_bytes <= 0:
            return self
        assumed = self.assumed_cap and (self.learned_cap or 0) > request_bytes
        model = dataclasses.replace(
            self,
            largest_accepted=max(self.largest_accepted, request_bytes),
            rejections=tuple(r for r in self.rejections if r.smallest_bytes > request_bytes),
            suspects=tuple(s for s in self.suspects if s.smallest_bytes > request_bytes),
            accepted_requests=self.accepted_requests + 1,
            assumed_cap=assumed,
            learned_cap=self.learned_cap if assumed or not self.assumed_cap else None,
        )
        return model._retarget(policy)

    def judge(
        self,
        failure: Failure,
        *,
        request_bytes: int | None,
        policy: Policy,
        body: str | None = None,
    ) -> Judgement:
        """What a rejected request of ``request_bytes`` means, and the model that follows.

        ``body`` is the gateway's answer (for the page fingerprint and to tell a
        provider's JSON from a gateway page). A dropped connection that classification
        already read as a suspected payload limit (a large history, SPEC §2.4, at the
        policy's threshold) is size evidence at once; any other is size evidence only when
        it repeats at or above a size at which it happened before (SPEC §11).
        """
        if is_header_fault(failure):
            model = dataclasses.replace(self, header_faults=self.header_faults + 1)
            return Judgement(model, Verdict.HEADER_FAULT, failure, failure_signature(failure, body))
        definitive = failure.kind in DEFINITIVE_KINDS
        if not definitive and not is_ambiguous(failure, body):
            return Judgement(self, Verdict.UNRELATED, failure)
        signature = failure_signature(failure, body)
        size = request_bytes or failure.rejected_bytes
        if not size:
            if not definitive and failure.kind is not FailureKind.SUSPECTED_PAYLOAD:
                return Judgement(self, Verdict.UNRELATED, failure, signature)
            return Judgement(self._assume(policy), Verdict.SIZE_LIMIT, failure, signature)
        if size <= self.largest_accepted:
            if definitive:
                model = dataclasses.replace(self, content_blocks=self.content_blocks + 1)
                return Judgement(model, Verdict.CONTENT_BLOCK, failure, signature)
            return Judgement(self, Verdict.RETRY, failure, signature)  # a drop below an accepted size
        model = self
        if failure.kind is FailureKind.WAF_REJECTION:
            # SPEC §12: a block page above every accepted size may be size, content or policy. The
            # model it would be if it is size is returned; the turn adopts it (size_rejected) only
            # once an experiment confirms the size reading.
            return Judgement(
                self.size_rejected(signature, size, policy=policy), Verdict.BLOCK, failure, signature
            )
        if not definitive:
            suspect = next((s for s in self.suspects if s.signature == signature), None)
            if suspect is not None and suspect.smallest_bytes <= size:  # it repeats at or above a size
                size = suspect.smallest_bytes
                reason_text = SUSPECTED_REPEAT_REASON % format_payload_size(size)
            elif failure.kind is FailureKind.SUSPECTED_PAYLOAD:
                reason_text = failure.reason_text or failure.kind.value
            else:  # the first time at this size: it may be transient
                return Judgement(self._suspect(signature, size), Verdict.RETRY, failure, signature)
            others = tuple(s for s in self.suspects if s.signature != signature)
            model = dataclasses.replace(self, suspects=others)
            failure = dataclasses.replace(
                failure,
                kind=FailureKind.SUSPECTED_PAYLOAD,
                reason="suspected_payload",
                reason_text=reason_text,
                rejected_bytes=request_bytes or failure.rejected_bytes,
            )
        model = dataclasses.replace(model, rejections=_recorded(model.rejections, signature, size))
        return Judgement(model._retarget(policy), Verdict.SIZE_LIMIT, failure, signature)

    def refuse(self, key: str, size: int, verdict: Verdict) -> GatewayModel:
        """Remember a refused body (newest :data:`REFUSED_MEMORY` kept) so it is never sent again."""
        if not key or size <= 0:
            return self
        entry = RefusedBody(key, size, verdict.value)
        kept = tuple(r for r in self.refused if r.key != key)[-(REFUSED_MEMORY - 1) :]
        return dataclasses.replace(self, refused=(*kept, entry))

    def size_rejected(self, signature: str, size: int, *, policy: Policy) -> GatewayModel:
        """A block of ``size`` bytes confirmed a size limit by its experiment (SPEC §12): the
        rejection is recorded and the learned cap follows, as for a 413."""
        model = dataclasses.replace(self, rejections=_recorded(self.rejections, signature, size))
        return model._retarget(policy)

    def reading(self, signature: str) -> str | None:
        """What this gateway's blocks of ``signature`` turned out to be: ``"size"``, ``"content"``,
        ``"policy"`` or None."""
        return next((reading for sig, reading in self.block_readings if sig == signature), None)

    def read_block(self, signature: str, reading: str) -> GatewayModel:
        """Remember what a block of ``signature`` turned out to be (the next one's first experiment)."""
        if self.reading(signature) == reading:
            return self
        kept = tuple((sig, r) for sig, r in self.block_readings if sig != signature)
        return dataclasses.replace(self, block_readings=(*kept, (signature, reading)))

    def withhold(self, keys: Iterable[str]) -> GatewayModel:
        """Content this gateway refused, by archive key: never resent through it (SPEC §12)."""
        fresh = tuple(k for k in dict.fromkeys(keys) if k not in self.withheld)
        return dataclasses.replace(self, withheld=(*self.withheld, *fresh)) if fresh else self

    def retract_to(self, earlier: GatewayModel, *, refusals: bool = False) -> GatewayModel:
        """This model with ``earlier``'s size evidence, learned cap and payload-notice flag.

        For a content block that proves the size "evidence" since ``earlier`` was the same
        rule firing on content; counters, accepted sizes and refused bodies are kept. With
        ``refusals`` (a policy block: the route refused them, not their content) the bodies
        refused since ``earlier`` are forgotten too, so they may be sent once the route is open.
        """
        return dataclasses.replace(
            self,
            refused=earlier.refused if refusals else self.refused,
            rejections=earlier.rejections,
            suspects=earlier.suspects,
            learned_cap=earlier.learned_cap,
            assumed_cap=earlier.assumed_cap,
            payload_notice_sent=earlier.payload_notice_sent,
        )

    # -- internals ----------------------------------------------------------------------------------
    def _suspect(self, signature: str, size: int) -> GatewayModel:
        return dataclasses.replace(self, suspects=_recorded(self.suspects, signature, size))

    def _assume(self, policy: Policy) -> GatewayModel:
        """SPEC §6.1: a payload rejection of unknown size with no cap in force assumes 4 MB."""
        if self.strategy == "none" or self.effective_cap:
            return self
        return dataclasses.replace(self, learned_cap=policy.assumed_payload_cap, assumed_cap=True)

    def _retarget(self, policy: Policy) -> GatewayModel:
        target = CAP_TARGETS[self.strategy]
        rejected = self.smallest_rejected
        if target is None:
            learned = None
        elif rejected is None:
            learned = self.learned_cap if self.assumed_cap else None
        else:
            learned = min(rejected - 1, target(self.largest_accepted, rejected, policy))
            learned = learned if learned >= 1 else None
        assumed = self.assumed_cap and rejected is None and learned is not None
        if learned == self.learned_cap and assumed == self.assumed_cap:
            return self
        return dataclasses.replace(self, learned_cap=learned, assumed_cap=assumed)

    # -- persistence --------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (the session's ``state()["gateway"]``)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GatewayModel:
        """Inverse of :meth:`to_dict`; a bad or unknown field raises :class:`ConfigError` naming it."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"gateway state must be a JSON object, got {type(data).__name__}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - fields)
        if unknown:
            raise ConfigError(f"gateway state has unknown field(s): {', '.join(unknown)}")
        values = dict(data)
        try:
            for name, item in (("rejections", Rejection), ("suspects", Rejection), ("refused", RefusedBody)):
                values[name] = tuple(item(**entry) for entry in values.get(name, ()))
        except TypeError as exc:
            raise ConfigError(f"gateway state field {name!r} is malformed: {exc}") from exc
        try:
            values["block_readings"] = tuple(
                (str(sig), str(r)) for sig, r in values.get("block_readings", ())
            )
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"gateway state field 'block_readings' is malformed: {exc}") from exc
        withheld = values.get("withheld", ())
        if not isinstance(withheld, list | tuple) or not all(isinstance(k, str) for k in withheld):
            raise ConfigError("gateway state field 'withheld' must be a list of archive keys")
        values["withheld"] = tuple(withheld)
        return cls(**values)


def _recorded(entries: tuple[Rejection, ...], signature: str, size: int) -> tuple[Rejection, ...]:
    """``entries`` with ``signature`` seen once more at ``size`` (its smallest size kept)."""
    old = next((r for r in entries if r.signature == signature), None)
    if old is not None:
        size, count = min(size, old.smallest_bytes), old.count + 1
    else:
        count = 1
    entry = Rejection(signature, size, count)
    return (*(r for r in entries if r.signature != signature), entry)


def cap_notice(before: GatewayModel, after: GatewayModel, *, accepted: bool = False) -> Notice | None:
    """The notice for a change of the learned cap, or None when it did not change (SPEC §6.1, §11).

    A learned cap set or moved by a rejection says the §6.1 line with the smallest
    rejection; the 4 MB assumption says its own §6.1 line; a cap that no longer holds is
    said lifted. With ``accepted`` (the change came from an accepted request) a cap that
    merely rose inside its interval is not announced again: the rejection that set it
    was, and requests that grow turn by turn would otherwise repeat it every turn.
    """
    if after.learned_cap == before.learned_cap:
        return None
    if (
        after.learned_cap is not None
        and before.learned_cap is not None
        and (accepted or format_payload_size(after.learned_cap) == format_payload_size(before.learned_cap))
    ):
        return None  # a rise from an accepted request, or a move too small to show: said already
    if after.learned_cap is None:
        return Notice(
            LEARNED_CAP_CODE,
            CAP_LIFTED_NOTICE
            % (format_payload_size(after.largest_accepted), format_payload_size(before.learned_cap or 0)),
        )
    if after.assumed_cap:
        return Notice(ASSUMED_CAP_CODE, ASSUMED_CAP_NOTICE % size_text(after.learned_cap))
    rejected = after.smallest_rejected or 0
    return Notice(
        LEARNED_CAP_CODE,
        LEARNED_CAP_NOTICE % (format_payload_size(rejected), format_payload_size(after.learned_cap)),
    )
