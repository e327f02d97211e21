"""Every labelled sample of fixtures/errors/ classifies as its label."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from ctxrecover.classify import FailureKind, classify

CORPUS_DIR = Path(__file__).parents[3] / "fixtures" / "errors"
REQUIRED_FIELDS = ("id", "status", "body", "kind", "provider", "source")
OPTIONAL_FIELDS = ("headers", "history_chars", "request_bytes", "note")
MIN_SAMPLES = 60


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


def _classify_sample(sample: dict[str, object]):
    return classify(
        status=sample["status"],  # type: ignore[arg-type]
        body=sample["body"],  # type: ignore[arg-type]
        headers=sample.get("headers"),  # type: ignore[arg-type]
        request_bytes=sample.get("request_bytes"),  # type: ignore[arg-type]
        history_chars=sample.get("history_chars"),  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("sample", CORPUS, ids=[str(s["id"]) for s in CORPUS])
def test_sample_classifies_as_labelled(sample: dict[str, object]) -> None:
    failure = _classify_sample(sample)
    assert failure.kind == FailureKind(sample["kind"]), f"{sample['id']}: evidence {failure.evidence!r}"
    if failure.kind is FailureKind.OUTPUT_TRUNCATED:
        assert failure.stop_reason, f"{sample['id']}: a truncated response names its stop reason"


def test_sample_ids_are_unique_and_sources_named() -> None:
    ids = [s["id"] for s in CORPUS]
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]
    assert all(isinstance(s["source"], str) and s["source"].strip() for s in CORPUS)


def test_corpus_is_large_and_covers_every_kind() -> None:
    counts = Counter(str(s["kind"]) for s in CORPUS)
    width = max(len(k) for k in FailureKind)
    table = "\n".join(f"{kind:<{width}}  {counts.get(kind, 0):>4}" for kind in FailureKind)
    print(f"\nerror corpus: {len(CORPUS)} samples\n{table}")
    assert len(CORPUS) >= MIN_SAMPLES
    assert set(counts) == {str(k) for k in FailureKind}, set(map(str, FailureKind)) - set(counts)


def test_history_size_decides_between_suspected_payload_and_transient() -> None:
    network = [s for s in CORPUS if s["kind"] in ("suspected_payload", "transient_network")]
    assert any(s.get("history_chars", 0) >= 500_000 for s in network if s["kind"] == "suspected_payload")
    assert all("history_chars" in s for s in CORPUS if s["kind"] == "suspected_payload")


def test_recorded_request_size_becomes_rejected_bytes() -> None:
    sized = [s for s in CORPUS if "request_bytes" in s]
    assert sized
    for sample in sized:
        assert _classify_sample(sample).rejected_bytes == sample["request_bytes"]
