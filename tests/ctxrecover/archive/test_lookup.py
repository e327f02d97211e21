"""Lenient recall: every documented query form, unknown keys (SPEC §4)."""

from __future__ import annotations

import json

import pytest

from ctxrecover.archive import (
    Archive,
    MemoryArchive,
    marker,
    parse_recall_keys,
    recall,
)

K1 = "0123456789abcdef"


K2 = "fedcba9876543210"


K3 = "00000000deadbeef"


UNKNOWN_TEXT = "[ccr:{key} — unknown or evicted: nothing is archived under this key]"


# -- lenient recall ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (marker(K1), [K1]),
        (f"ccr:{K1}", [K1]),
        (K1, [K1]),
        (f"@recall {marker(K1)}", [K1]),
        (f"  {K1.upper()}  ", [K1]),
        (f"<<CCR:{K1}>>", [K1]),
        (f"{K1} {K2}", [K1, K2]),
        (f"{marker(K2)}, ccr:{K1}; {K2}", [K2, K1]),
        (json.dumps({"key": K1}), [K1]),
        (json.dumps({"keys": [K1, K2]}), [K1, K2]),
        (json.dumps({"keys": f"{K2}, {K1}"}), [K2, K1]),
        (json.dumps({"marker": marker(K1)}), [K1]),
        (json.dumps({"markers": [marker(K1), marker(K2)]}), [K1, K2]),
        (json.dumps({"ccr": K2}), [K2]),
        (json.dumps({"id": f"ccr:{K1}"}), [K1]),
        (json.dumps([K1, marker(K2)]), [K1, K2]),
        ('{"key": "' + K1 + '", broken json', [K1]),
        (json.dumps({"query": f"@recall {marker(K2)}"}), [K2]),
        (json.dumps({"args": {"key": K1}}), [K1]),
        (f"[full content recoverable via @recall {marker(K1)}]", [K1]),
    ],
)
def test_recall_accepts_every_documented_form(query: str, expected: list[str]) -> None:
    store = MemoryArchive()
    originals = {K1: "first original", K2: "second original"}
    store._entries.update(originals)  # place known content under fixed keys
    result = recall(store, query)
    assert list(result.found) == expected
    assert result.found == {k: originals[k] for k in expected}
    assert result.missing == ()
    assert result.text == "\n\n".join(originals[k] for k in expected)


@pytest.mark.parametrize(
    "query",
    ["", "   ", "{", "[[[[", '{"key": 5}', '{"other": "x"}', "a" * 64, "[" * 5000, "deadbeef", "ccr:"],
)
def test_recall_of_nothing_recognisable_is_empty_and_never_raises(query: str) -> None:
    result = recall(MemoryArchive(), query)
    assert result.found == {}
    assert result.missing == ()
    assert result.text == ""


def test_recall_reports_unknown_keys_with_the_exact_text(store: Archive) -> None:
    key = store.put("kept content")
    result = recall(store, f"{marker(key)} {marker(K3)}")
    assert result.found == {key: "kept content"}
    assert result.missing == (K3,)
    assert result.text == "kept content\n\n" + UNKNOWN_TEXT.format(key=K3)


def test_parse_recall_keys_removes_repeats() -> None:
    assert parse_recall_keys(f"{K1} {marker(K1)} ccr:{K1} {K2}") == [K1, K2]
