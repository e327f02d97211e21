"""Content keys and ``<<ccr:KEY>>`` markers (SPEC §4)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrecover.archive import (
    MARKER_RE,
    archive_key,
    extract_keys,
    has_marker,
    marker,
)

K1 = "0123456789abcdef"


K2 = "fedcba9876543210"


K3 = "00000000deadbeef"


# -- keys and markers -----------------------------------------------------------------


@pytest.mark.parametrize(("content", "key"), [("", "e3b0c44298fc1c14"), ("abc", "ba7816bf8f01cfea")])
def test_key_is_first_16_hex_of_sha256(content: str, key: str) -> None:
    assert archive_key(content) == key
    assert key == hashlib.sha256(content.encode()).hexdigest()[:16]


def test_key_of_text_with_lone_surrogate_does_not_raise() -> None:
    assert len(archive_key("broken \ud800 text")) == 16


def test_marker_format_matches_the_marker_regex() -> None:
    assert marker(K1) == "<<ccr:0123456789abcdef>>"
    assert MARKER_RE.fullmatch(marker(K1)).group(1) == K1  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<<ccr:0123456789abcdef>>", True),
        ("head [full content recoverable via @recall <<ccr:0123456789abcdef>>] tail", True),
        ("<<ccr:0123456789ABCDEF>>", False),
        ("<<ccr:0123456789abcde>>", False),
        ("<<ccr:0123456789abcdef0>>", False),
        ("<<ccr:0123456789abcdeg>>", False),
        ("ccr:0123456789abcdef", False),
        ("0123456789abcdef", False),
        ("", False),
    ],
)
def test_has_marker(text: str, expected: bool) -> None:
    assert has_marker(text) is expected


def test_extract_keys_in_order_of_first_appearance_without_repeats() -> None:
    text = f"a {marker(K2)} b {marker(K1)} c {marker(K2)} <<ccr:BAD>> {marker(K3)} {marker(K1)}"
    assert extract_keys(text) == [K2, K1, K3]
    assert extract_keys("no markers here") == []


@settings(max_examples=60)
@given(st.lists(st.sampled_from([K1, K2, K3]), max_size=8), st.text(alphabet="ab <>:", max_size=20))
def test_extract_keys_matches_first_appearances(keys: list[str], filler: str) -> None:
    text = filler.join(marker(k) for k in keys)
    assert extract_keys(text) == list(dict.fromkeys(keys))
