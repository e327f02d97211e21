"""DiskArchive never evicts what a live history reaches (issue 12): pins, links, fresh holds, refusals."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrecover.archive import (
    DiskArchive,
    archive_key,
    archive_range,
    extract_keys,
    marker,
    recall,
    render_transcript,
)
from ctxrecover.errors import ArchiveFullError
from ctxrecover.messages import Message

OWNER, OTHER = "session-a", "session-b"
DAY = 86_400.0


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def fill(store: DiskArchive, letters: str, size: int = 1000) -> list[str]:
    return [store.put(letter * size) for letter in letters]


def test_a_pinned_entry_is_never_evicted_by_the_size_cap(db_path: Path) -> None:
    with DiskArchive(db_path, max_bytes=4000) as store:
        a, b, c, d = fill(store, "abcd")
        store.pin(OWNER, [a])
        e, f = fill(store, "ef")  # LRU would take a, then b: a is pinned, so b and c go
        assert [k in store for k in (a, b, c, d, e, f)] == [True, False, False, True, True, True]
        assert store.stats().pinned_entries == 1 and store.stats().pinned_bytes == 1000


def test_members_reached_through_a_pinned_index_are_held(db_path: Path) -> None:
    messages = [Message.user("u" * 900), Message.assistant("a" * 900), Message.user("v" * 900)]
    with DiskArchive(db_path, max_bytes=4000) as store:
        key = archive_range(store, messages)
        store.pin(OWNER, [key])  # only the index is in the history: its members are held through it
        fill(store, "wxyz")
        assert recall(store, marker(key)).found[key] == render_transcript(messages)
        assert store.verify() == []


def test_a_put_that_would_evict_a_pinned_entry_is_refused_and_stores_nothing(db_path: Path) -> None:
    with DiskArchive(db_path, max_bytes=4000) as store:
        keys = fill(store, "abcd")
        store.pin(OWNER, keys)
        before = store.stats()
        with pytest.raises(ArchiveFullError) as info:
            store.put("e" * 1000)
        error = info.value
        assert (error.needed, error.max_bytes, error.pinned_bytes, error.path) == (
            1000,
            4000,
            4000,
            str(db_path),
        )
        assert str(error) == (
            f"cannot archive an entry of 1000 B (1000 bytes) in {db_path}: it would not fit under max_bytes "
            "(3.9 KB) without evicting entries a live history still reaches (3.9 KB held: session "
            "'session-a' 3.9 KB) — nothing was stored and nothing was cut; to make room, release sessions "
            "you will not resume — store.release('session-a') frees 3.9 KB — or open it with a larger "
            f"max_bytes: DiskArchive({str(db_path)!r}, max_bytes=1048576) (1.0 MB)"
        )
        assert store.stats() == before and all(k in store for k in keys)
        assert archive_key("e" * 1000) not in store


def test_a_refused_put_evicts_nothing_even_when_some_space_was_free(db_path: Path) -> None:
    with DiskArchive(db_path, max_bytes=4000) as store:
        a, b, c = fill(store, "abc")
        store.pin(OWNER, [a, b])
        with pytest.raises(ArchiveFullError):
            store.put("z" * 2500)  # needs c evicted *and* a pinned one: refused whole
        assert c in store


def test_what_an_owner_stores_is_held_until_its_next_pin(db_path: Path) -> None:
    with DiskArchive(db_path, max_bytes=4000) as store:
        cut = store.put("c" * 1000, owner=OWNER)  # a cut in progress: stored, not yet in the history
        fill(store, "wxyz")
        assert cut in store  # another writer's puts did not take it
        store.pin(OWNER, [], [])  # the history settled without it: now it is fair game
        fill(store, "pq")
        assert cut not in store


def test_an_index_is_never_left_without_its_members_even_unpinned(db_path: Path) -> None:
    rng = random.Random(5)
    with DiskArchive(db_path, max_bytes=20_000) as store:
        indexes: dict[str, list[str]] = {}
        for round_ in range(60):
            messages = [
                Message.user(f"{round_}-{i} " + "m" * rng.randint(100, 1500))
                for i in range(rng.randint(1, 6))
            ]
            key = archive_range(store, messages)
            indexes[key] = [archive_key(m.content) for m in messages]
            for index, members in indexes.items():
                if index in store:
                    assert all(member in store for member in members), (
                        f"round {round_}: {index} lost a member"
                    )
        assert store.verify() == []


def test_a_range_larger_than_the_cap_fails_before_a_key_is_returned(db_path: Path) -> None:
    messages = [Message.user(f"{i} " + "x" * 900) for i in range(6)]  # 5.4 KB of members under a 4 KB cap
    with DiskArchive(db_path, max_bytes=4000) as store:
        with pytest.raises(ArchiveFullError):
            archive_range(store, messages)
        assert store.stats().entries == 0 and store.verify() == []


def test_ttl_never_expires_an_entry_a_live_history_reaches(db_path: Path) -> None:
    clock = FakeClock()
    messages = [Message.user("kept " * 50), Message.assistant("also kept " * 30)]
    with DiskArchive(db_path, ttl_seconds=7 * DAY, clock=clock) as store:
        key = archive_range(store, messages)
        loose = store.put("nobody points at me")
        store.pin(OWNER, [key])
    clock.now += 8 * DAY
    with DiskArchive(db_path, ttl_seconds=7 * DAY, clock=clock) as reopened:  # the open expires what it may
        assert recall(reopened, marker(key)).found[key] == render_transcript(messages)
        assert loose not in reopened and reopened.get(loose) is None


def test_reset_replaces_an_owner_s_pins_and_release_drops_them(db_path: Path) -> None:
    with DiskArchive(db_path, max_bytes=4000) as store:
        a, b, c, d = fill(store, "abcd")
        store.pin(OWNER, [a, b])
        store.pin(OTHER, [b])
        store.pin(OWNER, [c], reset=True)  # a resumed session: exactly {c}
        assert store.stats().pinned_entries == 2  # b (OTHER) and c
        store.release(OTHER)
        assert store.stats().pinned_entries == 1
        fill(store, "efg")
        assert [k in store for k in (a, b, c, d)] == [False, False, True, False]
        assert store.verify() == []


def test_two_owners_pin_the_same_key_independently(db_path: Path) -> None:
    with DiskArchive(db_path, max_bytes=4000) as store:
        shared = store.put("s" * 1000)
        store.pin(OWNER, [shared])
        store.pin(OTHER, [shared])
        store.pin(OWNER, [], [shared])  # one owner let go: the other still holds it
        fill(store, "wxyz")
        assert shared in store
        store.pin(OTHER, [], [shared])
        fill(store, "uv")
        assert shared not in store


# -- a model check: random operations never break a hold ---------------------------------------

OPS = st.lists(
    st.tuples(
        st.sampled_from(["range", "plain", "unpin", "release", "clock", "get"]),
        st.sampled_from([OWNER, OTHER]),
        st.integers(min_value=0, max_value=10_000),
    ),
    min_size=5,
    max_size=30,
)


@settings(max_examples=40, deadline=None)
@given(OPS)
def test_random_operations_keep_every_held_entry_and_consistent_bookkeeping(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, str, int]]
) -> None:
    clock = FakeClock()
    contents: dict[str, str] = {}
    roots: dict[str, set[str]] = {OWNER: set(), OTHER: set()}
    path = tmp_path_factory.mktemp("model") / "ccr.sqlite"
    with DiskArchive(path, max_bytes=12_000, ttl_seconds=DAY, clock=clock) as store:
        for n, (op, owner, value) in enumerate(ops):
            rng = random.Random(value)
            if op == "range":
                messages = [
                    Message.user(f"{n}.{i} " + "r" * rng.randint(50, 1500)) for i in range(rng.randint(1, 4))
                ]
                if rng.random() < 0.5 and roots[owner]:  # a later cut drops an earlier marker: a chain
                    messages.append(Message.user("earlier " + marker(rng.choice(sorted(roots[owner])))))
                try:
                    key = archive_range(store, messages)
                except ArchiveFullError:
                    store.pin(owner)  # the session settles without the cut
                    continue
                contents.update((archive_key(m.content), m.content) for m in messages)
                contents[key] = store.get(key) or ""
                roots[owner].add(key)
                store.pin(owner, [key])
            elif op == "plain":
                text = f"plain {n} " + "p" * rng.randint(10, 3000)
                try:
                    contents[store.put(text)] = text
                except ArchiveFullError:
                    pass
            elif op == "unpin" and roots[owner]:
                key = rng.choice(sorted(roots[owner]))
                roots[owner].discard(key)
                store.pin(owner, [], [key])
            elif op == "release":
                roots[owner].clear()
                store.release(owner)
            elif op == "clock":
                clock.now += rng.uniform(0, 2 * DAY)
            elif op == "get" and contents:
                store.get(rng.choice(sorted(contents)))
            held = _closure(set().union(*roots.values()), contents)
            missing = [key for key in held if key not in store]
            assert not missing, f"after op {n} ({op}): held entries evicted: {missing}"
        assert store.verify() == []


def _closure(keys: set[str], contents: dict[str, str]) -> set[str]:
    seen: set[str] = set()
    frontier = list(keys)
    while frontier:
        key = frontier.pop()
        if key not in seen:
            seen.add(key)
            frontier += extract_keys(contents.get(key, ""))
    return seen
