"""put / archive / get on the memory and disk stores (SPEC §4)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrecover.archive import (
    Archive,
    MemoryArchive,
    archive_key,
    marker,
)

K1 = "0123456789abcdef"


# -- put / archive / get on both stores ------------------------------------------------------


def test_store_satisfies_the_archive_protocol(store: Archive) -> None:
    assert isinstance(store, Archive)


def test_put_returns_the_content_key_and_get_returns_the_original(store: Archive) -> None:
    content = "a long tool result\n" * 50 + "héllo 🌍"
    key = store.put(content)
    assert key == archive_key(content)
    assert key in store
    assert store.get(key) == content


def test_put_is_idempotent(store: Archive) -> None:
    first = store.put("same content")
    second = store.put("same content")
    assert first == second
    assert len(store) == 1  # type: ignore[arg-type]


def test_archive_refuses_content_that_already_carries_a_marker(store: Archive) -> None:
    key = store.archive("original body")
    assert key == archive_key("original body")
    stub = (
        "[Old tool result cleared — 1 lines, 13 chars, text]\n"
        f"[full content recoverable via @recall {marker(key)}]"
    )
    assert store.archive(stub) is None
    assert archive_key(stub) not in store
    assert len(store) == 1  # type: ignore[arg-type]


def test_put_stores_even_marked_content(store: Archive) -> None:
    content = f"summary mentioning {marker(K1)}"
    assert store.get(store.put(content)) == content


def test_unknown_or_malformed_key_is_absent(store: Archive) -> None:
    assert store.get(K1) is None
    assert K1 not in store
    assert store.get("not-a-key") is None
    assert 42 not in store


def test_memory_archive_keeps_the_very_same_string_object() -> None:
    store = MemoryArchive()
    content = "x" * 10_000
    assert store.get(store.put(content)) is content


@settings(max_examples=40)
@given(st.text(max_size=300))
def test_memory_round_trip_any_text(content: str) -> None:
    store = MemoryArchive()
    key = store.put(content)
    assert store.get(key) == content
    assert (store.archive(content + marker(K1)) is None) is True
