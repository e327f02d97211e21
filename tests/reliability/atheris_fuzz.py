"""Coverage-guided fuzzing of the input parsers with atheris (optional; not part of the pytest run).

The hypothesis suite (test_fuzz.py) runs by default; this harness is for longer,
coverage-guided runs. It needs ``pip install atheris`` (a binary wheel on Linux x86-64)::

    python tests/reliability/atheris_fuzz.py transcripts -atheris_runs=200000
    python tests/reliability/atheris_fuzz.py sizes -max_total_time=60

Extra arguments go to libFuzzer; a directory argument is a corpus it reads and grows,
so seed the transcript target with a copy of the bundled fixtures
(``cp -r fixtures/transcripts /tmp/corpus`` then pass ``/tmp/corpus``): raw bytes
rarely make valid JSON on their own.

Targets: transcripts, scenario, fault_spec, sizes, recall, classify. Any exception
other than the documented error of the target is a finding: atheris stops and
writes the crashing input to ``crash-*`` in the working directory.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from ctxrecover.archive import MemoryArchive, parse_recall_keys, recall
    from ctxrecover.classify import Failure, classify
    from ctxrecover.sizes import parse_payload_size
    from simulator.proxy.fault_specs import parse_fault_spec
    from simulator.proxy.faults import FAULT_KINDS
    from simulator.proxy.scenario import ScenarioError, load_scenario, scenario_from_document
    from simulator.transcripts.loaders import FORMATS, TranscriptError, load_runs

WORK_DIR = Path(tempfile.mkdtemp(prefix="ctxrecover-atheris-"))
KEY_LENGTH = 16


def fuzz_transcripts(data: bytes) -> None:
    """Any file content, auto-detected or forced to one format: runs or a TranscriptError."""
    provider = atheris.FuzzedDataProvider(data)
    choice = provider.ConsumeIntInRange(0, len(FORMATS))
    path = WORK_DIR / "transcript.json"
    path.write_bytes(provider.ConsumeBytes(provider.remaining_bytes()))
    try:
        load_runs(path, format=None if choice == len(FORMATS) else FORMATS[choice])
    except TranscriptError as exc:
        assert str(exc).startswith(str(path)), exc


def fuzz_scenario(data: bytes) -> None:
    """A scenario file (TOML or JSON text) and the parsed document: a Scenario or a ScenarioError."""
    provider = atheris.FuzzedDataProvider(data)
    suffix = ".json" if provider.ConsumeBool() else ".toml"
    text = provider.ConsumeUnicodeNoSurrogates(provider.remaining_bytes())
    path = WORK_DIR / f"scenario{suffix}"
    path.write_text(text, encoding="utf-8")
    try:
        load_scenario(path)
    except ScenarioError:
        pass
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return
    if isinstance(document, dict):
        try:
            scenario_from_document(document, name="atheris")
        except ScenarioError:
            pass


def fuzz_fault_spec(data: bytes) -> None:
    """A compact fault spec (a known kind, then fuzzed values): a fault or a ScenarioError."""
    provider = atheris.FuzzedDataProvider(data)
    kinds = sorted(FAULT_KINDS)
    kind = kinds[provider.ConsumeIntInRange(0, len(kinds) - 1)]
    try:
        parse_fault_spec(f"{kind}:{provider.ConsumeUnicodeNoSurrogates(provider.remaining_bytes())}")
    except ScenarioError:
        pass


def fuzz_sizes(data: bytes) -> None:
    """Any text is a size: an int >= 0."""
    text = atheris.FuzzedDataProvider(data).ConsumeUnicode(len(data))
    size = parse_payload_size(text)
    assert isinstance(size, int) and size >= 0, (text, size)


def fuzz_recall(data: bytes) -> None:
    """Any text gives distinct 16-hex keys and a recall result."""
    text = atheris.FuzzedDataProvider(data).ConsumeUnicode(len(data))
    keys = parse_recall_keys(text)
    assert len(keys) == len(set(keys)), keys
    assert all(len(key) == KEY_LENGTH and int(key, 16) >= 0 for key in keys), keys
    recall(MemoryArchive(), text)


def fuzz_classify(data: bytes) -> None:
    """Any status, body and error text: a Failure, never an exception."""
    provider = atheris.FuzzedDataProvider(data)
    status = provider.ConsumeIntInRange(0, 999) if provider.ConsumeBool() else None
    error = RuntimeError(provider.ConsumeUnicode(64)) if provider.ConsumeBool() else None
    body = provider.ConsumeBytes(provider.remaining_bytes())
    failure = classify(error, status=status, body=body, history_chars=len(body) * 1000)
    assert isinstance(failure, Failure), failure


TARGETS: dict[str, Callable[[bytes], None]] = {
    "classify": fuzz_classify,
    "fault_spec": fuzz_fault_spec,
    "recall": fuzz_recall,
    "scenario": fuzz_scenario,
    "sizes": fuzz_sizes,
    "transcripts": fuzz_transcripts,
}


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] not in TARGETS:
        raise SystemExit(f"usage: {argv[0]} {{{','.join(sorted(TARGETS))}}} [libFuzzer options]")
    target = TARGETS[argv[1]]
    atheris.Setup([argv[0], *argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
