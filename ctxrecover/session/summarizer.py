"""Which level-2 summarizer a session uses: the given one, a dedicated model, or a context engine first."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ctxrecover.policy import Policy
from ctxrecover.summarize import ContextEngine, ContextEngineSummarizer, HttpSummarizer, Summarizer

__all__ = ["resolve_summarizer"]


def resolve_summarizer(
    policy: Policy,
    summarizer: Summarizer | None,
    context_engine: ContextEngine | None = None,
    *,
    env: Mapping[str, str] = os.environ,
) -> Summarizer | None:
    """The level-2 summarizer a session uses (SPEC §5 "Summarizer choice").

    The given ``summarizer`` or, when ``policy.compact_model`` is set, a dedicated
    OpenAI-compatible :class:`~ctxrecover.summarize.HttpSummarizer` (base URL and key
    from ``env``). An external context engine — ``context_engine`` (a callable
    implementing ``context_compact``) or an http(s) URL in ``policy.context_engine`` —
    goes first and falls back to that summarizer on error, timeout or empty answer.
    ``CHATCLI_CONTEXT_ENGINE=mcp:<server>`` needs the MCP tool passed as
    ``context_engine``; ``provider`` means Anthropic context editing, not a summarizer.
    """
    built_in = summarizer
    if built_in is None and policy.compact_model:
        built_in = HttpSummarizer.from_env({**env, "CHATCLI_COMPACT_MODEL": policy.compact_model})
    engine: ContextEngine | str | None = context_engine
    if engine is None and policy.context_engine and policy.context_engine.startswith(("http://", "https://")):
        engine = policy.context_engine
    if engine is None:
        return built_in
    return ContextEngineSummarizer(engine, fallback=built_in, timeout=policy.summarizer_timeout_s)
