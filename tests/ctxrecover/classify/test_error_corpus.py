"""Every labelled sample of fixtures/errors/ classifies as its label, with its status and from its body alone.

The corpus is split deterministically (sha256 of the id) into a tuning half and a
held-out half; ``-s`` prints recall per kind on each half, with status and
body-only, so memorised strings show up as a gap between the halves.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pytest

from ctxrecover.classify import Failure, FailureKind, classify
from ctxrecover.failure import EXPERIMENT_KINDS

CORPUS_DIR = Path(__file__).parents[3] / "fixtures" / "errors"
REQUIRED_FIELDS = ("id", "status", "body", "kind", "provider", "source")
OPTIONAL_FIELDS = ("headers", "history_chars", "request_bytes", "note", "needs_status")
# Issue 11's coverage minimums.
MIN_SAMPLES = 300
MIN_WAF, MIN_WAF_VENDORS, MIN_WAF_STATUSES = 40, 10, 4
MIN_OVERFLOW, MIN_OVERFLOW_PROVIDERS = 60, 15
MIN_HARD_NEGATIVES = 50
MIN_RECALL = 0.97
# Errors compaction must never answer: reading one as overflow/payload/WAF is a dangerous misread.
HARD_NEGATIVE_KINDS = frozenset(
    {
        FailureKind.AUTH,
        FailureKind.RATE_LIMIT,
        FailureKind.BILLING,
        FailureKind.OUTPUT_LIMIT,
        FailureKind.OTHER,
    }
)
COMPACTING_KINDS = frozenset(
    {
        FailureKind.CONTEXT_OVERFLOW,
        FailureKind.PAYLOAD_TOO_LARGE,
        FailureKind.WAF_REJECTION,
        FailureKind.SUSPECTED_PAYLOAD,
    }
)
# Kinds read from a successful body or from the history size: the body alone always stands.
BODY_KINDS = frozenset({FailureKind.OK, FailureKind.OUTPUT_TRUNCATED})


def _load_corpus() -> list[dict[str, object]]:
    samples: list[dict[str, object]] = []
    for path in sorted(CORPUS_DIR.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        assert isinstance(data, list), f"{path.name}: the top level must be a list of samples"
        for index, sample in enumerate(data):
            missing = [f for f in REQUIRED_FIELDS if f not in sample]
            assert not missing, f"{path.name}[{index}]: missing field(s) {missing}"
            unknown = set(sample) - set(REQUIRED_FIELDS) - set(OPTIONAL_FIELDS)
            assert not unknown, f"{path.name}[{index}] ({sample['id']}): unknown field(s) {sorted(unknown)}"
            samples.append(sample)
    return samples


CORPUS = _load_corpus()
BODY_ONLY = [s for s in CORPUS if not s.get("needs_status")]


def held_out(sample: dict[str, object]) -> bool:
    """The deterministic split: half of the ids (by sha256) are held out."""
    return hashlib.sha256(str(sample["id"]).encode()).digest()[0] % 2 == 1


def _with_status(sample: dict[str, object]) -> Failure:
    return classify(
        status=sample["status"],  # type: ignore[arg-type]
        body=sample["body"],  # type: ignore[arg-type]
        headers=sample.get("headers"),  # type: ignore[arg-type]
        request_bytes=sample.get("request_bytes"),  # type: ignore[arg-type]
        history_chars=sample.get("history_chars"),  # type: ignore[arg-type]
    )


def _body_only(sample: dict[str, object]) -> Failure:
    """The text alone, as it arrives inside an exception string or a log line: no status, no headers."""
    return classify(body=sample["body"], history_chars=sample.get("history_chars"))  # type: ignore[arg-type]


@pytest.mark.parametrize("sample", CORPUS, ids=[str(s["id"]) for s in CORPUS])
def test_sample_classifies_as_labelled(sample: dict[str, object]) -> None:
    failure = _with_status(sample)
    assert failure.kind == FailureKind(sample["kind"]), f"{sample['id']}: evidence {failure.evidence!r}"
    if failure.kind is FailureKind.OUTPUT_TRUNCATED:
        assert failure.stop_reason, f"{sample['id']}: a truncated response names its stop reason"


@pytest.mark.parametrize("sample", BODY_ONLY, ids=[str(s["id"]) for s in BODY_ONLY])
def test_sample_text_alone_classifies_as_labelled(sample: dict[str, object]) -> None:
    failure = _body_only(sample)
    assert failure.kind == FailureKind(sample["kind"]), f"{sample['id']}: evidence {failure.evidence!r}"


def test_samples_that_need_their_status_say_why() -> None:
    for sample in CORPUS:
        if sample.get("needs_status"):
            assert sample["needs_status"] is True and sample["status"] is not None, sample["id"]
            assert FailureKind(sample["kind"]) not in BODY_KINDS, sample["id"]
            assert str(sample.get("note", "")).strip(), f"{sample['id']}: needs_status without a note"


def test_sample_ids_are_unique_and_sources_named() -> None:
    ids = [s["id"] for s in CORPUS]
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]
    assert all(isinstance(s["source"], str) and s["source"].strip() for s in CORPUS)
    bodies = [(s["status"], s["body"], s.get("history_chars")) for s in CORPUS if s["body"]]
    assert len(bodies) == len(set(bodies)), [b for b, n in Counter(bodies).items() if n > 1][:3]


def _recall(samples: Iterable[dict[str, object]], read) -> dict[str, tuple[int, int]]:  # type: ignore[no-untyped-def]
    hits: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    for sample in samples:
        totals[str(sample["kind"])] += 1
        hits[str(sample["kind"])] += read(sample).kind == FailureKind(sample["kind"])
    return {kind: (hits[kind], totals[kind]) for kind in totals}


def test_recall_per_kind_on_tuning_and_held_out_halves() -> None:
    halves = {"tuning": [s for s in CORPUS if not held_out(s)], "held-out": list(filter(held_out, CORPUS))}
    rows = []
    for half, samples in halves.items():
        status = _recall(samples, _with_status)
        body = _recall([s for s in samples if not s.get("needs_status")], _body_only)
        for kind in FailureKind:
            s_hit, s_tot = status.get(kind, (0, 0))
            b_hit, b_tot = body.get(kind, (0, 0))
            rows.append(f"{half:<9} {kind:<18} {s_hit:>3}/{s_tot:<3} status  {b_hit:>3}/{b_tot:<3} body-only")
    print("\nrecall per kind (tuning / held-out halves)\n" + "\n".join(rows))
    for read, samples in ((_with_status, CORPUS), (_body_only, BODY_ONLY)):
        for kind, (hit, total) in _recall(samples, read).items():
            assert hit / total >= MIN_RECALL, f"{kind}: {hit}/{total} with {read.__name__}"


def test_no_dangerous_misreads() -> None:
    """0 auth, rate-limit, billing, output-limit or parameter errors read as overflow, payload or WAF."""
    negatives = [s for s in CORPUS if FailureKind(s["kind"]) in HARD_NEGATIVE_KINDS]
    readings = [(s["id"], "status", _with_status(s)) for s in negatives]
    readings += [(s["id"], "body-only", _body_only(s)) for s in negatives if not s.get("needs_status")]
    misreads = [(sample, mode, f.kind) for sample, mode, f in readings if f.kind in COMPACTING_KINDS]
    print(f"\ndangerous misreads: {len(misreads)} of {len(readings)} hard-negative readings")
    assert not misreads


def test_corpus_meets_the_coverage_minimums() -> None:
    counts = Counter(str(s["kind"]) for s in CORPUS)
    waf = [s for s in CORPUS if s["kind"] == "waf_rejection"]
    overflow = [s for s in CORPUS if s["kind"] == "context_overflow"]
    negatives = [s for s in CORPUS if FailureKind(s["kind"]) in HARD_NEGATIVE_KINDS]
    waf_vendors = {s["provider"] for s in waf}
    waf_statuses = {s["status"] for s in waf if s["status"] is not None}
    overflow_providers = {s["provider"] for s in overflow}
    width = max(len(k) for k in FailureKind)
    table = "\n".join(f"{kind:<{width}}  {counts.get(kind, 0):>4}" for kind in FailureKind)
    print(
        f"\nerror corpus: {len(CORPUS)} samples ({len(BODY_ONLY)} also body-only)\n{table}\n"
        f"waf: {len(waf)} samples, {len(waf_vendors)} vendors, statuses {sorted(waf_statuses)}\n"
        f"overflow: {len(overflow)} samples, {len(overflow_providers)} providers/servers\n"
        f"hard negatives: {len(negatives)}"
    )
    # policy_block is decided by the turn's experiments, never by one answer
    classified = {str(k) for k in FailureKind if k not in EXPERIMENT_KINDS}
    assert set(counts) == classified, classified ^ set(counts)
    assert len(CORPUS) >= MIN_SAMPLES
    assert len(waf) >= MIN_WAF and len(waf_vendors) >= MIN_WAF_VENDORS
    assert len(waf_statuses) >= MIN_WAF_STATUSES
    assert len(overflow) >= MIN_OVERFLOW and len(overflow_providers) >= MIN_OVERFLOW_PROVIDERS
    assert len(negatives) >= MIN_HARD_NEGATIVES


def test_history_size_decides_between_suspected_payload_and_transient() -> None:
    network = [s for s in CORPUS if s["kind"] in ("suspected_payload", "transient_network")]
    assert any(s.get("history_chars", 0) >= 500_000 for s in network if s["kind"] == "suspected_payload")
    assert all("history_chars" in s for s in CORPUS if s["kind"] == "suspected_payload")


def test_recorded_request_size_becomes_rejected_bytes() -> None:
    sized = [s for s in CORPUS if "request_bytes" in s]
    assert sized
    for sample in sized:
        assert _with_status(sample).rejected_bytes == sample["request_bytes"]


def test_output_limits_state_their_cap_when_the_text_does() -> None:
    limits = [(s["id"], _with_status(s)) for s in CORPUS if s["kind"] == "output_limit"]
    assert limits
    stated = [f.output_limit_tokens for _, f in limits if f.output_limit_tokens is not None]
    assert len(stated) >= len(limits) * 0.8, [i for i, f in limits if f.output_limit_tokens is None]
