"""A scenario's ``[expect]`` table: what its replay must show, validated, and the check.

Each field names something that tells the scenario's behaviour apart from a
wrong one (a working summarizer where it should refuse, no recovery, a cap never
learned, the fault absent). Only ``outcome`` is required; a field left out is
not checked. Every run must also lose no character (``chars_lost`` 0).

=====================  ===============================================================================
field                  the replay must show
=====================  ===============================================================================
``outcome``            how the run ended: one of :data:`OUTCOMES`
``failure_kind``       the kind of its first failure (rejection or truncation): one of
                       :data:`FAILURE_KINDS`
``compaction_level``   the highest compaction level reached: 1, 2 or 3, or 0 for no compaction at all
``rejected_requests``  rejected requests per failure episode (a run of rejected attempts of one turn),
                       in order: ``[1]`` one rejection then recovery, ``[4]`` four, ``[]`` none at all
``cap_learned``        true: the session ends with a learned payload cap; false: it never learns one
``summarizer``         ``unused`` (never called), or what at least one call did: one of
                       :data:`simulator.summarizers.CALL_OUTCOMES` (``answered``, ``refused``,
                       ``too_short``, ``failed``, ``overflowed``, ``timed_out``, ``cancelled``)
``notices``            texts the user must see, each matching one whole line the run showed (a notice,
                       a compaction status line or the error that ended it): a SPEC text as written,
                       where ``%s`` stands for any text, ``%d`` for an integer, ``%.1f`` for a number
                       and ``%%`` for ``%`` — so a prefix is written ``"PREFIX%s"``
``floor_warning``      true: the floor warning (``⚠ System prompt alone is …``) was shown
``content_blocks``     how many content/policy blocks the session raised for the caller to set aside
                       (SPEC §11: a refusal at or below an accepted size it could not settle itself),
                       each of which must leave the learned payload cap as it was
``withheld``           how many parts the session withheld as content the gateway refused (SPEC §12:
                       one ``content_withheld`` notice each, a re-read of withheld content included)
``final_max_tokens``   the ``max_tokens`` of the last request sent (e.g. lowered to a model's output cap)
``requests_over_cap``  how many requests were sent above the payload cap the session had learned by then
                       (a cap it cannot keep, e.g. one below its own system prompt): usually 0
``own_workload``       the fields above that describe the scenario's own ``[workload]`` transcript only
                       (its sizes, turns and content): replayed over another transcript, the matrix
                       tier (:mod:`simulator.research.workload_matrix`) reports them apart from the
                       fields that hold on any workload
=====================  ===============================================================================

>>> expect = Expectation("recovered", rejected_requests=(1,), cap_learned=True)
>>> expect.problems(Observed(outcome="recovered", rejected_requests=(2,), learned_cap=None))
['rejected requests per episode [2], expected [1]', 'no payload cap learned, expected one']
>>> notice_pattern("⚠ Recoverable failure (%s) — compacting and retrying").fullmatch(
...     "⚠ Recoverable failure (context too long) — compacting and retrying") is not None
True
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from simulator.proxy.fault_specs import FieldProblem, ScenarioError, typed_value
from simulator.summarizers import CALL_OUTCOMES

__all__ = [
    "EXPECT_FIELDS",
    "Expectation",
    "FAILURE_KINDS",
    "FLOOR_WARNING_PREFIX",
    "OUTCOMES",
    "Observed",
    "SUMMARIZER_EXPECTATIONS",
    "expectation_from_table",
    "notice_pattern",
]

# What a replay of the scenario must end with (the run's final outcome).
OUTCOMES: tuple[str, ...] = (
    "ok",  # every request succeeds at once
    "recovered",  # a rejection was recovered by compaction and the run completed
    "retried",  # a failure was resolved by a plain retry, without compaction
    "escalated",  # output truncation was handled by max-token escalation
    "max_tokens_lowered",  # a 400 said max_tokens is over the model's cap: lowered, resent, no compaction
    "content_withheld",  # a block page settled as content (SPEC §12): the culprit withheld, the run went on
    "content_blocked",  # a content/policy block: cap and history kept, the refused message set aside, run on
    "policy_blocked",  # the gateway refused even a request without conversation content: the route (§12)
    "content_floor",  # the gateway refused the system prompt or the tool definitions themselves (§12)
    "content_refused",  # the provider refused the content itself (§12): raised with its reason
    "no_compaction",  # the failure surfaced to the caller and the history was not compacted
    "fail_fast_floor",  # the system prompt alone is over the limit: failed without spending attempts
    "failed",  # every recovery attempt was spent; the error surfaced with the history intact
)
# The classify kinds of SPEC §2.
FAILURE_KINDS: tuple[str, ...] = (
    "context_overflow",
    "payload_too_large",
    "waf_rejection",
    "policy_block",
    "content_refused",
    "suspected_payload",
    "malformed_history",
    "output_truncated",
    "output_limit",
    "auth",
    "rate_limit",
    "transient_network",
    "other",
    "ok",
)
SUMMARIZER_EXPECTATIONS: tuple[str, ...] = ("unused", *CALL_OUTCOMES)
COMPACTION_LEVELS: tuple[int, ...] = (0, 1, 2, 3)
FLOOR_WARNING_PREFIX = "⚠ System prompt alone is"  # SPEC §6 step 2
# The [expect] keys, in the order problems are reported.
EXPECT_FIELDS: Mapping[str, str] = MappingProxyType(
    {
        "outcome": "how the run ended",
        "failure_kind": "the kind of its first failure",
        "compaction_level": "the highest compaction level reached (0: none)",
        "rejected_requests": "rejected requests per failure episode, in order",
        "cap_learned": "whether the session ends with a learned payload cap",
        "summarizer": "what the summarizer did",
        "notices": "lines the user must see",
        "floor_warning": "whether the floor warning was shown",
        "content_blocks": "content blocks met, each leaving the learned cap as it was",
        "withheld": "parts withheld as content the gateway refused",
        "final_max_tokens": "the max_tokens of the last request",
        "requests_over_cap": "requests sent above the learned payload cap",
        "own_workload": "the fields that describe the scenario's own workload only",
    }
)
# printf conversions of the SPEC texts (%s, %d, %.1f, %%) and what each stands for in a shown line.
PLACEHOLDER_RE = re.compile(r"%(?:%|s|d|\.?\d*f)")
PLACEHOLDER_PATTERNS: Mapping[str, str] = MappingProxyType({"%%": "%", "%s": ".+?", "%d": r"-?\d+"})
NUMBER_PATTERN = r"-?\d+(?:\.\d+)?"


@lru_cache(maxsize=256)
def notice_pattern(text: str) -> re.Pattern[str]:
    """The regex a ``notices`` entry stands for: its literal text, with printf placeholders as values."""
    parts: list[str] = []
    position = 0
    for found in PLACEHOLDER_RE.finditer(text):
        parts.append(re.escape(text[position : found.start()]))
        token = found[0]
        parts.append(re.escape("%") if token == "%%" else PLACEHOLDER_PATTERNS.get(token, NUMBER_PATTERN))
        position = found.end()
    parts.append(re.escape(text[position:]))
    return re.compile("".join(parts), re.DOTALL)


@dataclass(frozen=True, slots=True)
class Observed:
    """What a run showed, in the terms of an expectation (:func:`simulator.replay.expectation_problems`).

    ``lines`` are the user-visible lines (notices, compaction status lines, the
    error that ended the run); ``summarizer_calls`` what each summarizer call did;
    ``content_blocks`` the learned cap before and after each content block; ``withheld`` the parts
    withheld as refused content;
    ``final_max_tokens`` the ``max_tokens`` of the last request; ``requests_over_cap`` the
    requests sent above the payload cap the session had learned when it sent them.
    """

    outcome: str
    failure_kinds: tuple[str, ...] = ()
    compaction_level: int | None = None
    rejected_requests: tuple[int, ...] = ()
    learned_cap: int | None = None
    summarizer_calls: tuple[str, ...] = ()
    lines: tuple[str, ...] = ()
    content_blocks: tuple[tuple[int | None, int | None], ...] = ()
    withheld: int = 0
    final_max_tokens: int | None = None
    requests_over_cap: int = 0


@dataclass(frozen=True, slots=True)
class Expectation:
    """What a replay of the scenario must show (see the module docstring for each field)."""

    outcome: str
    failure_kind: str | None = None
    compaction_level: int | None = None
    floor_warning: bool = False
    summarizer: str | None = None
    notices: tuple[str, ...] = ()
    rejected_requests: tuple[int, ...] | None = None
    cap_learned: bool | None = None
    content_blocks: int | None = None
    withheld: int | None = None
    final_max_tokens: int | None = None
    requests_over_cap: int | None = None
    own_workload: tuple[str, ...] = ()

    def problems(self, seen: Observed) -> list[str]:
        """How ``seen`` falls short of this expectation, one readable line per unmet field."""
        return [problem for _field, problem in self.field_problems(seen)]

    def field_problems(self, seen: Observed) -> list[tuple[str, str]]:
        """:meth:`problems` as ``(field, problem)`` pairs, so a reader can tell the ``own_workload`` rows."""
        problems: list[tuple[str, str]] = []
        if seen.outcome != self.outcome:
            problems.append(("outcome", f"outcome {seen.outcome}, expected {self.outcome}"))
        kinds = seen.failure_kinds
        if self.failure_kind is not None and (not kinds or kinds[0] != self.failure_kind):
            first = kinds[0] if kinds else "none"
            problems.append(("failure_kind", f"first failure {first}, expected {self.failure_kind}"))
        if self.compaction_level is not None and (seen.compaction_level or 0) != self.compaction_level:
            problems.append(
                (
                    "compaction_level",
                    f"compaction level {seen.compaction_level or 'none'}, expected "
                    f"{self.compaction_level or 'none'}",
                )
            )
        if self.rejected_requests is not None and seen.rejected_requests != self.rejected_requests:
            problems.append(
                (
                    "rejected_requests",
                    f"rejected requests per episode {list(seen.rejected_requests)}, expected "
                    f"{list(self.rejected_requests)}",
                )
            )
        if self.cap_learned is not None and (seen.learned_cap is not None) != self.cap_learned:
            problems.append(
                (
                    "cap_learned",
                    f"payload cap learned ({seen.learned_cap:,} bytes), expected none"
                    if seen.learned_cap is not None
                    else "no payload cap learned, expected one",
                )
            )
        if self.content_blocks is not None:
            problems += [("content_blocks", p) for p in self._content_block_problems(seen.content_blocks)]
        if self.withheld is not None and seen.withheld != self.withheld:
            problems.append(("withheld", f"{seen.withheld} part(s) withheld, expected {self.withheld}"))
        if self.final_max_tokens is not None and seen.final_max_tokens != self.final_max_tokens:
            problems.append(
                (
                    "final_max_tokens",
                    f"last request's max_tokens {seen.final_max_tokens}, expected {self.final_max_tokens}",
                )
            )
        if self.requests_over_cap is not None and seen.requests_over_cap != self.requests_over_cap:
            problems.append(
                (
                    "requests_over_cap",
                    f"{seen.requests_over_cap} request(s) sent above the learned payload cap, "
                    f"expected {self.requests_over_cap}",
                )
            )
        if self.summarizer is not None:
            problems += [("summarizer", p) for p in self._summarizer_problems(seen.summarizer_calls)]
        for text in self.notices:
            if not any(notice_pattern(text).fullmatch(line) for line in seen.lines):
                problems.append(("notices", f"no line shown matches {text!r}"))
        if self.floor_warning and not any(line.startswith(FLOOR_WARNING_PREFIX) for line in seen.lines):
            problems.append(("floor_warning", "no floor warning notice"))
        return problems

    def _content_block_problems(self, blocks: tuple[tuple[int | None, int | None], ...]) -> list[str]:
        problems = []
        if len(blocks) != self.content_blocks:
            problems.append(f"{len(blocks)} content block(s), expected {self.content_blocks}")
        problems += [
            f"a content block changed the learned cap ({_cap(before)} → {_cap(after)})"
            for before, after in blocks
            if before != after
        ]
        return problems

    def _summarizer_problems(self, calls: tuple[str, ...]) -> list[str]:
        if self.summarizer == "unused":
            return [f"summarizer called {len(calls)} time(s), expected unused"] if calls else []
        if self.summarizer in calls:
            return []
        did = ", ".join(f"{outcome} ×{calls.count(outcome)}" for outcome in dict.fromkeys(calls)) or "no call"
        return [f"summarizer {did}, expected a call {self.summarizer}"]


def _cap(cap: int | None) -> str:
    return "none" if cap is None else f"{cap:,} bytes"


# -- reading the [expect] table ---------------------------------------------------------------------
def _choice(name: str, value: object, choices: tuple[Any, ...]) -> None:
    if value not in choices:
        raise FieldProblem(f"{name} must be one of {', '.join(map(str, choices))}, got {value!r}")


def _notices(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise FieldProblem(f"notices must be a list of texts (SPEC texts, %s for any value), got {value!r}")
    for index, text in enumerate(value):
        if not isinstance(text, str) or not text.strip():
            raise FieldProblem(f"notices[{index}] must be a non-empty text, got {text!r}")
    return tuple(value)


def _rejected_requests(value: object) -> tuple[int, ...]:
    counts = value if isinstance(value, list) else None
    if counts is None or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in counts):
        raise FieldProblem(
            "rejected_requests must be a list of integers > 0 (rejected requests per failure episode, in "
            f"order; [] for none), got {value!r}"
        )
    return tuple(counts)


def _own_workload(value: object) -> tuple[str, ...]:
    fields = [name for name in EXPECT_FIELDS if name != "own_workload"]
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise FieldProblem(f"own_workload must be a list of [expect] field names, got {value!r}")
    for name in value:
        if name not in fields:
            raise FieldProblem(
                f"own_workload names {name!r}, which is not an [expect] field ({', '.join(fields)})"
            )
    return tuple(value)


READERS: Mapping[str, Callable[[object], object]] = MappingProxyType(
    {
        "notices": _notices,
        "rejected_requests": _rejected_requests,
        "own_workload": _own_workload,
    }
)
ANNOTATIONS: Mapping[str, str] = MappingProxyType(
    {
        "outcome": "str",
        "failure_kind": "str",
        "summarizer": "str",
        "compaction_level": "int",
        "cap_learned": "bool",
        "floor_warning": "bool",
        "content_blocks": "int",
        "withheld": "int",
        "final_max_tokens": "int",
        "requests_over_cap": "int",
    }
)


def expectation_from_table(table: Mapping[str, Any], where: str) -> Expectation:
    """Validate an ``[expect]`` table into an :class:`Expectation`; errors start with ``where``."""
    unknown = sorted(set(table) - set(EXPECT_FIELDS))
    if unknown:
        raise ScenarioError(f"{where} has unknown key {unknown[0]!r}; valid keys: {', '.join(EXPECT_FIELDS)}")
    if "outcome" not in table:
        raise ScenarioError(f"{where} outcome is missing; valid outcomes: {', '.join(OUTCOMES)}")
    values: dict[str, Any] = {}
    try:
        for name, value in table.items():
            read = READERS.get(name)
            values[name] = read(value) if read else typed_value(name, value, ANNOTATIONS[name])
        _choice("outcome", values["outcome"], OUTCOMES)
        if "failure_kind" in values:
            _choice("failure_kind", values["failure_kind"], FAILURE_KINDS)
        if "compaction_level" in values:
            _choice("compaction_level", values["compaction_level"], COMPACTION_LEVELS)
        if "summarizer" in values:
            _choice("summarizer", values["summarizer"], SUMMARIZER_EXPECTATIONS)
        for name, least in (
            ("content_blocks", 0),
            ("withheld", 0),
            ("final_max_tokens", 1),
            ("requests_over_cap", 0),
        ):
            if name in values and values[name] < least:
                raise FieldProblem(f"{name} must be an integer >= {least}, got {values[name]}")
        unset = [name for name in values.get("own_workload", ()) if name not in values]
        if unset:
            raise FieldProblem(f"own_workload names {unset[0]!r}, which this [expect] table does not set")
    except FieldProblem as exc:
        raise ScenarioError(f"{where} {exc}") from None
    return Expectation(**values)
