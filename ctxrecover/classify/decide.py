"""What happened with this exchange? One typed answer (SPEC §2).

``classify`` is the single place where foreign failures become data. It takes
whatever is known — status, body (text, bytes or parsed JSON), headers, the
exception (httpx/httpx2/httpcore errors, ``openai``/``anthropic`` SDK errors,
OS errors, read by duck typing through ``__cause__``/``__context__``), the size
of the rejected request and of the history — and returns a :class:`Failure`.
It never raises: anything unexpected while reading the inputs yields
``kind=other`` with the reason in ``evidence``. It is a one-way pipeline:
:func:`~ctxrecover.classify.evidence.gather` reads every input once into a frozen
:class:`~ctxrecover.classify.evidence.Evidence`, then :func:`decide` maps that value
to a :class:`Failure` without reading anything else.

Rules, first match wins (phrases and shapes are data in :mod:`~ctxrecover.classify.tables` and
:mod:`~ctxrecover.classify.fingerprints`; "status" below is the status, or one the text states)::

    successful body      -> ok | output_truncated   (stop-reason table, §2.6)
    402, credits/billing -> billing       (a quota asking to retry in seconds stays a rate limit)
    429/529, rate words  -> rate_limit    (even if the text says "Request too large")
    truncation wording   -> output_truncated
    431 or header-size wording -> payload_too_large, reason header_431 (SPEC §11)
    body-size phrases/shapes   -> payload_too_large (win over overflow phrases, §2.5)
    413 status, its reason phrase or a standalone "413" token
                         -> payload_too_large, unless the text names tokens/context/prompt
                            with an overflow wording: then context_overflow (§2.1 row)
    407, proxy credentials -> auth
    gateway retry page   -> transient_network: 502/503/504 (or no status) without a provider's JSON,
                            empty or worded as an upstream fault, no strong block signal (retrypage.py)
    403 gate + signal    -> waf_rejection (403 without a signal falls to auth)
    block page/sentence  -> waf_rejection at any other status but 401/407 (blockpage.py)
    pairing phrases      -> malformed_history
    no 4xx status        -> timeouts: transient_network; EOF/reset (unless the text names an
                            overflow): suspected_payload (history >= 500 000 chars) else transient
    output parameter over its limit, or an output budget >= the window -> output_limit
    overflow phrases or subject + excess clause -> context_overflow
    content-policy wording -> other
    401/403/407          -> auth;  404, "does not exist" -> other;  key words -> auth
    408/5xx, server-fault words -> transient_network
    2xx                  -> ok, else other

``context_limit_tokens`` is the window an overflow or an output limit states;
``output_limit_tokens`` the cap an output limit states (or window − input).
Header *values* are never searched for WAF signals (OpenAI's own responses carry
``cf-ray``); headers give the content type, WAF marker headers and identities.
Backticks are dropped before matching, so ``tool_use`` and `` `tool_use` `` match alike.

>>> classify(status=413, body="<html>413 Request Entity Too Large</html>").reason
'payload_413'
>>> classify(status=429, body="Request too large for gpt-4o on tokens per min (TPM)").kind
<FailureKind.RATE_LIMIT: 'rate_limit'>
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ctxrecover.classify.blockpage import read_block
from ctxrecover.classify.evidence import Evidence, gather, http_status
from ctxrecover.classify.identify import identify
from ctxrecover.classify.retrypage import retry_page
from ctxrecover.classify.tables import (
    AUTH_PHRASES,
    AUTH_STATUSES,
    BILLING_STATUSES,
    CONTENT_POLICY_PHRASES,
    CONTENT_REFUSAL_STOP_REASONS,
    CONTEXT_OVERFLOW_PHRASES,
    EOF_RESET_CLASSES,
    EOF_RESET_PHRASES,
    EOF_WORD,
    GO_EOF_SUFFIX,
    HEADER_REASON,
    HEADER_STATUS,
    HTML_AS_JSON_PHRASES,
    MALFORMED_HISTORY_PHRASES,
    NETWORK_MODULE_ROOTS,
    NOT_FOUND_PHRASES,
    NOT_FOUND_STATUS,
    OUTPUT_TRUNCATED_CLASSES,
    OUTPUT_TRUNCATION_STOP_REASONS,
    OVERFLOW_SUBJECT_413,
    PAYLOAD_REASON_PHRASES,
    PAYLOAD_STATUSES,
    PROXY_AUTH_PHRASES,
    PROXY_AUTH_STATUS,
    RATE_LIMIT_PHRASES,
    RATE_LIMIT_STATUSES,
    RATE_LIMIT_WORDS,
    REASONS,
    SERVER_FAULT_PHRASES,
    SUCCESS_SHAPE_KEYS,
    SUCCESS_WIRE_PROVIDERS,
    SUSPECTED_PAYLOAD_HISTORY_CHARS,
    TIMEOUT_CLASSES,
    TIMEOUT_PHRASES,
    TRANSIENT_NETWORK_CLASSES,
    TRANSIENT_NETWORK_PHRASES,
    TRANSIENT_STATUSES,
    WAF_GATE_PHRASES,
    WAF_SIGNAL_HEADERS,
    WAF_SIGNAL_PHRASES,
    WAF_SIGNAL_WORDS,
)
from ctxrecover.classify.wording import (
    billing_wording,
    budget,
    context_window,
    find,
    find_word,
    header_wording,
    output_limit_wording,
    output_truncated_wording,
    overflow_wording,
    payload_wording,
    stated_input_tokens,
    stated_output_limit,
)
from ctxrecover.failure import PAYLOAD_KINDS, Failure, FailureKind
from ctxrecover.sizes import format_payload_size

__all__ = ["Failure", "FailureKind", "classify", "decide"]

# -- public values -----------------------------------------------------------------------------


# -- successful responses (§2.6) ---------------------------------------------------------------


def _values_at(doc: object, path: str) -> list[object]:
    current: list[object] = [doc]
    for part in path.split("."):
        is_list = part.endswith("[]")
        key = part[:-2] if is_list else part
        nxt: list[object] = []
        for node in current:
            value = node.get(key) if isinstance(node, Mapping) else None
            if is_list and isinstance(value, list | tuple):
                nxt.extend(value)
            elif not is_list and value is not None:
                nxt.append(value)
        current = nxt
    return current


def content_refusal(document: object) -> str | None:
    """The provider's own refusal in a successful answer (SPEC §12), as ``wire path = value``, or None.

    >>> content_refusal({"choices": [{"finish_reason": "content_filter"}]})
    "openai-chat choices[].finish_reason = 'content_filter'"
    """
    for wire, path, values in CONTENT_REFUSAL_STOP_REASONS:
        for found in _values_at(document, path):
            if isinstance(found, str) and found and (not values or found in values):
                return f"{wire} {path} = {found!r}"
    return None


def refused(refusal: str) -> Failure:
    """The ``content_refused`` failure of a :func:`content_refusal` (its provider, its stop reason)."""
    wire = refusal.split(" ", 1)[0]
    return Failure(
        FailureKind.CONTENT_REFUSED,
        provider=SUCCESS_WIRE_PROVIDERS.get(wire, wire.split("-", 1)[0]),
        evidence=refusal,
        stop_reason=refusal.rpartition("= ")[2].strip("'"),
    )


def _success_outcome(x: Evidence) -> Failure | None:
    """ok / output_truncated / content_refused when the body is a provider's successful response."""
    mappings = x.body_objects
    if not mappings or x.body_is_error:
        return None
    for doc in mappings:
        refusal = content_refusal(doc)
        if refusal is not None:
            return refused(refusal)
    stop: tuple[str, str] | None = None  # (stop reason, wire)
    truncated: tuple[str, str, str] | None = None  # (stop reason, wire, evidence)
    for doc in mappings:
        for wire, path, value in OUTPUT_TRUNCATION_STOP_REASONS:
            for found in _values_at(doc, path):
                if isinstance(found, str):
                    stop = stop or (found, wire)
                    if found == value and truncated is None:
                        truncated = (found, wire, f"{wire} {path} = {found!r}")
    if truncated:
        return Failure(
            FailureKind.OUTPUT_TRUNCATED,
            provider=SUCCESS_WIRE_PROVIDERS.get(truncated[1]),
            evidence=truncated[2],
            stop_reason=truncated[0],
        )
    if stop is not None or any(k in d for d in mappings for k in SUCCESS_SHAPE_KEYS):
        return Failure(
            FailureKind.OK,
            provider=SUCCESS_WIRE_PROVIDERS.get(stop[1]) if stop else None,
            evidence="successful response",
            stop_reason=stop[0] if stop else None,
        )
    return None


# -- matching ----------------------------------------------------------------------------------


def _class_hit(x: Evidence, names: tuple[str, ...]) -> str | None:
    return next((n for n, root in x.classes if n in names and root in NETWORK_MODULE_ROOTS), None)


def _network_kind(x: Evidence, large_history_chars: int) -> tuple[FailureKind, str] | None:
    """Timeouts, dropped connections, unreachable hosts; a drop whose text names an overflow is one."""
    text, history_chars = x.text, x.history_chars
    hit = _class_hit(x, TIMEOUT_CLASSES) or find(text, TIMEOUT_PHRASES)
    if hit:
        return FailureKind.TRANSIENT_NETWORK, hit
    if find(text, CONTEXT_OVERFLOW_PHRASES):  # "stream error: ... your input exceeds the context window"
        return None
    hit = _class_hit(x, EOF_RESET_CLASSES) or find(text, EOF_RESET_PHRASES)
    if hit is None and EOF_WORD.search(text) and "request" not in text:
        hit = "eof"
    if hit is None and GO_EOF_SUFFIX.search(text):
        hit = ": eof"
    if hit:
        if history_chars >= large_history_chars:
            return FailureKind.SUSPECTED_PAYLOAD, f"{hit} + history {history_chars} chars"
        return FailureKind.TRANSIENT_NETWORK, hit
    hit = _class_hit(x, TRANSIENT_NETWORK_CLASSES) or find(text, TRANSIENT_NETWORK_PHRASES)
    return (FailureKind.TRANSIENT_NETWORK, hit) if hit else None


_413_SUBJECT = re.compile(OVERFLOW_SUBJECT_413)


@dataclass(frozen=True, slots=True)
class _Verdict:
    kind: FailureKind
    evidence: str
    header: bool = False  # a payload verdict about the request's headers (reason header_431)


def _waf_signal(x: Evidence, text: str, block: str | None) -> str | None:
    """A security signal behind a 403 (SPEC §2.3), the block reading included."""
    return (
        find(text, WAF_SIGNAL_PHRASES)
        or find_word(text, WAF_SIGNAL_WORDS)
        or find(text, HTML_AS_JSON_PHRASES)
        or next((h for h in WAF_SIGNAL_HEADERS if h in x.headers), None)
        or block
        or ("html body" if x.is_html else None)
    )


def _decide(x: Evidence, large_history_chars: int) -> _Verdict:
    """The rules of SPEC §2 in order, first match wins (see the module docstring)."""
    status, text = x.status, x.text
    said = status if status is not None else x.stated_status  # a status stated in the text counts as one
    billing = billing_wording(text)
    if said in BILLING_STATUSES or billing:
        return _Verdict(FailureKind.BILLING, billing or f"status {said}")
    if said in RATE_LIMIT_STATUSES:
        return _Verdict(FailureKind.RATE_LIMIT, f"status {said}")
    rate = find(text, RATE_LIMIT_PHRASES) or find_word(text, RATE_LIMIT_WORDS)
    if rate and said not in AUTH_STATUSES:
        return _Verdict(FailureKind.RATE_LIMIT, rate)
    truncated = _class_hit(x, OUTPUT_TRUNCATED_CLASSES) or output_truncated_wording(text)
    if truncated:
        return _Verdict(FailureKind.OUTPUT_TRUNCATED, truncated)

    if status == HEADER_STATUS:
        return _Verdict(FailureKind.PAYLOAD_TOO_LARGE, f"status {status}", header=True)
    payload = payload_wording(text)
    if payload:
        return _Verdict(FailureKind.PAYLOAD_TOO_LARGE, payload)
    header = header_wording(text) or ("status 431" if said == HEADER_STATUS else None)
    if header and status not in PAYLOAD_STATUSES:
        return _Verdict(FailureKind.PAYLOAD_TOO_LARGE, header, header=True)
    status_level = f"status {said}" if said in PAYLOAD_STATUSES else find(text, PAYLOAD_REASON_PHRASES)
    if status_level:
        # A 413 naming tokens/context/prompt is the model's window, not a byte cap.
        overflow = overflow_wording(text, _413_SUBJECT) if _413_SUBJECT.search(text) else None
        if overflow:
            return _Verdict(FailureKind.CONTEXT_OVERFLOW, overflow)
        return _Verdict(FailureKind.PAYLOAD_TOO_LARGE, status_level)

    proxy_auth = f"status {said}" if said == PROXY_AUTH_STATUS else find(text, PROXY_AUTH_PHRASES)
    if proxy_auth:
        return _Verdict(FailureKind.AUTH, proxy_auth)
    reading = read_block(x)
    retry = retry_page(x, reading)
    if retry:  # a gateway's own "upstream failed, retry" page: never a block, nor a drop at a large history
        return _Verdict(FailureKind.TRANSIENT_NETWORK, retry)
    forbidden = said == 403 or (status is None and bool(find(text, WAF_GATE_PHRASES)))
    if forbidden:
        signal = _waf_signal(x, text, reading.block)
        if signal:
            return _Verdict(FailureKind.WAF_REJECTION, signal)
    elif reading.block and said not in AUTH_STATUSES and (reading.strong or not reading.fault):
        return _Verdict(FailureKind.WAF_REJECTION, reading.block)

    malformed = find(text, MALFORMED_HISTORY_PHRASES)
    if malformed:
        return _Verdict(FailureKind.MALFORMED_HISTORY, malformed)
    if status is None or status < 400 or status in TRANSIENT_STATUSES:  # a 200 stream can still drop
        network = _network_kind(x, large_history_chars)
        if network:
            return _Verdict(*network)
    # Stated numbers decide: an output budget that alone fills the window is an output limit; input + output
    # over the window is the input's overflow (SPEC §2.1 "max_tokens" + "exceed"): compaction makes room.
    split = budget(text)
    output_limit = output_limit_wording(text)
    if split and split.output_never_fits:
        return _Verdict(FailureKind.OUTPUT_LIMIT, f"output {split.output} >= window {split.window}")
    if output_limit and (split is None or split.input < split.window):
        return _Verdict(FailureKind.OUTPUT_LIMIT, output_limit)
    overflow = overflow_wording(text) if said not in AUTH_STATUSES else None
    if overflow:
        return _Verdict(FailureKind.CONTEXT_OVERFLOW, overflow)
    policy = find(text, CONTENT_POLICY_PHRASES)
    if policy:
        return _Verdict(FailureKind.OTHER, f"content policy: {policy}")
    if said in AUTH_STATUSES:
        return _Verdict(FailureKind.AUTH, f"status {said}")
    if forbidden:
        return _Verdict(FailureKind.AUTH, "403 without WAF signals")
    missing = f"status {said}" if said == NOT_FOUND_STATUS else find(text, NOT_FOUND_PHRASES)
    if missing:
        return _Verdict(FailureKind.OTHER, missing)
    auth = find(text, AUTH_PHRASES)
    if auth:
        return _Verdict(FailureKind.AUTH, auth)
    if said in TRANSIENT_STATUSES:
        return _Verdict(FailureKind.TRANSIENT_NETWORK, f"status {said}")
    server_fault = find(text, SERVER_FAULT_PHRASES) if status is None or status >= 500 else None
    if server_fault:
        return _Verdict(FailureKind.TRANSIENT_NETWORK, server_fault)
    if status is not None and status < 400:
        return _Verdict(FailureKind.OK, f"status {status}")
    if status is None and not x.has_error and not text.strip():
        return _Verdict(FailureKind.OTHER, "nothing to classify")
    return _Verdict(FailureKind.OTHER, f"status {status}" if status else "no known signal")


_WINDOW_KINDS = frozenset({FailureKind.CONTEXT_OVERFLOW, FailureKind.OUTPUT_LIMIT})


def _output_cap(text: str) -> int | None:
    """The output cap an output-limit text states, or the room its budget leaves (window − input)."""
    split = budget(text)
    if split is not None and split.input < split.window:
        return split.window - split.input
    return stated_output_limit(text)


def decide(x: Evidence, *, large_history_chars: int = SUSPECTED_PAYLOAD_HISTORY_CHARS) -> Failure:
    """The :class:`Failure` the evidence shows (SPEC §2); reads ``x`` only, gathers nothing.

    ``large_history_chars`` is the history size from which a dropped connection is a suspected
    payload limit (SPEC §2.4: 500 000; ``Policy.suspected_payload_history_chars``)."""
    if not x.has_error and (x.status is None or x.status < 400):
        success = _success_outcome(x)
        if success is not None:
            provider = success.provider or identify(x, "").provider
            return dataclasses.replace(success, provider=provider, status=x.status)
    verdict = _decide(x, large_history_chars)
    kind, text = verdict.kind, x.text
    named = identify(x)
    provider = named.provider or named.middlebox
    if kind is FailureKind.WAF_REJECTION:
        provider = read_block(x).vendor or named.middlebox or provider
    elif kind in PAYLOAD_KINDS and named.middlebox:
        provider = named.middlebox
    reason, reason_text = HEADER_REASON if verdict.header else REASONS.get(kind, (None, None))
    if kind is FailureKind.SUSPECTED_PAYLOAD and reason_text:
        reason_text = reason_text % format_payload_size(x.history_chars)
    rejected = None if kind in (FailureKind.OK, FailureKind.OUTPUT_TRUNCATED) else x.request_bytes
    return Failure(
        kind,
        reason=reason,
        reason_text=reason_text,
        provider=provider,
        status=x.status,
        rejected_bytes=rejected,
        evidence=verdict.evidence,
        context_limit_tokens=context_window(text) if kind in _WINDOW_KINDS else None,
        output_limit_tokens=_output_cap(text) if kind is FailureKind.OUTPUT_LIMIT else None,
        input_tokens=stated_input_tokens(text) if kind is FailureKind.CONTEXT_OVERFLOW else None,
    )


def classify(
    error: BaseException | None = None,
    *,
    status: int | None = None,
    body: str | bytes | Mapping[str, object] | list[object] | None = None,
    headers: Mapping[str, str] | None = None,
    request_bytes: int | None = None,
    history_chars: int | None = None,
    large_history_chars: int = SUSPECTED_PAYLOAD_HISTORY_CHARS,
) -> Failure:
    """Classify one exchange (SPEC §2); never raises.

    ``body`` is text, bytes or parsed JSON; ``error`` any exception (its cause
    chain is read too). ``request_bytes`` is the size of the request that failed
    (becomes ``rejected_bytes``); ``history_chars`` decides whether an EOF/reset
    is a suspected payload limit (at ``large_history_chars`` or more: 500 000 by
    default, a session passes ``Policy.suspected_payload_history_chars``) or a
    transient network failure.
    If reading the inputs fails, the result is ``kind=other`` naming the error.

    >>> classify(status=400, body={"error": {"code": "context_length_exceeded"}}).kind
    <FailureKind.CONTEXT_OVERFLOW: 'context_overflow'>
    """
    try:
        evidence = gather(error, status, body, headers, request_bytes, history_chars)
        return decide(evidence, large_history_chars=large_history_chars)
    except Exception as exc:  # the documented fallback: a classifier must never mask the real failure
        unclassifiable = f"unclassifiable: {type(exc).__name__}"
        return Failure(FailureKind.OTHER, status=http_status(status), evidence=unclassifiable)
