"""Namespaces in a shared store (issue 12): no cross-reads, no confirming a guess, explicit sharing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxrecover.archive import DiskArchive, MemoryArchive, archive_range, marker, recall, render_transcript
from ctxrecover.errors import ArchiveError, ConfigError
from ctxrecover.messages import Message

SECRET = "the deploy key is hunter2"


@pytest.fixture(params=["memory", "disk"])
def alice(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryArchive | DiskArchive]:
    if request.param == "memory":
        yield MemoryArchive(namespace="alice")
    else:
        with DiskArchive(tmp_path / "shared.sqlite", namespace="alice") as store:
            yield store


def test_a_namespace_cannot_read_another_s_entries_by_key(alice: MemoryArchive | DiskArchive) -> None:
    bob = alice.view("bob")
    key = alice.put(SECRET)
    assert bob.get(key) is None and key not in bob
    assert recall(bob, marker(key)).missing == (key,)
    assert alice.get(key) == SECRET and bob.namespace == "bob"
    if isinstance(bob, DiskArchive):
        bob.close()


def test_a_put_stores_in_the_own_namespace_only(alice: MemoryArchive | DiskArchive) -> None:
    bob = alice.view("bob")
    alice.put(SECRET)
    key = bob.put(SECRET)  # bob's own copy: his entry, his to lose, no link to alice's
    assert bob.get(key) == SECRET and len(bob) == 1 and len(alice) == 1
    if isinstance(bob, DiskArchive):
        bob.close()


def _guess_effects(path: Path, alice_has_it: bool) -> tuple[object, ...]:
    """Everything bob can observe when he puts a guess of alice's text."""
    with DiskArchive(path, namespace="alice") as alice, alice.view("bob") as bob:
        alice.put("unrelated alice text")
        if alice_has_it:
            alice.put(SECRET)
        before = (bob.stats(), bob.total_bytes)
        key = bob.put(SECRET)
        after = (bob.stats(), bob.total_bytes, bob.get(key), key in bob)
        return key, after[0], after[1] - before[1], after[2], after[3]


def test_a_put_of_a_guessed_text_reveals_nothing_about_another_namespace(tmp_path: Path) -> None:
    assert _guess_effects(tmp_path / "with.sqlite", True) == _guess_effects(
        tmp_path / "without.sqlite", False
    )


def test_share_copies_an_entry_and_everything_it_reaches(alice: MemoryArchive | DiskArchive) -> None:
    messages = [Message.user("q " * 100), Message.assistant("a " * 100)]
    key = archive_range(alice, messages)
    bob = alice.view("bob")
    copied = alice.share([key], "bob")
    assert set(copied) == {key, *(alice.put(m.content) for m in messages)}
    assert recall(bob, marker(key)).found[key] == render_transcript(messages)
    assert alice.share([key], "bob") == ()  # already there
    with pytest.raises(ArchiveError, match="nothing is stored under it in namespace 'bob'"):
        bob.share(["0123456789abcdef"], "carol")
    if isinstance(bob, DiskArchive):
        bob.close()


def test_default_namespace_is_shared_by_handles_that_name_none(tmp_path: Path) -> None:
    with DiskArchive(tmp_path / "a.sqlite") as first, DiskArchive(tmp_path / "a.sqlite") as second:
        assert first.namespace == second.namespace == "default"
        assert second.get(first.put("common")) == "common"


@pytest.mark.parametrize("bad", ["", None, 3])
def test_a_namespace_must_be_a_non_empty_str(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ConfigError, match="namespace must be a non-empty str"):
        DiskArchive(tmp_path / "x.sqlite", namespace=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        MemoryArchive(namespace=bad)  # type: ignore[arg-type]


def test_views_share_one_file_and_close_independently(tmp_path: Path) -> None:
    alice = DiskArchive(tmp_path / "v.sqlite", namespace="alice")
    bob = alice.view("bob")
    alice.close()
    key = bob.put("still open")  # the file stays open while any view is
    assert bob.get(key) == "still open"
    bob.close()
    with pytest.raises(ArchiveError, match="is closed"):
        bob.get(key)
