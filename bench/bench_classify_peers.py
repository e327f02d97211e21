"""Q1 — classification quality: ctxrecover's ``classify`` beside LiteLLM's ``exception_type`` mapping.

Both read the same labelled error corpus (``fixtures/errors/*.json``, every sample a
real published payload) twice: with the status and headers, and from the body
alone (the text as it arrives in an exception string). Successful responses (``ok``,
``output_truncated``) are left out: ``exception_type`` maps errors only.

LiteLLM gets what a client would hand it: an exception carrying ``status_code``,
``message`` (the body) and an ``httpx.Response`` with the headers, and the
provider the sample names when LiteLLM knows it (``openai`` otherwise: every
OpenAI-compatible gateway). The class it raises is read as a kind
(:data:`LITELLM_KINDS`); a kind LiteLLM has no class for (WAF, payload, output
limit, malformed history) can only be missed, and the table says so.

Without LiteLLM (``pip install -e ".[peers]"``) only ctxrecover is scored and the
peer is reported skipped, with the reason. ``LITELLM_LOCAL_MODEL_COST_MAP=True``
is set before the import, so LiteLLM never reaches the network. Run it with
``python bench/bench_classify_peers.py`` (writes ``bench/results_classify.json``);
``run()`` returns the measures.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ctxrecover.classify import FailureKind, classify

BENCH_DIR = Path(__file__).resolve().parent
CORPUS_DIR = BENCH_DIR.parent / "fixtures" / "errors"
RESULTS_JSON = BENCH_DIR / "results_classify.json"
SKIPPED = "skipped: LiteLLM is not installed (pip install -e .[peers])"
NOTE = (
    "ctxrecover's tables were tuned on this corpus: its own-corpus recall is not a generalisation measure. "
    "The blind measurements (held-out half before tuning, 40 samples collected after the freeze) are in "
    "fixtures/errors/README.md and tests/ctxrecover/classify/test_error_corpus.py."
)
SUCCESS_KINDS = frozenset({FailureKind.OK.value, FailureKind.OUTPUT_TRUNCATED.value})
COMPACTING_KINDS = frozenset({"context_overflow", "payload_too_large", "waf_rejection", "suspected_payload"})
HARD_NEGATIVE_KINDS = frozenset({"auth", "rate_limit", "billing", "output_limit", "other"})
# LiteLLM exception class -> the kind it means. Classes not listed read as "other".
LITELLM_KINDS: dict[str, str] = {
    "ContextWindowExceededError": "context_overflow",
    "AuthenticationError": "auth",
    "PermissionDeniedError": "auth",
    "CallerCredentialAuthenticationError": "auth",
    "RateLimitError": "rate_limit",
    "CallerCredentialRateLimitError": "rate_limit",
    "PaymentRequiredError": "billing",
    "BudgetExceededError": "billing",
    "Timeout": "transient_network",
    "APIConnectionError": "transient_network",
    "ServiceUnavailableError": "transient_network",
    "InternalServerError": "transient_network",
    "BadGatewayError": "transient_network",
}
# Kinds LiteLLM has no exception class for.
NO_LITELLM_CLASS = (
    "payload_too_large",
    "waf_rejection",
    "suspected_payload",
    "malformed_history",
    "output_limit",
)
# The corpus' provider names -> LiteLLM's custom_llm_provider; anything else is "openai" (OpenAI-compatible).
LITELLM_PROVIDERS: dict[str, str] = {
    "openai": "openai",
    "azure": "azure",
    "anthropic": "anthropic",
    "bedrock": "bedrock",
    "vertex": "vertex_ai",
    "gemini": "gemini",
    "mistral": "mistral",
    "groq": "groq",
    "openrouter": "openrouter",
    "together": "together_ai",
    "tgi": "huggingface",
    "huggingface": "huggingface",
    "ollama": "ollama",
    "vllm": "vllm",
    "cohere": "cohere_chat",
    "deepseek": "deepseek",
    "xai": "xai",
    "replicate": "replicate",
}


def load_corpus(limit: int | None = None) -> list[dict[str, Any]]:
    """The error samples of the corpus (successful responses left out), in file order."""
    samples = [
        s
        for path in sorted(CORPUS_DIR.glob("*.json"))
        for s in json.loads(path.read_text(encoding="utf-8"))
        if s["kind"] not in SUCCESS_KINDS
    ]
    return samples[:limit] if limit is not None else samples


def ctxrecover_kind(sample: dict[str, Any], with_status: bool) -> str:
    """ctxrecover's reading of one sample."""
    if with_status:
        return classify(
            status=sample["status"],
            body=sample["body"],
            headers=sample.get("headers"),
            history_chars=sample.get("history_chars"),
        ).kind.value
    return classify(body=sample["body"], history_chars=sample.get("history_chars")).kind.value


def _litellm_reader() -> Callable[[dict[str, Any], bool], str]:
    """LiteLLM's reading of one sample, or ImportError when LiteLLM is absent."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import httpx
        import litellm
        from litellm.litellm_core_utils.exception_mapping_utils import exception_type
    litellm.suppress_debug_info = True

    class ProviderError(Exception):
        """What an HTTP client raises for an error answer: status, message, response."""

        def __init__(self, message: str, status_code: int | None, headers: dict[str, str] | None) -> None:
            super().__init__(message)
            self.message = message
            if status_code is not None:
                self.status_code = status_code
                request = httpx.Request("POST", "https://api.example.com/v1/chat/completions")
                self.response = httpx.Response(
                    status_code, headers=headers or {}, text=message, request=request
                )
                self.request = request

    def read(sample: dict[str, Any], with_status: bool) -> str:
        status = sample["status"] if with_status else None
        headers = sample.get("headers") if with_status else None
        error = ProviderError(sample["body"], status, headers)
        provider = LITELLM_PROVIDERS.get(str(sample.get("provider") or "").lower(), "openai")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                exception_type(model="gpt-4o", original_exception=error, custom_llm_provider=provider)
            except Exception as mapped:  # exception_type always raises the mapped exception
                return LITELLM_KINDS.get(type(mapped).__name__, "other")
        return "other"

    return read


def _recall(samples: Iterable[dict[str, Any]], read: Callable[[dict[str, Any]], str]) -> dict[str, Any]:
    hits: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    dangerous = 0
    for sample in samples:
        kind, got = sample["kind"], read(sample)
        totals[kind] += 1
        hits[kind] += got == kind
        dangerous += kind in HARD_NEGATIVE_KINDS and got in COMPACTING_KINDS
    per_kind = {
        k: {"hits": hits[k], "total": totals[k], "recall": round(hits[k] / totals[k], 3)} for k in totals
    }
    total = sum(totals.values())
    return {
        "overall": round(sum(hits.values()) / total, 3) if total else 0.0,
        "dangerous_misreads": dangerous,
        "per_kind": dict(sorted(per_kind.items())),
    }


def run(limit: int | None = None) -> dict[str, Any]:
    """Score ctxrecover and (when installed) LiteLLM on the corpus, with status and body-only."""
    samples = load_corpus(limit)
    body_only = [s for s in samples if not s.get("needs_status")]
    result: dict[str, Any] = {"samples": len(samples), "body_only_samples": len(body_only)}
    result["ctxrecover"] = {
        "with_status": _recall(samples, lambda s: ctxrecover_kind(s, True)),
        "body_only": _recall(body_only, lambda s: ctxrecover_kind(s, False)),
    }
    try:
        read = _litellm_reader()
    except ImportError:
        result["litellm"] = {"status": SKIPPED}
        return result
    result["litellm"] = {
        "version": importlib.metadata.version("litellm"),
        "with_status": _recall(samples, lambda s: read(s, True)),
        "body_only": _recall(body_only, lambda s: read(s, False)),
        "kinds_without_a_class": list(NO_LITELLM_CLASS),
    }
    return result


def _recalls(scored: dict[str, Any], kind: str) -> tuple[float, float]:
    if "with_status" not in scored:
        return float("nan"), float("nan")
    per_mode = (scored[mode]["per_kind"].get(kind, {}) for mode in ("with_status", "body_only"))
    status, body = (entry.get("recall", 0.0) for entry in per_mode)
    return status, body


def table(result: dict[str, Any]) -> str:
    """Recall per kind, side by side (status / body-only), then the overall figures."""
    ours, peer = result["ctxrecover"], result["litellm"]
    lines = [f"{'kind':<18} {'n':>4}  ctxrecover status/body   litellm status/body"]
    for kind, entry in ours["with_status"]["per_kind"].items():
        (a, b), (c, d) = _recalls(ours, kind), _recalls(peer, kind)
        lines.append(f"{kind:<18} {entry['total']:>4}  {a:>8.1%} / {b:<8.1%}   {c:>8.1%} / {d:<8.1%}")
    for name, scored in (("ctxrecover", ours), ("litellm", peer)):
        if "with_status" not in scored:
            lines.append(f"{name}: {scored['status']}")
            continue
        status, body = scored["with_status"], scored["body_only"]
        lines.append(
            f"{name:<18} overall {status['overall']:.1%} / {body['overall']:.1%}, "
            f"dangerous misreads {status['dangerous_misreads']} / {body['dangerous_misreads']}"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    result = run()
    result["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    result["note"] = NOTE
    RESULTS_JSON.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
