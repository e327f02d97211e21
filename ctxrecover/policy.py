"""Every knob of ctxrecover in one frozen value (SPEC §10).

A :class:`Policy` is immutable: derive variants with :meth:`Policy.replace`
(for sweeps) and read the documented ``CHATCLI_*`` variables with
:meth:`Policy.from_env`. A bad environment value never crashes: it keeps the
default, emits a :class:`ConfigWarning` and is listed in ``env_problems`` so a
session can report it once.

>>> p = Policy.from_env({"CHATCLI_EMERGENCY_KEEP_MESSAGES": "12"})
>>> p.emergency_keep_messages, DEFAULT_POLICY.emergency_keep_messages
(12, 10)
>>> p.replace(keep_recent=4).keep_recent
4
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from ctxrecover.errors import ConfigError
from ctxrecover.sizes import MIB, parse_payload_size

__all__ = [
    "CAP_STRATEGIES",
    "CHAT_POLICY",
    "DEFAULT_POLICY",
    "ENV_VARIABLES",
    "ORDERED_FIELDS",
    "SUMMARY_SCOPES",
    "ConfigWarning",
    "Policy",
]

# Environment variable → Policy field (SPEC §10, plus the §3.5 skill knobs).
ENV_VARIABLES: Mapping[str, str] = MappingProxyType(
    {
        "CHATCLI_CONTEXT_WINDOW": "context_window",
        "CHATCLI_MAX_RECOVERY_ATTEMPTS": "max_recovery_attempts",
        "CHATCLI_MAX_TOKEN_ESCALATIONS": "max_token_escalations",
        "CHATCLI_EMERGENCY_KEEP_MESSAGES": "emergency_keep_messages",
        "CHATCLI_MAX_PAYLOAD": "payload_cap",
        "CHATCLI_MICROCOMPACT_TRUNCATE_TURNS": "microcompact_truncate_turns",
        "CHATCLI_MICROCOMPACT_SUMMARIZE_TURNS": "microcompact_summarize_turns",
        "CHATCLI_MICROCOMPACT_HEAD_CHARS": "microcompact_head_chars",
        "CHATCLI_MICROCOMPACT_TAIL_CHARS": "microcompact_tail_chars",
        "CHATCLI_MICROCOMPACT_MIN_CONTENT": "microcompact_min_content",
        "CHATCLI_TOOL_RESULT_BUDGET_CHARS": "tool_result_budget_chars",
        "CHATCLI_TOOL_RESULT_MAX_CHARS": "tool_result_max_chars",
        "CHATCLI_COMPACT_MODEL": "compact_model",
        "CHATCLI_CONTEXT_ENGINE": "context_engine",
        "CHATCLI_SKILL_INJECT_BUDGET": "skill_inject_budget",
        "CHATCLI_SKILL_AGE_TURNS": "skill_age_turns",
        "CHATCLI_MAX_BLOCKED_REQUESTS": "max_blocked_requests",
    }
)

# How the gateway model turns its evidence into a learned payload cap (SPEC §11; recovery/gateway.py):
# ¾ of the smallest size-consistent rejection, never below the largest accepted size (the seed's rule);
# the midpoint of the two (bisection); or no learned cap at all (a baseline for comparisons).
CAP_STRATEGIES: tuple[str, ...] = ("three_quarters", "bisection", "none")

# What a Level-2 summary covers (SPEC §5; summarize/span.py): the whole segment, earlier summaries
# included (the seed's rule); only what came after the earlier summaries; or only the oldest of those
# messages needed to bring the history down to summary_target_ratio of the budget.
SUMMARY_SCOPES: tuple[str, ...] = ("segment", "incremental", "target")

# Fractions that must lie in (0, 1].
RATIO_FIELDS: tuple[str, ...] = (
    "budget_ratio",
    "chat_budget_ratio",
    "preflight_budget_ratio",
    "manual_budget_ratio",
    "payload_cap_headroom",
    "level1_budget_factor",
    "learned_cap_factor",
    "bisection_tolerance",
    "retry_min_reduction",
    "floor_warning_fraction",
    "preflight_cap_fraction",
    "verbatim_budget_fraction",
    "summary_target_ratio",
    "summaries_budget_fraction",
)
POSITIVE_FLOAT_FIELDS: tuple[str, ...] = ("chars_per_token", "summarizer_timeout_s")

# Smallest sensible value of each integer knob (0 disables where that makes sense).
INT_MINIMUMS: Mapping[str, int] = MappingProxyType(
    {
        "keep_recent": 1,
        "chat_keep_recent": 1,
        "payload_cap": 0,
        "max_recovery_attempts": 0,
        "max_blocked_requests": 1,
        "experiment_max_tokens": 1,
        "max_token_escalations": 0,
        "emergency_keep_messages": 2,
        "nuclear_keep_messages": 1,
        "nuclear_message_max_chars": 100,
        "level1_assistant_max_chars": 100,
        "assumed_payload_cap": 1024,
        "uncapped_warning_bytes": 1,
        "suspected_payload_history_chars": 1,
        "microcompact_truncate_turns": 1,
        "microcompact_summarize_turns": 1,
        "microcompact_head_chars": 1,
        "microcompact_tail_chars": 0,
        "microcompact_min_content": 1,
        "tool_result_budget_chars": 1,
        "tool_result_max_chars": 1,
        "tool_result_preview_head": 1,
        "tool_result_preview_tail": 0,
        "tool_result_turn_floor": 1,
        "summarizer_backoff_compactions": 0,
        "summarizer_retries": 0,
        "summary_min_messages": 2,
        "undo_depth": 0,
        "shrink_min_chars": 200,  # shrink_to_budget keeps head + marker + tail
        "default_max_tokens": 1,
        "max_output_tokens_cap": 1,
        "skill_inject_budget": 0,
        "skill_age_turns": 1,
    }
)

# Pairs of fields that must stay ordered (first <= second), with why.
ORDERED_FIELDS: tuple[tuple[str, str, str], ...] = (
    (
        "microcompact_truncate_turns",
        "microcompact_summarize_turns",
        "old tool results are previewed before they are summarized",
    ),
)

# Why a minimum exists, appended to the validation message.
FIELD_HINTS: Mapping[str, str] = MappingProxyType(
    {
        "emergency_keep_messages": "keep at least 2 so the history can still start with a user message "
        "and hold a reply",
        "summary_min_messages": "a summary of fewer than 2 messages saves nothing",
        "assumed_payload_cap": "it is the gateway cap assumed when the rejected size is unknown, "
        "e.g. 4194304 (4 MB)",
    }
)

# What a None/0 default means, for the "keeping the default" warning.
DEFAULT_MEANINGS: Mapping[str, str] = MappingProxyType(
    {
        "context_window": "the window comes from the model catalog",
        "payload_cap": "no payload cap",
        "compact_model": "the conversation's own model summarizes",
        "context_engine": "the built-in summarizer",
    }
)

COMPACT_MODEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*:\S+")
MCP_ENGINE_RE = re.compile(r"mcp:\S+")
POSITIVE_INT_RE = re.compile(r"\+?[0-9]+")
# Longer integers are typos: int() refuses over 4300 digits and float budgets overflow long before.
MAX_ENV_INT_DIGITS = 18

# Fields that are not knobs (excluded from Policy.fields()).
NON_KNOB_FIELDS = frozenset({"env_problems"})


class ConfigWarning(UserWarning):
    """A configuration value (usually an environment variable) was ignored; its default is kept."""


@dataclass(frozen=True, slots=True)
class Policy:
    """Every ctxrecover knob, with the seed defaults; immutable (derive with :meth:`replace`).

    Sizes are chars unless the name says bytes; ratios are fractions in (0, 1].
    ``env_problems`` lists the environment values :meth:`from_env` ignored; it
    takes no part in equality or hashing.
    """

    #: Context window in tokens; overrides the model catalog (CHATCLI_CONTEXT_WINDOW). None = catalog.
    context_window: int | None = None
    #: Chars per token when no calibrated value from provider usage reports exists.
    chars_per_token: float = 4.0
    #: Share of the window the history may use in the agent loop.
    budget_ratio: float = 0.60
    #: Messages kept verbatim at the end by planned compaction in the agent loop.
    keep_recent: int = 8
    #: Budget ratio of the chat loop.
    chat_budget_ratio: float = 0.75
    #: keep_recent of the chat loop.
    chat_keep_recent: int = 10
    #: Budget ratio forced when pre-flight finds the history near the payload cap (SPEC §7).
    preflight_budget_ratio: float = 0.40
    #: Budget ratio of a manual /compact.
    manual_budget_ratio: float = 0.50
    #: Gateway body cap in bytes; 0 = none (CHATCLI_MAX_PAYLOAD, e.g. 5MB).
    payload_cap: int = 0
    #: Share of the payload cap the history may fill (the rest: system prompt, tools, JSON framing).
    payload_cap_headroom: float = 0.7
    #: Recovery attempts per agent run (CHATCLI_MAX_RECOVERY_ATTEMPTS).
    max_recovery_attempts: int = 3
    #: Blocked requests one turn may cost a gateway, the first included (SPEC §12;
    #: CHATCLI_MAX_BLOCKED_REQUESTS): every block is a security event; past it the turn stops.
    max_blocked_requests: int = 6
    #: ``max_tokens`` of an experiment request whose answer is not kept (SPEC §12's probes and tests).
    experiment_max_tokens: int = 16
    #: Max-output-token escalations per turn (CHATCLI_MAX_TOKEN_ESCALATIONS).
    max_token_escalations: int = 2
    #: Non-system messages kept by recovery Level 2 (CHATCLI_EMERGENCY_KEEP_MESSAGES).
    emergency_keep_messages: int = 10
    #: Non-system messages kept by recovery Level 3.
    nuclear_keep_messages: int = 4
    #: Per-message char cap at recovery Level 3.
    nuclear_message_max_chars: int = 4000
    #: Factor applied to the tool-result limits at recovery Level 1 (for one session only).
    level1_budget_factor: float = 0.5
    #: Assistant messages longer than this are cut at recovery Level 1.
    level1_assistant_max_chars: int = 5000
    #: Learned cap = rejected request bytes × this factor (the "three_quarters" cap strategy).
    learned_cap_factor: float = 0.75
    #: How the gateway model learns a payload cap: "three_quarters", "bisection" or "none" (SPEC §11).
    cap_strategy: str = "three_quarters"
    #: Bisection settles on the largest accepted size once its bracket is within this share of the rejection.
    bisection_tolerance: float = 0.02
    #: A body less than this share below a size-consistent rejection (and above every accepted size) is
    #: not sent: a retry that small a step down spends a request to learn almost nothing (SPEC §11).
    retry_min_reduction: float = 0.005
    #: Cap assumed after a payload rejection of unknown size, in bytes.
    assumed_payload_cap: int = 4 * MIB
    #: System prompt at this fraction of the rejected size → floor warning.
    floor_warning_fraction: float = 0.75
    #: History above this fraction of the cap → pre-flight compaction.
    preflight_cap_fraction: float = 0.85
    #: Without a cap, history above this many bytes → one "behind a proxy?" warning per session.
    uncapped_warning_bytes: int = int(2.5 * MIB)
    #: EOF/reset counts as a suspected payload problem only from this history size (chars).
    suspected_payload_history_chars: int = 500_000
    #: Tool results this many assistant turns old are previewed (CHATCLI_MICROCOMPACT_TRUNCATE_TURNS).
    microcompact_truncate_turns: int = 2
    #: Tool results this many assistant turns old are summarized (CHATCLI_MICROCOMPACT_SUMMARIZE_TURNS).
    microcompact_summarize_turns: int = 4
    #: Head chars of a microcompact preview (CHATCLI_MICROCOMPACT_HEAD_CHARS).
    microcompact_head_chars: int = 2000
    #: Tail chars of a microcompact preview (CHATCLI_MICROCOMPACT_TAIL_CHARS).
    microcompact_tail_chars: int = 500
    #: Only results at least this long are microcompacted (CHATCLI_MICROCOMPACT_MIN_CONTENT).
    microcompact_min_content: int = 3000
    #: Tool-result chars allowed per turn (CHATCLI_TOOL_RESULT_BUDGET_CHARS).
    tool_result_budget_chars: int = 200_000
    #: Chars allowed per tool result before it becomes a preview (CHATCLI_TOOL_RESULT_MAX_CHARS).
    tool_result_max_chars: int = 20_000
    #: Head chars of a tool-result preview.
    tool_result_preview_head: int = 4000
    #: Tail chars of a tool-result preview.
    tool_result_preview_tail: int = 1000
    #: Per-result floor when a turn's results are shrunk to the turn budget.
    tool_result_turn_floor: int = 5200
    #: Verbatim messages may take at most this share of the budget.
    verbatim_budget_fraction: float = 0.25
    #: Compactions that skip the summary after one failed to reach the budget.
    summarizer_backoff_compactions: int = 2
    #: Extra summarizer attempts after a rejected answer.
    summarizer_retries: int = 1
    #: Seconds before a summarizer or context engine call is abandoned.
    summarizer_timeout_s: float = 180.0
    #: Fewer messages in the segment than this → no summary.
    summary_min_messages: int = 4
    #: What a summary covers: "segment" (everything between the system floor and the recent messages,
    #: earlier summaries summarized again), "incremental" (earlier summaries kept as they are, only what
    #: came after them) or "target" (incremental, only the oldest messages needed to reach
    #: summary_target_ratio of the budget).
    summary_scope: str = "incremental"
    #: A "target" summary brings the history down to this share of the budget (hysteresis).
    summary_target_ratio: float = 0.75
    #: Earlier summaries kept as they are may take this share of the budget; beyond it they are
    #: summarized again with the new messages.
    summaries_budget_fraction: float = 0.1
    #: Undo snapshots kept per session.
    undo_depth: int = 5
    #: Content shrinking never cuts a message below this many chars.
    shrink_min_chars: int = 400
    #: max_tokens assumed when unset, before escalation.
    default_max_tokens: int = 4096
    #: Escalation never raises max_tokens above this (when the model's own cap is unknown).
    max_output_tokens_cap: int = 128_000
    #: Chars of injected skill blocks per turn (CHATCLI_SKILL_INJECT_BUDGET).
    skill_inject_budget: int = 24_000
    #: Injected blocks older than this many assistant turns are archived (CHATCLI_SKILL_AGE_TURNS).
    skill_age_turns: int = 6
    #: Dedicated summarizer as "provider:model" (CHATCLI_COMPACT_MODEL). None = the conversation's model.
    compact_model: str | None = None
    #: External context engine: "mcp:<server>", "provider", or an http(s) URL (CHATCLI_CONTEXT_ENGINE).
    context_engine: str | None = None
    #: Environment values from_env ignored (each a warning text); not a knob.
    env_problems: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            problem = _field_problem(f.name, value)
            if problem is not None:
                raise ConfigError(problem)
            if f.name in RATIO_FIELDS or f.name in POSITIVE_FLOAT_FIELDS:
                object.__setattr__(self, f.name, float(value))
        for lower, higher, why in ORDERED_FIELDS:
            if getattr(self, lower) > getattr(self, higher):
                raise ConfigError(
                    f"Policy.{lower} ({getattr(self, lower)!r}) must be <= Policy.{higher} "
                    f"({getattr(self, higher)!r}): {why}"
                )

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        """Names of every knob, in declaration order (for sweeps and widgets)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name not in NON_KNOB_FIELDS)

    def replace(self, **changes: Any) -> Policy:
        """A validated copy with ``changes`` applied; the original is untouched.

        An unknown field name raises :class:`ConfigError` listing the valid ones.
        """
        valid = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - valid)
        if unknown:
            raise ConfigError(
                f"Policy has no field {', '.join(map(repr, unknown))}; "
                f"valid fields: {', '.join(self.fields())}"
            )
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, base: Policy | None = None) -> Policy:
        """A policy from ``env`` (default ``os.environ``) over ``base`` (default: the seed defaults).

        Reads exactly the variables of :data:`ENV_VARIABLES`. A value that does
        not parse or would fail validation keeps the base value, emits one
        :class:`ConfigWarning` naming the variable and the value, and is listed
        in ``env_problems``. Never raises for a bad value.
        """
        source = os.environ if env is None else env
        start = cls() if base is None else base
        changes: dict[str, Any] = {}
        problems: list[str] = []
        for variable, name in ENV_VARIABLES.items():
            raw = source.get(variable)
            if raw is None:
                continue
            parsed, problem = _ENV_PARSERS.get(name, _parse_positive_int)(raw)
            if problem is None and parsed is not _UNSET:
                problem = _field_problem(name, parsed)
            if problem is not None:
                message = (
                    f"{variable}={raw!r} ignored ({problem}); keeping the default "
                    f"{_describe_default(name, getattr(start, name))}"
                )
                problems.append(message)
                warnings.warn(message, ConfigWarning, stacklevel=2)
            elif parsed is not _UNSET:
                changes[name] = parsed
        for lower, higher, why in ORDERED_FIELDS:
            low, high = changes.get(lower, getattr(start, lower)), changes.get(higher, getattr(start, higher))
            if low > high:
                message = (
                    f"{_ENV_NAMES[lower]}={low!r} and {_ENV_NAMES[higher]}={high!r} ignored ({lower} must be "
                    f"<= {higher}: {why}); keeping the defaults {getattr(start, lower)!r} and "
                    f"{getattr(start, higher)!r}"
                )
                changes.pop(lower, None)
                changes.pop(higher, None)
                problems.append(message)
                warnings.warn(message, ConfigWarning, stacklevel=2)
        return dataclasses.replace(start, **changes, env_problems=start.env_problems + tuple(problems))


_UNSET = object()  # an env value that means "not set" (e.g. an empty CHATCLI_MAX_PAYLOAD)
_ENV_NAMES: Mapping[str, str] = MappingProxyType({name: variable for variable, name in ENV_VARIABLES.items()})


def _as_float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _field_problem(name: str, value: object) -> str | None:
    """Why ``value`` is not valid for field ``name`` (a message that says how to fix it), or None."""
    hint = FIELD_HINTS.get(name)
    suffix = f": {hint}" if hint else ""
    if name in RATIO_FIELDS:
        number = _as_float(value)
        if number is None or not (0.0 < number <= 1.0):
            return f"Policy.{name} must be a fraction in (0, 1], e.g. 0.5 (got {value!r}){suffix}"
    elif name in POSITIVE_FLOAT_FIELDS:
        number = _as_float(value)
        if number is None or not math.isfinite(number) or number <= 0:
            return f"Policy.{name} must be a positive finite number (got {value!r}){suffix}"
    elif name in INT_MINIMUMS:
        minimum = INT_MINIMUMS[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            return f"Policy.{name} must be an integer >= {minimum} (got {value!r}){suffix}"
    elif name == "context_window":
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            return (
                f"Policy.context_window must be a positive number of tokens, or None to use the "
                f"model catalog (got {value!r})"
            )
    elif name == "cap_strategy":
        if value not in CAP_STRATEGIES:
            choices = ", ".join(map(repr, CAP_STRATEGIES))
            return f"Policy.cap_strategy must be one of {choices} (got {value!r})"
    elif name == "summary_scope":
        if value not in SUMMARY_SCOPES:
            choices = ", ".join(map(repr, SUMMARY_SCOPES))
            return f"Policy.summary_scope must be one of {choices} (got {value!r})"
    elif name == "compact_model":
        if value is not None and (not isinstance(value, str) or not COMPACT_MODEL_RE.fullmatch(value)):
            return (
                f"Policy.compact_model must look like 'provider:model', e.g. 'openai:gpt-4o-mini', "
                f"or be None (got {value!r})"
            )
    elif name == "context_engine":
        if value is not None and not _is_context_engine(value):
            return (
                f"Policy.context_engine must be 'provider', 'mcp:<server>' or an http(s) URL, "
                f"or be None (got {value!r})"
            )
    elif name == "env_problems":
        if not isinstance(value, tuple) or not all(isinstance(p, str) for p in value):
            return f"Policy.env_problems must be a tuple of str (got {value!r})"
    return None


def _is_context_engine(value: object) -> bool:
    if not isinstance(value, str):
        return False
    if value == "provider" or MCP_ENGINE_RE.fullmatch(value):
        return True
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.netloc) and not any(c.isspace() for c in value)


def _parse_positive_int(raw: str) -> tuple[object, str | None]:
    text = raw.strip()
    if not POSITIVE_INT_RE.fullmatch(text):
        return None, "not a positive integer"
    if len(text.lstrip("+0")) > MAX_ENV_INT_DIGITS:
        return None, f"more than {MAX_ENV_INT_DIGITS} digits"
    if int(text) <= 0:
        return None, "not a positive integer"
    return int(text), None


def _parse_payload(raw: str) -> tuple[object, str | None]:
    if not raw.strip():
        return _UNSET, None
    size = parse_payload_size(raw)
    if size <= 0:
        return None, "not a positive size such as 5MB, 512KB or 5 (MB)"
    return size, None


def _parse_compact_model(raw: str) -> tuple[object, str | None]:
    text = raw.strip()
    if not text:
        return _UNSET, None
    if not COMPACT_MODEL_RE.fullmatch(text):
        return None, "not of the form provider:model (e.g. openai:gpt-4o-mini)"
    return text, None


def _parse_context_engine(raw: str) -> tuple[object, str | None]:
    text = raw.strip()
    if not text:
        return _UNSET, None
    lowered = text.lower()
    if lowered == "provider":
        text = "provider"
    elif lowered.startswith("mcp:"):
        text = "mcp:" + text[4:]
    if not _is_context_engine(text):
        return None, "not 'provider', 'mcp:<server>' or an http(s) URL"
    return text, None


_ENV_PARSERS: Mapping[str, Callable[[str], tuple[object, str | None]]] = MappingProxyType(
    {
        "payload_cap": _parse_payload,
        "compact_model": _parse_compact_model,
        "context_engine": _parse_context_engine,
    }
)


def _describe_default(name: str, value: object) -> str:
    meaning = DEFAULT_MEANINGS.get(name)
    if meaning and value in (None, 0):
        return f"{value!r} ({meaning})"
    return repr(value)


DEFAULT_POLICY = Policy()
CHAT_POLICY = Policy(budget_ratio=0.75, keep_recent=10)
