"""The built-in summarizer: any OpenAI-compatible ``/chat/completions`` endpoint, over httpx.

:meth:`HttpSummarizer.from_env` configures it from ``CHATCLI_COMPACT_MODEL=provider:model``;
``PROVIDER_ENDPOINTS`` gives each provider's base URL, key variables and fallback
window. A rejection that :func:`ctxrecover.classify.classify` reads as an overflow
is reported as the summarizer overflowing its *own* window. httpx is imported
only when a request is sent.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctxrecover.cancel import CancelToken, run_bounded
from ctxrecover.classify import classify
from ctxrecover.errors import CompactionCancelled, ConfigError, SummarizerError
from ctxrecover.summarize.prompt import DEFAULT_CHARS_PER_TOKEN
from ctxrecover.summarize.protocol import DEFAULT_SUMMARIZER_TIMEOUT_S, SummaryResult, excerpt

if TYPE_CHECKING:
    import httpx

__all__ = [
    "HttpSummarizer",
    "PROVIDER_ALIASES",
    "PROVIDER_ENDPOINTS",
    "ProviderEndpoint",
    "UNKNOWN_PROVIDER_WINDOW",
]

OVERFLOW_KINDS = frozenset({"context_overflow", "payload_too_large"})

COMPACT_MODEL_ENV = "CHATCLI_COMPACT_MODEL"
COMPACT_BASE_URL_ENV = "CHATCLI_COMPACT_BASE_URL"
COMPACT_API_KEY_ENV = "CHATCLI_COMPACT_API_KEY"
COMPACT_WINDOW_ENV = "CHATCLI_COMPACT_WINDOW"
COMPACT_PRICE_IN_ENV = "CHATCLI_COMPACT_PRICE_IN"
COMPACT_PRICE_OUT_ENV = "CHATCLI_COMPACT_PRICE_OUT"
OPENAI_BASE_URL_ENV = "OPENAI_BASE_URL"
OPENAI_API_KEY_ENV = "OPENAI_API_KEY"


@dataclass(frozen=True, slots=True)
class ProviderEndpoint:
    """Where a provider serves OpenAI-compatible chat completions, and how it is reached."""

    base_url: str
    key_env: tuple[str, ...]
    window_tokens: int
    needs_key: bool = True


# OpenAI-compatible endpoints by provider; windows are the SPEC §1.3 provider fallbacks.
PROVIDER_ENDPOINTS: Mapping[str, ProviderEndpoint] = {
    "openai": ProviderEndpoint("https://api.openai.com/v1", ("OPENAI_API_KEY",), 128_000),
    "anthropic": ProviderEndpoint("https://api.anthropic.com/v1", ("ANTHROPIC_API_KEY",), 200_000),
    "google": ProviderEndpoint(
        "https://generativelanguage.googleapis.com/v1beta/openai",
        ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        1_000_000,
    ),
    "groq": ProviderEndpoint("https://api.groq.com/openai/v1", ("GROQ_API_KEY",), 128_000),
    "mistral": ProviderEndpoint("https://api.mistral.ai/v1", ("MISTRAL_API_KEY",), 128_000),
    "openrouter": ProviderEndpoint("https://openrouter.ai/api/v1", ("OPENROUTER_API_KEY",), 128_000),
    "xai": ProviderEndpoint("https://api.x.ai/v1", ("XAI_API_KEY",), 128_000),
    "deepseek": ProviderEndpoint("https://api.deepseek.com/v1", ("DEEPSEEK_API_KEY",), 128_000),
    "together": ProviderEndpoint("https://api.together.xyz/v1", ("TOGETHER_API_KEY",), 128_000),
    "moonshot": ProviderEndpoint("https://api.moonshot.ai/v1", ("MOONSHOT_API_KEY",), 262_144),
    "github": ProviderEndpoint("https://models.github.ai/inference", ("GITHUB_TOKEN",), 128_000),
    "ollama": ProviderEndpoint("http://localhost:11434/v1", (), 8192, needs_key=False),
}
PROVIDER_ALIASES: Mapping[str, str] = {"gemini": "google", "grok": "xai", "githubmodels": "github"}
UNKNOWN_PROVIDER_WINDOW = 50_000


def _is_overflow(status: int, body: str) -> bool:
    """True when :func:`ctxrecover.classify.classify` reads a rejection as the request being too big."""
    return str(classify(status=status, body=body).kind) in OVERFLOW_KINDS


def _message_text(content: object) -> str:
    """Text of a chat message ``content``: a string or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _usage_count(usage: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


class HttpSummarizer:
    """A summarizer on any OpenAI-compatible ``POST {base_url}/chat/completions``.

    Sends the prompt as one user message and reads ``choices[0].message.content``
    and ``usage`` (``prompt_tokens``/``completion_tokens``; estimated at 4 chars per
    token when the server reports none). Cost = tokens × ``price_per_mtok_in/out``
    / 1e6. Timeouts, transport errors, HTTP errors and malformed answers raise
    :class:`SummarizerError`; a rejection that ``ctxrecover.classify`` reads as an
    overflow says the summarizer's request overflowed its own window. ``transport``
    is an httpx transport (``httpx.MockTransport`` in tests).

    >>> s = HttpSummarizer(base_url="http://127.0.0.1:1/v1", model="m", window_tokens=8192)
    >>> s.window_tokens
    8192
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        window_tokens: int = PROVIDER_ENDPOINTS["openai"].window_tokens,
        timeout: float = DEFAULT_SUMMARIZER_TIMEOUT_S,
        price_per_mtok_in: float = 0.0,
        price_per_mtok_out: float = 0.0,
        max_output_tokens: int | None = None,
        transport: httpx.BaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"HttpSummarizer base_url must be an http(s) URL, got {base_url!r}")
        if not model:
            raise ConfigError("HttpSummarizer needs a model name, e.g. model='gpt-4o-mini'")
        if not isinstance(window_tokens, int) or window_tokens <= 0:
            raise ConfigError(f"HttpSummarizer window_tokens must be > 0 tokens, got {window_tokens!r}")
        if timeout <= 0:
            raise ConfigError(f"HttpSummarizer timeout must be > 0 seconds, got {timeout!r}")
        if price_per_mtok_in < 0 or price_per_mtok_out < 0:
            raise ConfigError("HttpSummarizer prices are USD per million tokens and must be >= 0")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.window_tokens = window_tokens
        self.timeout = timeout
        self.price_per_mtok_in = price_per_mtok_in
        self.price_per_mtok_out = price_per_mtok_out
        self.max_output_tokens = max_output_tokens
        self.transport = transport
        self.headers = dict(headers or {})

    def __repr__(self) -> str:
        return f"HttpSummarizer(base_url={self.base_url!r}, model={self.model!r})"

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] = os.environ,
        *,
        window_tokens: int | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> HttpSummarizer | None:
        """The dedicated summarizer configured by the environment, or None when not configured.

        Variables:

        - ``CHATCLI_COMPACT_MODEL=provider:model`` (required; unset or blank → None);
        - base URL: ``CHATCLI_COMPACT_BASE_URL``, else ``OPENAI_BASE_URL`` for ``openai`` and
          unknown providers, else the provider's default (``PROVIDER_ENDPOINTS``);
        - key: ``CHATCLI_COMPACT_API_KEY``, else the provider's variable (``OPENAI_API_KEY``,
          ``GROQ_API_KEY``, …; ``OPENAI_API_KEY`` for unknown providers); ollama needs none;
        - window: ``window_tokens``, else ``CHATCLI_COMPACT_WINDOW``, else the provider fallback;
        - prices: ``CHATCLI_COMPACT_PRICE_IN`` / ``CHATCLI_COMPACT_PRICE_OUT`` (USD per million tokens).

        Raises :class:`ConfigError` naming the variable when a value is unusable.
        """
        spec = env.get(COMPACT_MODEL_ENV, "").strip()
        if not spec:
            return None
        provider, _, model = spec.partition(":")
        provider, model = provider.strip().lower(), model.strip()
        if not provider or not model:
            raise ConfigError(
                f"{COMPACT_MODEL_ENV} must be provider:model, e.g. openai:gpt-4o-mini; got {spec!r}"
            )
        provider = PROVIDER_ALIASES.get(provider, provider)
        endpoint = PROVIDER_ENDPOINTS.get(provider)
        base_url = env.get(COMPACT_BASE_URL_ENV, "").strip()
        if not base_url and (endpoint is None or provider == "openai"):
            base_url = env.get(OPENAI_BASE_URL_ENV, "").strip()
        if not base_url and endpoint is not None:
            base_url = endpoint.base_url
        if not base_url:
            raise ConfigError(
                f"{COMPACT_MODEL_ENV}={spec!r} names provider {provider!r} with no known endpoint: "
                f"set {COMPACT_BASE_URL_ENV} to its OpenAI-compatible base URL (e.g. http://host:8000/v1)"
            )
        key_names = (COMPACT_API_KEY_ENV, *(endpoint.key_env if endpoint else (OPENAI_API_KEY_ENV,)))
        api_key = next((env[name].strip() for name in key_names if env.get(name, "").strip()), None)
        needs_key = endpoint.needs_key if endpoint else False
        if api_key is None and needs_key and not env.get(COMPACT_BASE_URL_ENV, "").strip():
            raise ConfigError(f"{COMPACT_MODEL_ENV}={spec!r} needs an API key: set {' or '.join(key_names)}")
        if window_tokens is None:
            fallback_window = endpoint.window_tokens if endpoint else UNKNOWN_PROVIDER_WINDOW
            window_tokens = _env_int(env, COMPACT_WINDOW_ENV, fallback_window)
        return cls(
            base_url=base_url,
            model=model,
            api_key=api_key,
            window_tokens=window_tokens,
            price_per_mtok_in=_env_price(env, COMPACT_PRICE_IN_ENV),
            price_per_mtok_out=_env_price(env, COMPACT_PRICE_OUT_ENV),
            transport=transport,
        )

    def summarize(
        self,
        prompt: str,
        *,
        instruction: str | None = None,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
    ) -> SummaryResult:
        """One chat-completions call; ``instruction`` is already in ``prompt`` and not re-sent."""
        limit = self.timeout if timeout is None else min(timeout, self.timeout)
        if cancel is not None:
            cancel.raise_if_cancelled()
            remaining = cancel.remaining()
            if remaining is not None:
                limit = min(limit, remaining)
        try:
            return run_bounded(
                lambda: self._request(prompt, limit), timeout=limit, cancel=cancel, what="summarizer"
            )
        except (CompactionCancelled, SummarizerError):
            raise
        except TimeoutError as exc:
            raise SummarizerError(f"summarizer {self.model} timed out after {limit:g}s") from exc
        except Exception as exc:
            raise SummarizerError(f"summarizer {self.model} failed: {type(exc).__name__}: {exc}") from exc

    def _request(self, prompt: str, timeout: float) -> SummaryResult:
        import httpx

        body: dict[str, Any] = {"model": self.model, "messages": [{"role": "user", "content": prompt}]}
        if self.max_output_tokens is not None:
            body["max_tokens"] = self.max_output_tokens
        headers = {"Content-Type": "application/json", **self.headers}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            with httpx.Client(transport=self.transport, timeout=timeout) as client:
                response = client.post(f"{self.base_url}/chat/completions", json=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise SummarizerError(f"summarizer {self.model} timed out after {timeout:g}s") from exc
        except httpx.HTTPError as exc:
            raise SummarizerError(
                f"summarizer request to {self.base_url} failed: {type(exc).__name__}: {exc}"
            ) from exc
        if response.status_code >= 400:
            text = response.text
            if _is_overflow(response.status_code, text):
                raise SummarizerError(
                    f"summarizer request overflowed its own window (HTTP {response.status_code}, "
                    f"{len(prompt)} prompt chars, window {self.window_tokens} tokens): {excerpt(text)}"
                )
            raise SummarizerError(f"summarizer HTTP {response.status_code}: {excerpt(text)}")
        return self._parse(response.text, prompt)

    def _parse(self, raw: str, prompt: str) -> SummaryResult:
        try:
            data = json.loads(raw)
            message = data["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise SummarizerError(
                f"summarizer answer is not a chat completion (no choices[0].message): {excerpt(raw)}"
            ) from exc
        if not isinstance(message, dict):
            raise SummarizerError(f"summarizer answer has a malformed message: {excerpt(raw)}")
        text = _message_text(message.get("content")) or _message_text(message.get("refusal"))
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        input_tokens = _usage_count(usage, "prompt_tokens", "input_tokens")
        output_tokens = _usage_count(usage, "completion_tokens", "output_tokens")
        if input_tokens is None:
            input_tokens = math.ceil(len(prompt) / DEFAULT_CHARS_PER_TOKEN)
        if output_tokens is None:
            output_tokens = math.ceil(len(text) / DEFAULT_CHARS_PER_TOKEN)
        cost = (input_tokens * self.price_per_mtok_in + output_tokens * self.price_per_mtok_out) / 1_000_000
        model = data.get("model") if isinstance(data.get("model"), str) else self.model
        return SummaryResult(
            text=text, input_tokens=input_tokens, output_tokens=output_tokens, cost_usd=cost, model=model
        )


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {raw!r}")
    return value


def _env_price(env: Mapping[str, str], name: str) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name} must be a price in USD per million tokens (>= 0), got {raw!r}")
    return value
