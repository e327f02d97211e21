"""Max-output-token escalation and continuation (SPEC §8).

When a response stops at the output-token limit (``output_truncated``), the
request is retried with ``max_tokens`` doubled — 4096 assumed when unset — up
to the model's output cap, at most ``policy.max_token_escalations`` (2) times per
turn; the partial answer and a continuation request are appended so the model
resumes where it stopped. After that the partial content is returned as is.

**Decision (SPEC §11):** the cap is the catalog's (or the policy's) and, once a
provider rejected a ``max_tokens`` as too large, the value it accepts
(:meth:`OutputEscalation.learn_output_cap`, which also clamps the user's own
setting); an escalation never exceeds the room the window leaves after the input
either (``room=`` of :meth:`OutputEscalation.next_max_tokens`).

>>> esc = OutputEscalation(Policy(), provider_cap=10_000)
>>> esc.next_max_tokens(4096), esc.next_max_tokens(8192), esc.next_max_tokens(10_000)
(8192, 10000, None)
"""

from __future__ import annotations

from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message
from ctxrecover.policy import Policy

__all__ = ["CONTINUATION_TEXT", "ESCALATION_FACTOR", "OutputEscalation"]

CONTINUATION_TEXT = (
    "Your response was cut off at the token limit. Resume DIRECTLY from where you stopped — do not "
    "repeat any content. Continue the implementation or explanation from the exact point of interruption."
)
ESCALATION_FACTOR = 2


class OutputEscalation:
    """Escalation state of one session: the escalated ``max_tokens`` and the escalation counts.

    ``escalations`` counts this turn's escalations (reset by :meth:`start_turn`),
    ``total_escalations`` the session's. An escalation that cannot grow — the
    current value is already at the cap — returns ``None`` without consuming an
    attempt. The escalated value outlives the turn until the user changes
    their own ``max_tokens`` (:meth:`observe_user_override`).
    """

    __slots__ = (
        "_escalated",
        "_observed",
        "_user_value",
        "escalations",
        "learned_cap",
        "policy",
        "provider_cap",
        "total_escalations",
    )

    def __init__(self, policy: Policy, *, provider_cap: int | None = None) -> None:
        cap = policy.max_output_tokens_cap if provider_cap is None else provider_cap
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise ConfigError(
                f"OutputEscalation(provider_cap=...) must be a positive number of tokens, e.g. 128000, "
                f"or None for policy.max_output_tokens_cap (got {provider_cap!r})"
            )
        self.policy = policy
        self.provider_cap = cap
        self.learned_cap: int | None = None
        self.escalations = 0
        self.total_escalations = 0
        self._escalated: int | None = None
        self._user_value: int | None = None
        self._observed = False

    def __repr__(self) -> str:
        return (
            f"OutputEscalation(provider_cap={self.provider_cap}, learned_cap={self.learned_cap}, "
            f"escalations={self.escalations}, "
            f"total_escalations={self.total_escalations}, max_tokens={self.max_tokens})"
        )

    @property
    def cap(self) -> int:
        """The output cap in force: the provider's, or the smaller value a provider's 400 taught."""
        return min(self.provider_cap, self.learned_cap) if self.learned_cap else self.provider_cap

    @property
    def max_tokens(self) -> int | None:
        """The ``max_tokens`` to send: the escalated value, else the user's (None = provider default),
        never above a learned output cap."""
        value = self._escalated if self._escalated is not None else self._user_value
        if value is not None and self.learned_cap is not None:
            return min(value, self.learned_cap)
        return value

    def learn_output_cap(self, tokens: int) -> None:
        """A provider rejected a larger ``max_tokens``: never send more than ``tokens`` again."""
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise ConfigError(f"learn_output_cap needs a positive number of tokens (got {tokens!r})")
        self.learned_cap = min(tokens, self.learned_cap or tokens)

    @property
    def exhausted(self) -> bool:
        """True when this turn has used all ``policy.max_token_escalations``."""
        return self.escalations >= self.policy.max_token_escalations

    def start_turn(self) -> None:
        """A new turn: its escalation count starts at 0 (the escalated value is kept)."""
        self.escalations = 0

    def next_max_tokens(self, current: int | None, *, room: int | None = None) -> int | None:
        """The doubled ``max_tokens`` after a truncated answer, or None to stop escalating.

        ``current`` is the value the truncated request used (None = unset, taken
        as ``policy.default_max_tokens``, 4096). The result is clamped to the
        output :attr:`cap` and to ``room`` (the context window minus the input
        tokens, when known). None when this turn's escalations are spent, or when
        the value cannot grow — which consumes no attempt.
        """
        if self.exhausted:
            return None
        base = self.policy.default_max_tokens if current is None else current
        if isinstance(base, bool) or not isinstance(base, int) or base < 1:
            raise ConfigError(f"next_max_tokens needs a positive max_tokens or None (got {current!r})")
        target = min(base * ESCALATION_FACTOR, self.cap)
        if room is not None:
            target = min(target, room)
        if target <= base:
            return None
        self.escalations += 1
        self.total_escalations += 1
        self._escalated = target
        return target

    def observe_user_override(self, value: int | None) -> int | None:
        """Record the user's own ``max_tokens`` setting; return the ``max_tokens`` to send.

        Call it before each request with the user's current setting (None =
        unset). A setting that changed since the last call wins over an
        escalation (the escalated value is dropped); an unchanged one keeps the
        escalated value. The first call only records the setting.
        """
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"max_tokens must be a positive int or None (got {value!r})")
        if self._observed and value != self._user_value:
            self._escalated = None
        self._user_value = value
        self._observed = True
        return self.max_tokens

    @staticmethod
    def continuation(history: list[Message], partial: Message) -> list[Message]:
        """``history`` + the partial answer + the continuation request (a new list).

        The tool calls of a cut-off answer are incomplete (their arguments were
        cut), so they are left out — the model re-issues them whole when it
        resumes; an answer with no text left adds only the continuation request.
        The input is never mutated.
        """
        if partial.role != "assistant":
            raise ConfigError(
                f"continuation needs the partial answer as an assistant message (got role {partial.role!r})"
            )
        added: list[Message] = []
        text_only = partial.replace(tool_calls=()) if partial.tool_calls else partial
        if text_only.content:
            added.append(text_only)
        added.append(Message.user(CONTINUATION_TEXT))
        return [*history, *added]
