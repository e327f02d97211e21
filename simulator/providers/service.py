"""One mock API host: several mock providers behind one base URL, plus the host's model list.

A real host serves more than one endpoint: ``api.openai.com`` answers Chat Completions,
Responses and ``GET /v1/models``. :class:`MockService` routes each request by its path to
the :class:`~simulator.providers.mock.MockProvider` of that wire format and answers the
model list in the host's own shape; it is a plain ``handler(request) -> httpx.Response``.

>>> service = MockService.for_host("openai", context_window=128_000)
>>> client = httpx.Client(transport=httpx.MockTransport(service))
>>> client.get("http://mock/v1/models").json()["object"]
'list'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import httpx

from simulator.providers.mock import PATH_HINTS, MockProvider, ProviderCall, format_for_path
from simulator.providers.prices import PRICES
from simulator.providers.wire import json_response

__all__ = ["HOSTS", "MockService"]

CREATED_EPOCH = 1_700_000_000
MODELS_CREATED_AT = "2025-01-01T00:00:00Z"
# Each host: the wire formats it serves and the prefix of its model ids (its models are the
# priced families with that prefix, simulator.providers.prices.PRICES).
HOSTS: Mapping[str, tuple[tuple[str, ...], str]] = MappingProxyType(
    {
        "openai": (("openai-chat", "openai-responses"), "gpt-"),
        "openai-chat": (("openai-chat",), "gpt-"),
        "openai-responses": (("openai-responses",), "gpt-"),
        "anthropic": (("anthropic",), "claude-"),
        "gemini": (("gemini",), "gemini-"),
        "bedrock-converse": (("bedrock-converse",), ""),
    }
)


def _openai_models(models: Sequence[str], window: int) -> dict[str, Any]:
    """``GET /v1/models`` of OpenAI: ``{"object": "list", "data": [{id, object, created, owned_by}]}``."""
    return {
        "object": "list",
        "data": [
            {"id": m, "object": "model", "created": CREATED_EPOCH, "owned_by": "ctxsim"} for m in models
        ],
    }


def _anthropic_models(models: Sequence[str], window: int) -> dict[str, Any]:
    """``GET /v1/models`` of Anthropic: ``{"data": [{type, id, display_name, created_at}], has_more, …}``."""
    data = [{"type": "model", "id": m, "display_name": m, "created_at": MODELS_CREATED_AT} for m in models]
    return {
        "data": data,
        "has_more": False,
        "first_id": models[0] if models else None,
        "last_id": models[-1] if models else None,
    }


def _gemini_models(models: Sequence[str], window: int) -> dict[str, Any]:
    """``GET /v1beta/models`` of Gemini: ``{"models": [{name: "models/…", inputTokenLimit, …}]}``."""
    return {
        "models": [
            {
                "name": f"models/{m}",
                "version": "001",
                "displayName": m,
                "inputTokenLimit": window,
                "supportedGenerationMethods": ["generateContent", "streamGenerateContent"],
            }
            for m in models
        ]
    }


# (path suffix of the model list, its renderer) per wire format.
MODEL_LISTS: Mapping[str, tuple[str, Callable[[Sequence[str], int], dict[str, Any]]]] = MappingProxyType(
    {
        "openai-chat": ("/models", _openai_models),
        "openai-responses": ("/models", _openai_models),
        "anthropic": ("/v1/models", _anthropic_models),
        "gemini": ("/models", _gemini_models),
    }
)


class MockService:
    """Mock providers behind one base URL, routed by path, with the host's model list.

    ``providers`` are :class:`MockProvider` instances of distinct formats; ``models`` are
    the ids ``GET …/models`` lists (and ``GET …/models/{id}`` finds). A path no provider
    serves gets a 404 in the first provider's error format naming every served endpoint.
    """

    def __init__(self, providers: Iterable[MockProvider], *, models: Sequence[str] = ()) -> None:
        self.providers: dict[str, MockProvider] = {}
        for provider in providers:
            if provider.format in self.providers:
                raise ValueError(f"MockService got two {provider.format} providers; give one per format")
            self.providers[provider.format] = provider
        if not self.providers:
            raise ValueError("MockService needs at least one MockProvider")
        self.models = tuple(models)
        self._first = next(iter(self.providers.values()))

    @classmethod
    def for_host(
        cls, host: str, *, context_window: int, seed: int = 0, keep_calls: int | None = None
    ) -> MockService:
        """The mock of one host of :data:`HOSTS` (``openai`` serves Chat Completions and Responses)."""
        if host not in HOSTS:
            raise ValueError(f"unknown mock host {host!r}; valid hosts: {', '.join(HOSTS)}")
        formats, prefix = HOSTS[host]
        models = sorted(family for family in PRICES if prefix and family.startswith(prefix))
        return cls(
            [
                MockProvider(fmt, context_window=context_window, seed=seed, keep_calls=keep_calls)
                for fmt in formats
            ],
            models=models,
        )

    @property
    def call_count(self) -> int:
        """Calls answered by every provider (model lists not counted)."""
        return sum(provider.call_count for provider in self.providers.values())

    @property
    def calls(self) -> list[ProviderCall]:
        """The calls each provider still keeps, provider by provider."""
        return [call for provider in self.providers.values() for call in provider.calls]

    def endpoints(self) -> list[str]:
        """Every endpoint served, as ``METHOD /path`` hints."""
        hints = [PATH_HINTS[fmt] for fmt in self.providers]
        lists = {MODEL_LISTS[fmt][0] for fmt in self.providers if fmt in MODEL_LISTS}
        return hints + [f"GET …{suffix}" for suffix in sorted(lists)]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        fmt = format_for_path(path)
        if fmt in self.providers:
            return self.providers[fmt](request)
        if request.method == "GET":
            listed = self._model_list(path)
            if listed is not None:
                return listed
        message = f"ctxsim mock serves {', '.join(self.endpoints())}; got {request.method} {path}"
        return self._first.wire.error(message, status=404)

    def _model_list(self, path: str) -> httpx.Response | None:
        for fmt, provider in self.providers.items():
            if fmt not in MODEL_LISTS:
                continue
            suffix, render = MODEL_LISTS[fmt]
            document = render(self.models, provider.context_window)
            if path.endswith(suffix):
                return json_response(200, document)
            head, _, model = path.rpartition("/")
            if head.endswith(suffix) and model in self.models:
                return json_response(200, _one_model(document, model))
        return None


def _one_model(document: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The entry of ``model`` (known to be listed) in a rendered model list (``GET …/models/{id}``)."""
    entries = document.get("data") or document.get("models") or []
    return next(dict(e) for e in entries if model in (e.get("id"), e.get("name", "").removeprefix("models/")))
