"""Peer context-management strategies, run by the same replay as ctxrecover's own policy.

A :class:`Strategy` is a named recipe: Policy overrides plus a factory of
:class:`~ctxrecover.session.Session` injections (``compactor`` for planned compaction,
``ladder`` for the reaction to a rejected request, ``gateway`` for the gateway model it
starts from). :func:`simulator.replay.replay` takes one as ``strategy=``;
:data:`BASELINES` holds the peers and :func:`resolve_policies` turns
``"default,baselines"`` into what a sweep runs.

Peers are modelled faithfully, data loss included: Cline's truncation, LangChain's
``trim_messages``, OpenHands' observation masking and summarizing condenser drop what
they cut without a recall marker, so their runs report ``chars_lost > 0`` whenever they
act; that is the honest result, not a bug. Peers also run without ctxrecover's own
lossless per-turn passes (microcompact, tool-result budget, skill aging — disabled by
:data:`PEER_POLICY_OVERRIDES`), learn no payload cap and never add ctxrecover's payload
notice (a gateway model with ``strategy="none"``). What they share with ctxrecover is the classification
of failures and the floor diagnosis (a system prompt over the rejected size fails fast).
Their ladders have one rung, so a recovered turn reads ``recovered@L1``.

>>> [name for name in BASELINES][:3]
['no-recovery', 'cline-drop-half', 'cline-drop-three-quarters']
>>> [(name, strategy is None) for name, _policy, strategy in resolve_policies("default,no-recovery")]
[('default', True), ('no-recovery', False)]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ctxrecover.archive import Archive
from ctxrecover.compaction import HistoryCompactor
from ctxrecover.errors import ConfigError
from ctxrecover.events import EventBus, SessionStats
from ctxrecover.policy import CHAT_POLICY, DEFAULT_POLICY, Policy
from ctxrecover.recovery import GatewayModel, RecoveryLadder
from ctxrecover.summarize import Summarizer
from simulator.research.peers import (
    MASKED_OBSERVATION,
    OBSERVATION_WINDOW_TURNS,
    SUMMARIZE_KEEP_LAST,
    ClineDrop,
    ClineKeep,
    ClineTruncation,
    KeepLast,
    KeepLastTrim,
    Masking,
    MaskObservations,
    SummarizeAll,
    SummarizingCondenser,
    Untouched,
)

__all__ = [
    "BASELINES",
    "BASELINES_SPEC",
    "PEER_POLICY_OVERRIDES",
    "POLICY_PRESETS",
    "Strategy",
    "resolve_policies",
    "strategy_fields",
]


SessionOptions = Callable[..., dict[str, Any]]
# A per-turn limit so large it never fires: the peers do not have ctxrecover's lossless passes.
PEER_OFF = 10**9
PEER_POLICY_OVERRIDES: Mapping[str, int] = MappingProxyType(
    {
        "microcompact_min_content": PEER_OFF,
        "tool_result_budget_chars": PEER_OFF,
        "tool_result_max_chars": PEER_OFF,
        "skill_age_turns": PEER_OFF,
    }
)
#: The named policies besides the baselines.
POLICY_PRESETS: Mapping[str, Policy] = MappingProxyType({"default": DEFAULT_POLICY, "chat": CHAT_POLICY})
BASELINES_SPEC = "baselines"  # resolve_policies: every baseline


@dataclass(frozen=True, slots=True)
class Strategy:
    """A context-management strategy runnable by :func:`simulator.replay.replay`.

    ``policy_overrides`` are Policy fields the strategy fixes (applied over the policy it
    is given, so they win over swept knobs); ``factory(policy, archive, events, stats,
    summarizer)`` returns Session keyword injections (``compactor``, ``ladder``,
    ``gateway``). ``source`` says where the strategy comes from.
    """

    name: str
    description: str
    source: str
    policy_overrides: tuple[tuple[str, Any], ...] = ()
    factory: SessionOptions | None = None

    def apply(self, policy: Policy) -> Policy:
        """``policy`` with this strategy's overrides."""
        return policy.replace(**dict(self.policy_overrides)) if self.policy_overrides else policy

    def session_options(
        self,
        policy: Policy,
        archive: Archive,
        events: EventBus,
        stats: SessionStats,
        *,
        summarizer: Summarizer | None = None,
    ) -> dict[str, Any]:
        """The Session keyword injections for one session (fresh objects every call)."""
        if self.factory is None:
            return {}
        return self.factory(policy, archive, events, stats, summarizer)


def _peer_cap(policy: Policy) -> GatewayModel:
    """A peer learns no cap and never adds ctxrecover's payload notice."""
    return GatewayModel(configured_cap=policy.payload_cap, strategy="none", payload_notice_sent=True)


def _no_recovery(
    policy: Policy, archive: Archive, events: EventBus, stats: SessionStats, summarizer: Summarizer | None
) -> dict[str, Any]:
    return {"compactor": HistoryCompactor(policy, archive, levels=Untouched(), events=events, stats=stats)}


def _cline(
    keep: ClineKeep, policy: Policy, archive: Archive, events: EventBus, stats: SessionStats
) -> dict[str, Any]:
    return {
        "compactor": HistoryCompactor(
            policy, archive, levels=ClineTruncation(keep), events=events, stats=stats
        ),
        "ladder": RecoveryLadder(ClineDrop(keep)),
        "gateway": _peer_cap(policy),
    }


def _cline_half(
    policy: Policy, archive: Archive, events: EventBus, stats: SessionStats, summarizer: Summarizer | None
) -> dict[str, Any]:
    return _cline("half", policy, archive, events, stats)


def _cline_quarter(
    policy: Policy, archive: Archive, events: EventBus, stats: SessionStats, summarizer: Summarizer | None
) -> dict[str, Any]:
    return _cline("quarter", policy, archive, events, stats)


def _keep_last(
    policy: Policy, archive: Archive, events: EventBus, stats: SessionStats, summarizer: Summarizer | None
) -> dict[str, Any]:
    return {
        "compactor": HistoryCompactor(policy, archive, levels=KeepLast(), events=events, stats=stats),
        "ladder": RecoveryLadder(KeepLastTrim()),
        "gateway": _peer_cap(policy),
    }


def _masking(
    policy: Policy, archive: Archive, events: EventBus, stats: SessionStats, summarizer: Summarizer | None
) -> dict[str, Any]:
    return {
        "compactor": HistoryCompactor(policy, archive, levels=Masking(), events=events, stats=stats),
        "ladder": RecoveryLadder(MaskObservations()),
        "gateway": _peer_cap(policy),
    }


def _summarize_everything(
    policy: Policy, archive: Archive, events: EventBus, stats: SessionStats, summarizer: Summarizer | None
) -> dict[str, Any]:
    return {
        "compactor": HistoryCompactor(
            policy, archive, summarizer=summarizer, levels=SummarizingCondenser(), events=events, stats=stats
        ),
        "ladder": RecoveryLadder(SummarizeAll(summarizer, stats)),
        "gateway": _peer_cap(policy),
    }


PEERS = tuple(PEER_POLICY_OVERRIDES.items())
CLINE_SOURCE = (
    "Cline, ContextManager.getNextTruncationRange and applyStandardContextTruncationNoticeChange "
    "(src/core/context/context-management/ContextManager.ts, https://github.com/cline/cline)"
)
CLINE_LOSS = (
    " The dropped messages and the first assistant message's text are not archived: chars_lost > 0 "
    "whenever it truncates. No cap learning."
)
BASELINES: Mapping[str, Strategy] = MappingProxyType(
    {
        strategy.name: strategy
        for strategy in (
            Strategy(
                "no-recovery",
                "ctxrecover with recovery and planned compaction switched off: max_recovery_attempts=0 and "
                "a compactor that never compacts (the budget is effectively infinite). The first rejection "
                "of a turn ends the run. The per-turn lossless passes still run; nothing is lost.",
                "ablation of this repository's Session (ctxrecover/session/core.py)",
                (("max_recovery_attempts", 0),),
                _no_recovery,
            ),
            Strategy(
                "cline-drop-half",
                "Over budget or on an overflow/payload rejection: keep the first user/assistant pair and "
                "drop half of the remaining API messages, no summary." + CLINE_LOSS,
                CLINE_SOURCE,
                PEERS,
                _cline_half,
            ),
            Strategy(
                "cline-drop-three-quarters",
                "As cline-drop-half, dropping three quarters of the remaining API messages (Cline's "
                "'quarter' keep, used when the history is far over the window)." + CLINE_LOSS,
                CLINE_SOURCE,
                PEERS,
                _cline_quarter,
            ),
            Strategy(
                "langchain-keep-last-n",
                "Planned compaction keeps the system message and the last keep_recent messages (fewer until "
                "the history fits the budget), starting on a user message; a rejection re-trims to "
                "keep_recent. Dropped messages are not archived: chars_lost > 0 whenever it trims. "
                "No cap learning.",
                "LangChain langchain_core.messages.trim_messages(strategy='last', token_counter=len, "
                "start_on='human', include_system=True) "
                "(https://python.langchain.com/docs/how_to/trim_messages/)",
                PEERS,
                _keep_last,
            ),
            Strategy(
                "observation-masking",
                f"Over budget or on a rejection: tool results older than the last {OBSERVATION_WINDOW_TURNS} "
                f"agent turns become {MASKED_OBSERVATION!r}, no LLM. Masked results are not archived: "
                "chars_lost > 0 whenever it masks; chat histories (no tool results) cannot shrink. "
                "OpenHands masks on every step; here it runs when the history is over budget or rejected. "
                "No cap learning.",
                "OpenHands ObservationMaskingCondenser (openhands/memory/condenser/impl/"
                "observation_masking_condenser.py, https://github.com/All-Hands-AI/OpenHands); Lindenbauer "
                "et al., 'The Complexity Trap: Simple Observation Masking Is as Efficient as LLM "
                "Summarization for Agent Context Management', JetBrains Research, arXiv:2508.21433",
                PEERS,
                _masking,
            ),
            Strategy(
                "summarize-everything",
                f"Over budget or on a rejection: the whole non-system history but the last "
                f"{SUMMARIZE_KEEP_LAST} messages becomes one LLM summary (no quality gate: a refusal becomes "
                "the summary). The summarized messages are not archived: chars_lost > 0 whenever it "
                "condenses. No cap learning.",
                "OpenHands LLMSummarizingCondenser (openhands/memory/condenser/impl/"
                "llm_summarizing_condenser.py, https://github.com/All-Hands-AI/OpenHands)",
                PEERS,
                _summarize_everything,
            ),
            Strategy(
                "cap-bisection",
                "The default policy, but the payload cap is inferred by bisection between the largest "
                "accepted and the smallest rejected request size (Policy.cap_strategy='bisection') "
                "instead of ¾ of the rejected size. Lossless like the default.",
                "this repository: the gateway model's bisection strategy "
                "(ctxrecover/recovery/gateway.py, SPEC §11)",
                (("cap_strategy", "bisection"),),
                None,
            ),
        )
    }
)


def _names(spec: str | Iterable[str]) -> list[str]:
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    return [name.strip() for name in items if name and name.strip()]


def resolve_policies(spec: str | Iterable[str]) -> list[tuple[str, Policy, Strategy | None]]:
    """``(name, policy, strategy)`` for each name of a comma-separated list (or a sequence of names).

    Names are the presets (:data:`POLICY_PRESETS`: ``default``, ``chat``), baseline names
    (:data:`BASELINES`) and ``baselines`` for all of them; duplicates are dropped.
    A baseline's policy is the default policy with its overrides. Raises
    :class:`~ctxrecover.errors.ConfigError` naming the valid names.
    """
    names = _names(spec)
    if not names:
        raise ConfigError(f"no policy given; use {', '.join(_valid_names())}")
    resolved: dict[str, tuple[str, Policy, Strategy | None]] = {}
    for name in names:
        expanded = list(BASELINES) if name == BASELINES_SPEC else [name]
        for one in expanded:
            if one in POLICY_PRESETS:
                resolved.setdefault(one, (one, POLICY_PRESETS[one], None))
            elif one in BASELINES:
                strategy = BASELINES[one]
                resolved.setdefault(one, (one, strategy.apply(DEFAULT_POLICY), strategy))
            else:
                raise ConfigError(f"unknown policy {one!r}; use {', '.join(_valid_names())}")
    return list(resolved.values())


def _valid_names() -> list[str]:
    return [*POLICY_PRESETS, BASELINES_SPEC, *BASELINES]


def strategy_fields(strategy: Strategy) -> dict[str, Any]:
    """A strategy as plain data (for manifests): name, description, source, overrides."""
    return {
        "name": strategy.name,
        "description": strategy.description,
        "source": strategy.source,
        "policy_overrides": dict(strategy.policy_overrides),
    }
