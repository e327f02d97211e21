"""SessionArchive: a session's pins kept in step with its live lists, at O(what changed)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pytest

from ctxrecover.archive import MemoryArchive, SessionArchive, marker, message_keys
from ctxrecover.errors import ArchiveError, ArchiveWriteError
from ctxrecover.messages import Message, ToolCall

K = [f"{i:016x}" for i in range(1, 10)]


@dataclass
class PinLog:
    """A pinning store over a MemoryArchive that records every call (and can be told to fail)."""

    inner: MemoryArchive = field(default_factory=MemoryArchive)
    calls: list[tuple[str, tuple[str, ...], tuple[str, ...], bool]] = field(default_factory=list)
    owners: list[str | None] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    failing: bool = False

    def put(self, content: str, *, owner: str | None = None) -> str:
        self.owners.append(owner)
        return self.inner.put(content)

    def archive(self, content: str) -> str | None:
        return self.inner.archive(content)

    def get(self, key: str) -> str | None:
        return self.inner.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self.inner

    def pin(
        self, owner: str, added: Iterable[str] = (), removed: Iterable[str] = (), *, reset: bool = False
    ) -> None:
        if self.failing:
            raise ArchiveWriteError("disk full", path="x.sqlite")
        self.calls.append((owner, tuple(sorted(added)), tuple(sorted(removed)), reset))

    def release(self, owner: str) -> None:
        self.released.append(owner)


def ref(*keys: str, role: str = "user") -> Message:
    return Message(role, " ".join(f"see {marker(k)}" for k in keys))


def test_message_keys_come_from_content_arguments_and_system_parts_and_are_memoized() -> None:
    msg = Message.assistant(f"a {marker(K[0])}", [ToolCall("c", "f", f'{{"k": "{marker(K[1])}"}}')])
    system = Message.system("s", system_parts=(f"part {marker(K[2])}", marker(K[0])))
    assert message_keys(msg) == (K[0], K[1]) and message_keys(system) == (K[2], K[0])
    assert message_keys(msg) is message_keys(msg)
    assert message_keys(Message.user("no markers")) == ()


def test_the_first_track_declares_the_whole_live_set_then_only_changes_are_sent() -> None:
    store = PinLog()
    live = SessionArchive(store, owner="me")  # type: ignore[arg-type]
    history = [ref(K[0]), Message.user("plain"), ref(K[1], K[2])]
    live.track("history", history)
    assert store.calls == [("me", (K[0], K[1], K[2]), (), True)]
    history.append(ref(K[3]))  # grown in place: only the tail is looked at
    live.track("history", history)
    assert store.calls[-1] == ("me", (K[3],), (), False)
    live.track("history", history)  # nothing changed: no call at all
    assert len(store.calls) == 2
    replaced = [history[0], history[1], ref(K[4]), history[3]]  # a pass replaced one message
    live.track("history", replaced)
    assert store.calls[-1] == ("me", (K[4],), (K[1], K[2]), False)
    assert live.live_keys == {K[0], K[3], K[4]}


def test_a_key_stays_pinned_while_any_live_message_holds_it() -> None:
    store = PinLog()
    live = SessionArchive(store, owner="me")  # type: ignore[arg-type]
    a, b = ref(K[0]), ref(K[0], K[1])
    live.track("history", [a, b])
    live.track("outgoing", (b,))
    calls = len(store.calls)
    live.track("history", [a])  # b left the history but is still in the outgoing copy: nothing to tell
    assert len(store.calls) == calls and live.live_keys == {K[0], K[1]}
    live.track("outgoing", ())
    assert store.calls[-1] == ("me", (), (K[1],), False) and live.live_keys == {K[0]}


def test_puts_carry_the_owner_and_the_next_track_ends_their_fresh_hold() -> None:
    store = PinLog()
    live = SessionArchive(store, owner="me")  # type: ignore[arg-type]
    live.track("history", [])
    live.put("cut content")
    assert store.owners == ["me"]
    live.track("history", [])  # no live change, but the hold of what was stored must end
    assert store.calls[-1] == ("me", (), (), False)


def test_a_failed_pin_is_reported_once_and_retried_with_the_next_change() -> None:
    store = PinLog()
    errors: list[tuple[str, str]] = []
    live = SessionArchive(store, owner="me", on_error=lambda exc, stage: errors.append((stage, str(exc))))  # type: ignore[arg-type]
    live.track("history", [])
    store.failing = True
    history = [ref(K[0])]
    live.track("history", history)
    history.append(ref(K[1]))
    live.track("history", history)
    assert errors == [("pin", "disk full")]
    store.failing = False
    history.append(Message.user("x"))
    live.track("history", history)
    assert store.calls[-1] == ("me", (K[0], K[1]), (), False)


def test_a_refused_put_is_reported_and_raised() -> None:
    class Refusing(PinLog):
        def put(self, content: str, *, owner: str | None = None) -> str:
            raise ArchiveWriteError("read-only", path="x.sqlite")

    errors: list[str] = []
    live = SessionArchive(Refusing(), on_error=lambda exc, stage: errors.append(stage))  # type: ignore[arg-type]
    with pytest.raises(ArchiveError, match="read-only"):
        live.put("x")
    assert errors == ["put"]


def test_adopt_releases_the_temporary_owner_and_declares_the_set_again() -> None:
    store = PinLog()
    live = SessionArchive(store)  # type: ignore[arg-type]
    temporary = live.owner
    live.track("history", [ref(K[0])])
    live.adopt("saved-owner")
    restored = [ref(K[1])]
    live.track("history", restored)
    assert store.released == [temporary]
    assert store.calls[-1] == ("saved-owner", (K[1],), (), True)


def test_a_store_that_evicts_nothing_is_used_untracked() -> None:
    store = MemoryArchive()
    live = SessionArchive(store)
    live.track("history", [ref(K[0])])
    assert not live.pinning and live.live_keys == frozenset()
    assert live.get(live.put("x")) == "x" and len(live) == 1


def test_a_subclass_whose_put_takes_no_owner_still_gets_pins() -> None:
    class OldPut(PinLog):
        def put(self, content: str) -> str:  # type: ignore[override]
            return self.inner.put(content)

    store = OldPut()
    live = SessionArchive(store)  # type: ignore[arg-type]
    assert live.get(live.put("works")) == "works"
    live.track("history", [ref(K[0])])
    assert store.calls[-1][1] == (K[0],)


def test_wrapping_a_session_archive_wraps_its_store() -> None:
    store = PinLog()
    assert SessionArchive(SessionArchive(store)).store is store  # type: ignore[arg-type]


def test_pin_work_follows_what_changed_not_the_history_length() -> None:
    store = PinLog()
    live = SessionArchive(store, owner="me")  # type: ignore[arg-type]
    keys = [f"{i:016x}" for i in range(1, 2001)]
    history: Sequence[Message] = [ref(k) for k in keys]
    live.track("history", history)
    sent_before = sum(len(a) + len(r) for _, a, r, _ in store.calls[1:])
    for turn in range(50):  # each turn replaces one old message and appends one
        history = [ref(f"{turn + 5000:016x}"), *history[1:], ref(f"{turn + 9000:016x}")]
        live.track("history", history)
    sent = sum(len(a) + len(r) for _, a, r, _ in store.calls[1:]) - sent_before
    assert sent == 50 * 3  # per turn: the replacement and the new message pinned, the old one unpinned
