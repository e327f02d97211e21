"""Estimate a gateway's body cap with synthetic requests, by bisection.

:func:`probe_body_cap` assumes a body of ``low`` bytes passes and one of ``high`` bytes is
refused, and halves the interval until it is no wider than ``resolution``: at most
``⌈log2((high - low) / resolution)⌉`` requests (:func:`max_requests`). Each probe is a
synthetic request of the exact size in a provider's wire format (:func:`synthetic_body`), for
a model that does not exist (``ctxsim-probe``), so a provider behind the gateway answers a cheap
error instead of running a prompt; what counts is whether the *gateway* let it through
(:func:`~simulator.proxy.pagebook.is_gateway_refusal`). The sending is injected: :class:`HttpProbe`
posts over HTTP; tests pass any ``send(size) -> ProbeStep``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import httpx

from simulator.proxy.journal import page_fingerprint, page_title
from simulator.proxy.pagebook import is_gateway_refusal, known_page
from simulator.proxy.redact import redact_text

__all__ = [
    "HttpProbe",
    "ProbeError",
    "ProbeResult",
    "ProbeStep",
    "max_requests",
    "probe_body_cap",
    "synthetic_body",
]

PROBE_MODEL = "ctxsim-probe"
# The smallest valid request of each wire format with an empty prompt; the prompt pads it to size.
TEMPLATES: Mapping[str, dict[str, Any]] = MappingProxyType(
    {
        "openai-chat": {"model": PROBE_MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": ""}]},
        "openai-responses": {"model": PROBE_MODEL, "max_output_tokens": 16, "input": ""},
        "anthropic": {"model": PROBE_MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": ""}]},
        "gemini": {
            "contents": [{"role": "user", "parts": [{"text": ""}]}],
            "generationConfig": {"maxOutputTokens": 1},
        },
        "bedrock-converse": {
            "messages": [{"role": "user", "content": [{"text": ""}]}],
            "inferenceConfig": {"maxTokens": 1},
        },
    }
)
PAD = "x"


class ProbeError(ValueError):
    """The probe cannot go on (the gateway rate-limits, the URL is unreachable, bad bounds)."""


@dataclass(frozen=True, slots=True)
class ProbeStep:
    """One probe: the body size sent and what came back (``refused`` by the gateway or not)."""

    size: int
    refused: bool
    status: int | None
    what: str
    elapsed_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """The cap lies in ``(passed, refused]``: the largest size let through and the smallest refused."""

    low: int
    high: int
    resolution: int
    passed: int
    refused: int
    steps: tuple[ProbeStep, ...]

    @property
    def found(self) -> bool:
        """Whether probes both passed and were refused (else the cap is outside [low, high])."""
        return any(s.refused for s in self.steps) and any(not s.refused for s in self.steps)

    @property
    def estimate(self) -> int:
        """The middle of the interval where the cap lies."""
        return (self.passed + self.refused) // 2


def max_requests(low: int, high: int, resolution: int) -> int:
    """The most requests bisecting [low, high] down to ``resolution`` needs: ⌈log2(range / resolution)⌉."""
    return max(0, math.ceil(math.log2((high - low) / resolution))) if high - low > resolution else 0


def probe_body_cap(send: Callable[[int], ProbeStep], *, low: int, high: int, resolution: int) -> ProbeResult:
    """Bisect [low, high] with ``send(size)`` until the cap's interval is ``resolution`` wide or less."""
    if not 0 < low < high:
        raise ProbeError(f"expected 0 < low < high, got low={low:,} and high={high:,}")
    if resolution < 1:
        raise ProbeError(f"resolution must be at least 1 byte, got {resolution}")
    passed, refused, steps = low, high, []
    while refused - passed > resolution:
        size = (passed + refused) // 2
        step = send(size)
        steps.append(step)
        if step.refused:
            refused = size
        else:
            passed = size
    return ProbeResult(low, high, resolution, passed, refused, tuple(steps))


def synthetic_body(fmt: str, size: int) -> bytes:
    """A valid request of wire format ``fmt`` of exactly ``size`` bytes (the prompt pads it)."""
    if fmt not in TEMPLATES:
        raise ProbeError(f"unknown format {fmt!r}; valid formats: {', '.join(TEMPLATES)}")
    template = json.dumps(TEMPLATES[fmt], separators=(",", ":"))
    smallest = len(template.encode())
    if size < smallest:
        raise ProbeError(f"a {fmt} probe body has at least {smallest} bytes, asked for {size}")
    body = template.replace('""', json.dumps(PAD * (size - smallest)), 1).encode()
    assert len(body) == size
    return body


class HttpProbe:
    """Posts synthetic bodies to ``url`` and says whether the gateway refused them."""

    def __init__(
        self,
        url: str,
        *,
        fmt: str,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
        client: httpx.Client | None = None,
    ) -> None:
        self.url, self.fmt = url, fmt
        self.headers = {"content-type": "application/json", **(headers or {})}
        self.client = client or httpx.Client(trust_env=False, timeout=timeout_s)

    def __call__(self, size: int) -> ProbeStep:
        started = time.monotonic()
        try:
            body = synthetic_body(self.fmt, size)
            response = self.client.post(self.url, content=body, headers=self.headers)
        except (httpx.ConnectError, httpx.UnsupportedProtocol) as error:
            raise ProbeError(redact_text(f"cannot reach {self.url}: {error}")) from None
        except httpx.TransportError as error:  # dropped or silent: the gateway refused this size
            return ProbeStep(
                size,
                True,
                None,
                f"{type(error).__name__} (connection dropped or no answer)",
                (time.monotonic() - started) * 1000,
            )
        elapsed = (time.monotonic() - started) * 1000
        if response.status_code == 429:
            raise ProbeError(f"rate limited (429) at {size:,} bytes; wait, then probe a narrower range")
        fingerprint = page_fingerprint(response.content, host=response.url.host, path=response.url.path)
        content_type = response.headers.get("content-type", "")
        refused = is_gateway_refusal(response.status_code, content_type, fingerprint, dropped=False)
        page = known_page(response.status_code, fingerprint)
        title = page.name + " page" if page else page_title(response.content) or content_type
        what = f"{response.status_code} {title}".strip()
        return ProbeStep(size, refused, response.status_code, what, elapsed)

    def close(self) -> None:
        self.client.close()
