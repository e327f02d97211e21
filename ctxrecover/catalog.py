"""Context windows and output caps by provider and model (SPEC §1.3, §8).

Lookup order for the context window: ``CHATCLI_CONTEXT_WINDOW`` (integer
tokens > 0) overrides everything; else the model catalog (longest prefix of the
normalised model id); else the provider fallback of SPEC §1.3. A bad override is
ignored here — the policy module reports it.

Model ids are normalised before lookup, so gateway spellings find their model:
``anthropic/claude-3.5-sonnet`` (OpenRouter), ``us.anthropic.claude-sonnet-4-…``
(Bedrock), ``models/gemini-2.5-pro`` (Gemini) and ``openai/gpt-4o`` (GitHub
Models).

>>> context_window("openai", "gpt-4.1-mini", env={})
1047576
>>> context_window("ollama", "llama3", env={})
8192
>>> context_window("openai", "gpt-4o", env={"CHATCLI_CONTEXT_WINDOW": "32000"})
32000
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "CONTEXT_WINDOW_ENV",
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "MODEL_CATALOG",
    "PROVIDER_CONTEXT_WINDOWS",
    "UNKNOWN_PROVIDER_CONTEXT_WINDOW",
    "ModelSpec",
    "context_window",
    "lookup_model",
    "max_output_tokens",
]

CONTEXT_WINDOW_ENV = "CHATCLI_CONTEXT_WINDOW"
DEFAULT_MAX_OUTPUT_TOKENS = 128_000


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model's context window and output cap, in tokens (``None``: not known)."""

    context_window: int
    max_output_tokens: int | None = None


# Keys are prefixes of normalised model ids; the longest matching prefix wins. The output caps bound
# max-token escalation (SPEC §8, §11); a provider's 400 that states a lower one is learned per session.
MODEL_CATALOG: dict[str, ModelSpec] = {
    # OpenAI — context window / max output tokens per model: https://platform.openai.com/docs/models
    "gpt-3.5-turbo": ModelSpec(16_385, 4_096),
    "gpt-4": ModelSpec(8_192, 8_192),
    "gpt-4-32k": ModelSpec(32_768, 8_192),
    "gpt-4-turbo": ModelSpec(128_000, 4_096),
    "gpt-4-1106": ModelSpec(128_000, 4_096),
    "gpt-4-0125": ModelSpec(128_000, 4_096),
    "gpt-4-vision": ModelSpec(128_000, 4_096),
    "gpt-4o": ModelSpec(128_000, 16_384),
    "gpt-4o-2024-05-13": ModelSpec(128_000, 4_096),
    "chatgpt-4o": ModelSpec(128_000, 16_384),
    "gpt-4.1": ModelSpec(1_047_576, 32_768),
    "gpt-4.5": ModelSpec(128_000, 16_384),
    "gpt-5": ModelSpec(400_000, 128_000),
    "gpt-5-chat": ModelSpec(128_000, 16_384),
    "o1": ModelSpec(200_000, 100_000),
    "o1-mini": ModelSpec(128_000, 65_536),
    "o1-preview": ModelSpec(128_000, 32_768),
    "o3": ModelSpec(200_000, 100_000),
    "o3-mini": ModelSpec(200_000, 100_000),
    "o4-mini": ModelSpec(200_000, 100_000),
    # Anthropic — https://docs.anthropic.com/en/docs/about-claude/models/overview (max output column)
    "claude-": ModelSpec(200_000),
    "claude-2": ModelSpec(100_000, 4_096),
    "claude-2.1": ModelSpec(200_000, 4_096),
    "claude-instant": ModelSpec(100_000, 4_096),
    "claude-3-haiku": ModelSpec(200_000, 4_096),
    "claude-3-sonnet": ModelSpec(200_000, 4_096),
    "claude-3-opus": ModelSpec(200_000, 4_096),
    "claude-3-5-sonnet": ModelSpec(200_000, 8_192),
    "claude-3.5-sonnet": ModelSpec(200_000, 8_192),
    "claude-3-5-haiku": ModelSpec(200_000, 8_192),
    "claude-3.5-haiku": ModelSpec(200_000, 8_192),
    "claude-3-7-sonnet": ModelSpec(200_000, 64_000),
    "claude-3.7-sonnet": ModelSpec(200_000, 64_000),
    "claude-sonnet-4": ModelSpec(200_000, 64_000),
    "claude-opus-4": ModelSpec(200_000, 32_000),
    "claude-opus-4-5": ModelSpec(200_000, 64_000),
    "claude-haiku-4": ModelSpec(200_000, 64_000),
    # Google — https://ai.google.dev/gemini-api/docs/models (input / output token limits)
    "gemini-1.0-pro": ModelSpec(32_760, 8_192),
    "gemini-1.5-flash": ModelSpec(1_048_576, 8_192),
    "gemini-1.5-pro": ModelSpec(2_097_152, 8_192),
    "gemini-2.0-flash": ModelSpec(1_048_576, 8_192),
    "gemini-2.5": ModelSpec(1_048_576, 65_536),
    "gemini-3": ModelSpec(1_048_576, 65_536),
    # xAI — https://docs.x.ai/docs/models (context length; output caps not published per model)
    "grok-2": ModelSpec(131_072),
    "grok-3": ModelSpec(131_072),
    "grok-4": ModelSpec(256_000),
    "grok-code-fast": ModelSpec(256_000),
    # Moonshot — https://platform.moonshot.ai/docs (model names carry their window)
    "moonshot-v1-8k": ModelSpec(8_192),
    "moonshot-v1-32k": ModelSpec(32_768),
    "moonshot-v1-128k": ModelSpec(131_072),
}

PROVIDER_CONTEXT_WINDOWS: dict[str, int] = {
    "google": 1_000_000,
    "gemini": 1_000_000,
    "anthropic": 200_000,
    "openai": 128_000,
    "xai": 128_000,
    "openrouter": 128_000,
    "github-models": 128_000,
    "github": 128_000,
    "moonshot": 262_144,
    "ollama": 8_192,
}
BEDROCK_ANTHROPIC_CONTEXT_WINDOW = 1_000_000
BEDROCK_OTHER_CONTEXT_WINDOW = 128_000
BEDROCK_ANTHROPIC_MARKERS = ("anthropic", "claude")
UNKNOWN_PROVIDER_CONTEXT_WINDOW = 50_000

# Gateway prefixes stripped from a model id (after its last "/") before lookup.
MODEL_ID_PREFIXES = (
    "us.",
    "eu.",
    "apac.",
    "global.",
    "anthropic.",
    "openai.",
    "google.",
    "xai.",
)


def _normalise_model(model: str) -> str:
    name = model.strip().lower().rpartition("/")[2]
    stripped = True
    while stripped:
        stripped = False
        for prefix in MODEL_ID_PREFIXES:
            if name.startswith(prefix):
                name, stripped = name[len(prefix) :], True
    return name


def _normalise_provider(provider: str) -> str:
    return provider.strip().lower().replace("_", "-").replace(" ", "-")


def lookup_model(model: str) -> ModelSpec | None:
    """The catalog entry with the longest prefix of the normalised ``model``, or None."""
    name = _normalise_model(model)
    best = max((key for key in MODEL_CATALOG if name.startswith(key)), key=len, default=None)
    return None if best is None else MODEL_CATALOG[best]


def _override(env: Mapping[str, str]) -> int | None:
    try:
        value = int(env.get(CONTEXT_WINDOW_ENV, "").strip())
    except ValueError:
        return None
    return value if value > 0 else None


def context_window(provider: str, model: str, *, env: Mapping[str, str] = os.environ) -> int:
    """The context window in tokens for ``provider``/``model`` (SPEC §1.3)."""
    override = _override(env)
    if override is not None:
        return override
    spec = lookup_model(model)
    if spec is not None:
        return spec.context_window
    name = _normalise_provider(provider)
    if name == "bedrock":
        lowered = model.lower()
        if any(marker in lowered for marker in BEDROCK_ANTHROPIC_MARKERS):
            return BEDROCK_ANTHROPIC_CONTEXT_WINDOW
        return BEDROCK_OTHER_CONTEXT_WINDOW
    return PROVIDER_CONTEXT_WINDOWS.get(name, UNKNOWN_PROVIDER_CONTEXT_WINDOW)


def max_output_tokens(provider: str, model: str) -> int:
    """The output-token cap that max-token escalation may grow to (SPEC §8).

    Per model when the catalog knows it, else 128 000. ``provider`` is taken
    for symmetry with :func:`context_window`; caps belong to models.
    """
    spec = lookup_model(model)
    if spec is None or spec.max_output_tokens is None:
        return DEFAULT_MAX_OUTPUT_TOKENS
    return spec.max_output_tokens
