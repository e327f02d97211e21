"""Reproduce a recorded gateway offline: a ``--record`` file becomes a scenario whose faults do the same.

:func:`load_recording` reads what ``ctxsim proxy --record FILE`` wrote; :func:`infer_scenario`
groups the exchanges by what the gateway did (passed them, answered a page — named when it is
a bundled one —, dropped the connection, stayed silent, cut the answer) and explains each group
by the simplest trigger that fits every observation:

- the request head's size (a 431 header cap),
- a size band of the body: every body above a threshold (up to the next band) got it and none
  below did — the threshold is the roundest number between the largest body that passed and
  the smallest that did not (``128 KiB`` rather than ``131,000``),
- else the turns it happened on (``from_turn``/``until_turn`` per run of turns).

The faults are then replayed in process over the same sizes and turns (:func:`verify`) and the
scenario says how many recorded outcomes it reproduces. :func:`scenario_toml` writes it in the
format of ``fixtures/scenarios/*.toml`` (loadable by :func:`~simulator.proxy.scenario.load_scenario`).
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx

from ctxrecover.classify import classify
from ctxrecover.sizes import format_payload_size
from simulator.providers.mock import format_for_path
from simulator.proxy.fault_base import ConnectionFault, Fault, Forward, Respond
from simulator.proxy.fault_specs import ScenarioError, fault_fields
from simulator.proxy.faults import (
    FAULT_KINDS,
    BodyCap,
    CloseAfterBody,
    CutStream,
    GatewayTimeout,
    HeaderCap,
    IdleTimeout,
    RateLimit429,
    ResetAfter,
    StatusPage,
    header_bytes,
)
from simulator.proxy.journal import RECORD_FORMAT, page_fingerprint, page_title
from simulator.proxy.middlebox import Middlebox
from simulator.proxy.pagebook import KnownPage, is_gateway_refusal, known_page

__all__ = [
    "Inference",
    "Observed",
    "RecordingError",
    "infer_scenario",
    "load_recording",
    "roundest",
    "scenario_toml",
    "verify",
]

PASS, DROP, SILENCE, CUT = "pass", "dropped", "silence", "cut"
DROP_OUTCOMES = {
    "upstream-reset": "reset",
    "reset-after": "reset",
    "upstream-closed": "close",
    "close-after-body": "close",
    "slow-close": "close",
}
SILENCE_OUTCOMES = frozenset({"upstream-timeout", "idle-timeout"})
CUT_OUTCOMES = frozenset({"upstream-cut", "cut-stream"})
# Candidate thresholds, roundest first: binary and decimal sizes, large to small.
UNITS = tuple(
    sorted({2**k for k in range(31)} | {m * 10**k for k in range(10) for m in (1, 2, 5)}, reverse=True)
)
VERIFY_HOST = "gateway.example"
# The workload of an inferred scenario with a size threshold: a generated history this many times the
# threshold, so its requests pass it and the replay meets the gateway's answer (then recovers).
WORKLOAD_REACH = 2
# How a replay ends when the first refusal it meets is read as this kind: compaction recovers a size
# refusal (a transient one after one plain retry, SPEC §11), a rate limit is never compacted, and any
# other kind surfaces to the caller uncompacted.
RUN_OUTCOMES = MappingProxyType(
    {
        "payload_too_large": "recovered",
        "waf_rejection": "recovered",
        "suspected_payload": "recovered",
        "transient_network": "recovered",
        "context_overflow": "recovered",
        "rate_limit": "no_compaction",
    }
)
WORKLOAD_MIN_BYTES = 16 * 1024
PAD_HEADER = "x-ctxsim-pad"  # pads a replayed request head to its recorded size


class RecordingError(ScenarioError):
    """A record file that cannot be read (the message names the file and line)."""


@dataclass(frozen=True, slots=True)
class Observed:
    """One recorded exchange, as far as the gateway's behaviour goes."""

    line: int
    turn: int
    path: str
    size: int
    head_bytes: int
    outcome: str
    status: int | None
    content_type: str = ""
    title: str = ""
    fingerprint: str = ""
    body: str | None = None
    retry_after: int | None = None
    elapsed_ms: float = 0.0
    response_bytes: int = 0
    server: str = ""

    @property
    def group(self) -> str:
        """What the gateway did: ``pass``, ``dropped``, ``silence``, ``cut`` or ``STATUS:FINGERPRINT``."""
        if self.outcome in DROP_OUTCOMES:
            return DROP
        if self.outcome in SILENCE_OUTCOMES:
            return SILENCE
        if self.outcome in CUT_OUTCOMES:
            return CUT
        if is_gateway_refusal(self.status, self.content_type, self.fingerprint, dropped=False):
            page = self.page
            return f"{self.status}:{page.identity if page is not None else self.fingerprint}"
        return PASS

    @property
    def page(self) -> KnownPage | None:
        """The bundled page this answer is, from its shape (status, fingerprint, title, type, length)."""
        return known_page(
            self.status,
            self.fingerprint,
            title=self.title,
            content_type=self.content_type,
            length=self.response_bytes,
            server=self.server,
        )


def _int(entry: dict[str, Any], *keys: str, default: int | None = None) -> int | None:
    value: Any = entry
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _observed(entry: dict[str, Any], line: int) -> Observed:
    request, response = entry.get("request") or {}, entry.get("response") or {}
    headers = {str(k).lower(): str(v) for k, v in response.get("headers") or []}
    retry_after = headers.get("retry-after", "")
    body = response.get("body") or {}
    size = _int(request, "content_length")
    return Observed(
        line,
        _int(entry, "turn", default=0) or 0,
        str(entry.get("path", "")),
        size if size is not None else _int(request, "body_bytes", default=0) or 0,
        _int(request, "head_bytes", default=0) or 0,
        str(entry.get("outcome", "")),
        _int(entry, "status"),
        str(response.get("content_type", "")),
        str(response.get("title", "")),
        str(response.get("fingerprint", "")),
        body.get("text") if isinstance(body, dict) else None,
        int(retry_after) if retry_after.isdigit() else None,
        float((entry.get("timings") or {}).get("elapsed_ms") or 0.0),
        _int(response, "body_bytes", default=0) or 0,
        headers.get("server", ""),
    )


def load_recording(path: Path) -> tuple[dict[str, Any], list[Observed]]:
    """The header line and the exchanges of a ``--record`` file (RecordingError naming file:line)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise RecordingError(f"{path}: cannot read the record file: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise RecordingError(f"{path}: not UTF-8 text; expected a ctxsim proxy --record file") from None
    header: dict[str, Any] = {}
    observed: list[Observed] = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            entry = json.loads(text)
        except json.JSONDecodeError as error:
            raise RecordingError(f"{path}:{number}: not JSON ({error.msg})") from None
        if not isinstance(entry, dict):
            raise RecordingError(f"{path}:{number}: each line must be a JSON object")
        if entry.get("format") == RECORD_FORMAT:
            header = entry
        elif "outcome" in entry and "request" in entry:
            observed.append(_observed(entry, number))
        else:
            raise RecordingError(
                f"{path}:{number}: not an exchange of a ctxsim proxy --record file "
                "(it needs outcome and request)"
            )
    if not observed:
        raise RecordingError(f"{path}: no exchanges recorded; send requests through ctxsim proxy --record")
    return header, observed


def roundest(low: int, high: int) -> int:
    """The roundest integer ``c`` with ``low <= c < high`` (binary or decimal sizes first)."""
    for unit in UNITS:
        candidate = math.ceil(low / unit) * unit
        if low <= candidate < high:
            return candidate
    return low


@dataclass(slots=True)
class Inference:
    """An inferred gateway: its faults (each with the evidence), and how many outcomes they reproduce."""

    faults: list[tuple[Fault, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reproduced: int = 0
    total: int = 0
    format: str = "openai-chat"
    reach: int | None = None  # the largest size threshold: a replay must send bodies over it


def _fault_for(
    group: str,
    members: Sequence[Observed],
    threshold: int | None,
    turns: tuple[int, int] | None,
    min_bytes: int = 0,
) -> tuple[Fault, str]:
    """The fault that gives ``members``' outcome, gated by a size ``threshold`` or a run of ``turns``."""
    gate: dict[str, Any] = {}
    if turns is not None:
        gate = {"from_turn": turns[0], "until_turn": turns[1]}
        if min_bytes:
            gate["min_bytes"] = min_bytes
    above = 0 if threshold is None else threshold + 1
    first = members[0]
    if group == DROP:
        resets = sum(DROP_OUTCOMES[m.outcome] == "reset" for m in members)
        if resets * 2 >= len(members):
            return ResetAfter(n_bytes=threshold or 0, **gate), "the connection was reset"
        return CloseAfterBody(min_bytes=above or min_bytes, **gate), "the connection closed without an answer"
    if group == SILENCE:
        wait = max(1.0, round(statistics.median(m.elapsed_ms for m in members) / 1000, 1))
        return IdleTimeout(delay_s=wait, min_bytes=above or min_bytes, **gate), "no answer came"
    if group == CUT:
        cut = int(statistics.median(m.response_bytes for m in members))
        return CutStream(n_bytes=cut, min_bytes=above or min_bytes, **gate), f"answers cut after ~{cut:,} B"
    page = first.page
    if page is not None:
        named: dict[str, Any] = {page.field: page.name} if page.field else {}
        if page.kind == "body-cap":
            cap = BodyCap(limit=max(threshold or 0, 1), **named, **gate)
            return cap, f"{page.title} page"
        if page.kind == "timeout":
            wait = max(0.1, round(statistics.median(m.elapsed_ms for m in members) / 1000, 1))
            timeout = GatewayTimeout(delay_s=wait, **named, min_bytes=above or min_bytes, **gate)
            return timeout, f"{page.title} page"
        cls = FAULT_KINDS[page.kind]
        return cls(**named, min_bytes=above or min_bytes, **gate), f"{page.title or page.name} page"
    status = first.status or 500
    if status == 429:
        retry = first.retry_after or 20
        limited = RateLimit429(retry_after=retry, min_bytes=above or min_bytes, **gate)
        return limited, f"429, retry after {retry} s"
    if first.response_bytes == 0:  # an empty page is a fact, whether bodies were recorded or not
        body, kind = "", first.content_type
    else:
        body = (
            first.body
            if first.body is not None
            else (
                f"(page not recorded: {first.title or first.content_type or 'status ' + str(status)}; "
                "record with --record-bodies to reproduce it)"
            )
        )
        kind = first.content_type or "text/plain; charset=utf-8"
    what = f"{status} {first.title or first.content_type}".strip() + " page"
    return StatusPage(status=status, body=body, content_type=kind, min_bytes=above or min_bytes, **gate), what


def _bands(observed: Sequence[Observed], groups: set[str]) -> list[tuple[str, list[Observed]]]:
    """Runs of one group along the body size, over the observations of ``groups`` and ``pass``."""
    ranked = sorted((o for o in observed if o.group in groups or o.group == PASS), key=lambda o: o.size)
    bands: list[tuple[str, list[Observed]]] = []
    for o in ranked:
        if bands and bands[-1][0] == o.group and bands[-1][1][-1].size <= o.size:
            bands[-1][1].append(o)
        else:
            bands.append((o.group, [o]))
    return bands


def _size_groups(observed: Sequence[Observed], candidates: set[str]) -> list[tuple[str, list[Observed]]]:
    """The groups explained by size bands (pass lowest, one band each, no ties), lowest band first."""
    groups = set(candidates)
    while groups:
        bands = _bands(observed, groups)
        counts = Counter(group for group, _ in bands)
        broken = {g for g in groups if counts[g] > 1}
        seen_refusal: set[str] = set()
        for group, _ in bands:
            if group == PASS:
                broken |= seen_refusal
            else:
                seen_refusal.add(group)
        sizes = [(o.size, o.group) for _, members in bands for o in members]
        broken |= {
            g
            for (s1, g1), (s2, g2) in zip(sizes, sizes[1:], strict=False)
            if s1 == s2 and g1 != g2
            for g in (g1, g2)
            if g != PASS
        }
        if not broken:
            return [(g, m) for g, m in bands if g != PASS]
        groups -= broken
    return []


def _turn_runs(observed: Sequence[Observed], group: str) -> Iterable[tuple[tuple[int, int], list[Observed]]]:
    """Runs of consecutive recorded turns that all had ``group``'s outcome."""
    turns = sorted({o.turn for o in observed})
    hits = {o.turn for o in observed if o.group == group}
    run: list[int] = []
    for turn in [*turns, None]:
        if turn is not None and turn in hits:
            run.append(turn)
            continue
        if run:
            yield (run[0], run[-1]), [o for o in observed if o.group == group and run[0] <= o.turn <= run[-1]]
        run = []


def infer_scenario(observed: Sequence[Observed], *, fmt: str | None = None, seed: int = 0) -> Inference:
    """The faults that reproduce ``observed`` (see the module docstring), verified by :func:`verify`."""
    inference = Inference(total=len(observed))
    paths = Counter(format_for_path(o.path) for o in observed)
    paths.pop(None, None)
    common = paths.most_common(1)[0][0] if paths else None
    inference.format = fmt or common or "openai-chat"
    refusals = {o.group for o in observed} - {PASS}
    header_group = next((g for g in refusals if g.startswith("431:")), None)
    if header_group is not None:
        members = [o for o in observed if o.group == header_group]
        others = [o.head_bytes for o in observed if o.group != header_group]
        low, high = max(others, default=0), min(o.head_bytes for o in members)
        if low < high:
            limit = max(roundest(low, high), 1)
            seen = f"{len(members)} seen, {high:,}–{max(o.head_bytes for o in members):,} B"
            evidence = f"431 for request heads over {limit:,} B ({seen})"
            inference.faults.append((HeaderCap(limit=limit), evidence))
            refusals.discard(header_group)
    sized = _size_groups([o for o in observed if o.group != header_group], refusals)
    by_turn = sorted(refusals - {g for g, _ in sized})
    for group in by_turn:
        for (first, last), members in _turn_runs(observed, group):
            others = [o.size for o in observed if first <= o.turn <= last and o.group != group]
            floor = min(o.size for o in members)
            min_bytes = floor if others and max(others) < floor else 0
            fault, what = _fault_for(group, members, None, (first, last), min_bytes)
            turns = f"turn {first}" if first == last else f"turns {first}–{last}"
            inference.faults.append((fault, f"{what} on {turns} ({len(members)} seen)"))
    previous = max((o.size for o in observed if o.group == PASS), default=0)
    size_faults: list[tuple[Fault, str]] = []
    for group, members in sized:
        smallest, largest = min(o.size for o in members), max(o.size for o in members)
        threshold = roundest(previous, smallest)
        fault, what = _fault_for(group, members, threshold, None)
        size_faults.append(
            (
                fault,
                f"{what} for bodies over {threshold:,} B "
                f"({format_payload_size(threshold)}): {len(members)} seen of "
                f"{smallest:,}–{largest:,} B; the limit lies in "
                f"[{previous:,}, {smallest:,}) B (ctxsim probe narrows it)",
            )
        )
        previous = largest
        inference.reach = threshold
    inference.faults.extend(reversed(size_faults))  # highest band first: the first fault that fires wins
    predictions = verify([fault for fault, _ in inference.faults], observed, seed=seed)
    inference.reproduced = sum(o.group == predicted for o, predicted in predictions)
    for o, predicted in predictions:
        if o.group != predicted:
            inference.notes.append(
                f"line {o.line} (turn {o.turn}, {o.size:,} B): recorded "
                f"{_describe(o.group)}, the scenario gives {_describe(predicted)}"
            )
    return inference


def _describe(group: str) -> str:
    return group if ":" not in group else f"status {group.split(':')[0]} (page {group.split(':')[1]})"


def verify(
    faults: Sequence[Fault], observed: Sequence[Observed], *, seed: int = 0
) -> list[tuple[Observed, str]]:
    """Decide each recorded exchange anew with ``faults`` (in process): ``(observed, predicted group)``."""
    box = Middlebox(None, faults, seed=seed)
    predictions = []
    for o in observed:
        url = f"http://{VERIFY_HOST}{o.path.partition('?')[0]}"
        request = httpx.Request("POST", url, content=b"x" * o.size)
        padding = o.head_bytes - header_bytes(request) - len(PAD_HEADER) - 4  # "name: value\r\n"
        if padding > 0:
            request.headers[PAD_HEADER] = "p" * padding
        predictions.append((o, _group_of(box.decide(request, o.turn), request)))
    return predictions


def _group_of(decision: Forward | Respond | ConnectionFault, request: httpx.Request) -> str:
    if isinstance(decision, Forward):
        return CUT if decision.cut_after is not None else PASS
    if isinstance(decision, ConnectionFault):
        return SILENCE if isinstance(decision, IdleTimeout) else DROP
    fingerprint = page_fingerprint(decision.body, host=request.url.host, path=request.url.path)
    content_type = dict(decision.headers).get("content-type", "")
    if is_gateway_refusal(decision.status, content_type, fingerprint, dropped=False):
        page = known_page(
            decision.status,
            fingerprint,
            title=page_title(decision.body),
            content_type=content_type,
            length=len(decision.body),
            server=dict(decision.headers).get("server", ""),
        )
        return f"{decision.status}:{page.identity if page is not None else fingerprint}"
    return PASS


# -- writing the scenario ------------------------------------------------------------------


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)  # a JSON string is a valid TOML basic string


def scenario_toml(inference: Inference, *, source: str, upstream: str = "") -> str:
    """The scenario as TOML in the format of ``fixtures/scenarios/*.toml``."""
    where = f" with {upstream}" if upstream else ""
    kinds = ", ".join(dict.fromkeys(fault.kind for fault, _ in inference.faults)) or "no fault"
    description = (
        f"Inferred by ctxsim infer from {source}: {inference.total} recorded exchanges{where}; "
        f"the gateway shows {kinds}."
    )
    lines = [
        f"# Inferred by ctxsim infer from {source}.",
        f"# It reproduces {inference.reproduced} of {inference.total} recorded outcomes (status and "
        "page, a dropped connection, a silence).",
        *(f"# differs: {note}" for note in inference.notes),
        f"description = {_toml_value(description)}",
        "seed = 0",
        "",
        "[provider]",
        f"format = {_toml_value(inference.format)}",
        "",
    ]
    for fault, evidence in inference.faults:
        lines += [f"# {evidence}", "[[fault]]"]
        lines += [f"{name} = {_toml_value(value)}" for name, value in fault_fields(fault).items()]
        lines.append("")
    if inference.reach is not None:
        history = max(WORKLOAD_MIN_BYTES, inference.reach * WORKLOAD_REACH)
        lines += [
            f"# A workload whose requests grow past the largest size threshold ({inference.reach:,} B).",
            "[workload]",
            'transcript = "generated"',
            f'history_bytes = "{history}B"',
            "",
        ]
    outcome, failure = _expectation(inference)
    lines += [
        "# [expect] is a guess from the recorded failures: check it before ctxsim run uses it.",
        "[expect]",
        f"outcome = {_toml_value(outcome)}",
    ]
    if failure is not None:
        lines.append(f"failure_kind = {_toml_value(failure)}")
    return "\n".join(lines) + "\n"


def _expectation(inference: Inference) -> tuple[str, str | None]:
    """The guessed ``[expect]``: what ctxrecover reads the first refusal the replay meets as.

    The first refusal of a growing history is the lowest size band's fault (the last one listed);
    when it answers with a page, ``ctxrecover.classify`` says its kind, as the session will.
    """
    kinds = {fault.kind for fault, _ in inference.faults}
    if inference.reach is not None:
        first = inference.faults[-1][0]
        request = httpx.Request("POST", f"http://{VERIFY_HOST}/v1/chat/completions", content=b"{}")
        decision = first.action(request, {"host": VERIFY_HOST, "path": "/v1/chat/completions"})
        if isinstance(decision, Respond):
            failure = classify(status=decision.status, body=decision.text, headers=dict(decision.headers))
            kind = failure.kind.value
            return RUN_OUTCOMES.get(kind, "no_compaction"), kind
    if kinds & {"body-cap", "header-cap"}:
        return "recovered", "payload_too_large"
    if kinds & {"waf-403-html", "bedrock-html-403"}:
        return "recovered", "waf_rejection"
    if kinds & {"reset-after", "close-after-body"}:
        return "recovered", "suspected_payload"
    if "rate-limit-429" in kinds:
        return "no_compaction", "rate_limit"
    return "ok", None
