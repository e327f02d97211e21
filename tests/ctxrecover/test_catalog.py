"""Context windows and output caps (SPEC §1.3, §8)."""

from __future__ import annotations

import pytest

from ctxrecover.catalog import (
    CONTEXT_WINDOW_ENV,
    DEFAULT_MAX_OUTPUT_TOKENS,
    ModelSpec,
    context_window,
    lookup_model,
    max_output_tokens,
)

NO_ENV: dict[str, str] = {}


@pytest.mark.parametrize(
    ("provider", "model", "window"),
    [
        ("google", "some-future-model", 1_000_000),
        ("anthropic", "some-future-model", 200_000),
        ("openai", "some-future-model", 128_000),
        ("bedrock", "anthropic.some-future-model-v1:0", 1_000_000),
        ("bedrock", "my-claude-profile", 1_000_000),
        ("bedrock", "meta.llama3-70b-instruct-v1:0", 128_000),
        ("xai", "some-future-model", 128_000),
        ("openrouter", "some-future-model", 128_000),
        ("github models", "some-future-model", 128_000),
        ("github-models", "some-future-model", 128_000),
        ("moonshot", "some-future-model", 262_144),
        ("ollama", "llama3", 8_192),
        ("somebody-else", "some-future-model", 50_000),
        ("", "", 50_000),
    ],
)
def test_provider_fallbacks_match_spec_table(provider: str, model: str, window: int) -> None:
    assert context_window(provider, model, env=NO_ENV) == window


@pytest.mark.parametrize(
    ("provider", "model", "window"),
    [
        ("openai", "gpt-4o", 128_000),
        ("openai", "gpt-4o-mini-2024-07-18", 128_000),
        ("openai", "gpt-4.1", 1_047_576),
        ("openai", "gpt-4.1-nano", 1_047_576),
        ("openai", "gpt-4-0613", 8_192),
        ("openai", "gpt-4-1106-preview", 128_000),
        ("openai", "o3-mini", 200_000),
        ("openai", "o1-mini", 128_000),
        ("anthropic", "claude-3-5-sonnet-20241022", 200_000),
        ("anthropic", "claude-sonnet-4-5", 200_000),
        ("bedrock", "us.anthropic.claude-3-7-sonnet-20250219-v1:0", 200_000),
        ("openrouter", "anthropic/claude-3.5-sonnet", 200_000),
        ("github models", "openai/gpt-4.1", 1_047_576),
        ("google", "gemini-2.0-flash", 1_048_576),
        ("google", "models/gemini-2.5-pro", 1_048_576),
        ("google", "gemini-1.5-flash-002", 1_048_576),
        ("xai", "grok-4-0709", 256_000),
        ("moonshot", "moonshot-v1-32k", 32_768),
        ("ollama", "gpt-4o", 128_000),
    ],
)
def test_catalog_wins_over_provider_fallback(provider: str, model: str, window: int) -> None:
    assert context_window(provider, model, env=NO_ENV) == window


def test_longest_prefix_wins() -> None:
    assert lookup_model("gpt-4o-2024-05-13") == ModelSpec(128_000, 4_096)
    assert lookup_model("gpt-4o-2024-08-06") == ModelSpec(128_000, 16_384)
    assert lookup_model("unknown-model") is None


def test_env_override_wins_over_everything() -> None:
    env = {CONTEXT_WINDOW_ENV: " 32000 "}
    assert context_window("openai", "gpt-4.1", env=env) == 32_000
    assert context_window("nobody", "nothing", env=env) == 32_000


@pytest.mark.parametrize("bad", ["", "0", "-5", "lots", "1.5", "128k"])
def test_bad_env_override_is_ignored(bad: str) -> None:
    assert context_window("anthropic", "claude-opus-4-1", env={CONTEXT_WINDOW_ENV: bad}) == 200_000


def test_reads_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONTEXT_WINDOW_ENV, "4096")
    assert context_window("openai", "gpt-4o") == 4096


@pytest.mark.parametrize(
    ("provider", "model", "cap"),
    [
        ("anthropic", "claude-3-5-sonnet-20240620", 8_192),
        ("bedrock", "anthropic.claude-3-5-sonnet-20240620-v1:0", 8_192),
        ("openai", "gpt-4o", 16_384),
        ("openai", "gpt-4.1-mini", 32_768),
        ("google", "gemini-2.5-flash", 65_536),
        ("anthropic", "claude-future", DEFAULT_MAX_OUTPUT_TOKENS),
        ("somebody", "unknown", 128_000),
    ],
)
def test_max_output_tokens_per_model_with_128k_default(provider: str, model: str, cap: int) -> None:
    assert max_output_tokens(provider, model) == cap
