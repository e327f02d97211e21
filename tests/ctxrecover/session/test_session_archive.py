"""A Session over a bounded DiskArchive (issue 12): pinned while live, refusals before the cut, resume."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from ctxrecover.archive import DiskArchive, extract_keys, recall
from ctxrecover.errors import ArchiveFullError
from ctxrecover.events import Event, Notice
from ctxrecover.messages import Message, ToolCall
from ctxrecover.policy import Policy
from ctxrecover.session import Session

SMALL = Policy(context_window=2000, keep_recent=4)  # ~4.8 K chars of budget: a 20 K history must be cut
REFUSED_PREFIX = (
    "⚠ CCR archive refused to store what this turn would cut — that cut was not made, nothing is lost: "
)


def _conversation(turns: int, size: int = 1000) -> list[Message]:
    history = [Message.system("You are terse.")]
    for turn in range(turns):
        history += [
            Message.user(f"ask {turn} " + "q" * size),
            Message.assistant(f"reply {turn} " + "a" * size),
        ]
    return history + [Message.user("and now?")]


def _keys(history: list[Message]) -> set[str]:
    return {key for msg in history for key in extract_keys(msg.content)}


def _recallable(session: Session) -> bool:
    keys = {key for msg in session.history for key in extract_keys(msg.content)}
    return all(recall(session.archive, key).missing == () for key in keys)


def test_a_cut_the_archive_refuses_raises_before_the_history_changes_and_is_counted(
    tmp_path: Path, fake_provider: Callable[..., object]
) -> None:
    events: list[Event] = []
    with DiskArchive(tmp_path / "shared.sqlite", max_bytes=40_000) as store, store.view("other") as other:
        squatter = [other.put(f"{i} " + "o" * 9000) for i in range(3)]  # another session holds 27 KB
        other.pin("other-session", squatter)
        provider = fake_provider()
        session = Session(provider.sender(), policy=SMALL, archive=store, on_event=events.append, env={})
        session.extend(_conversation(10))
        before = session.history
        try:
            session.complete()
        except ArchiveFullError as exc:
            refused = exc
        else:
            raise AssertionError("the archive had no room: the turn must refuse the cut")
        assert session.history == before and session.stats.archive_refusals == 1
        notices = [e for e in events if isinstance(e, Notice) and e.code == "archive_refused"]
        assert [n.message for n in notices] == [REFUSED_PREFIX + str(refused)]
        assert provider.bodies == []  # type: ignore[attr-defined]  # nothing was sent either

        other.release("other-session")  # the other session ended: its entries may go
        assert session.complete().content == "answer 1"  # the same session, usable again
        assert len(session.history) < len(before) and _recallable(session)


def test_a_full_archive_ends_no_turn_that_needs_no_cut(
    tmp_path: Path, fake_provider: Callable[..., object]
) -> None:
    events: list[Event] = []
    output = "\n".join(f"PASSED test_{n}" for n in range(600))  # 9.3 KB: microcompact previews it at age 2
    with DiskArchive(tmp_path / "shared.sqlite", max_bytes=40_000) as store, store.view("other") as other:
        other.pin("other-session", [other.put(f"{i} " + "o" * 9_500) for i in range(4)])  # 38 KB held
        provider = fake_provider()
        session = Session(provider.sender(), archive=store, on_event=events.append, env={})
        session.extend([Message.user("run the tests"), Message.assistant("", [ToolCall("t", "run", "{}")])])
        session.extend([Message.tool("t", output), Message.assistant("All pass."), Message.user("thanks")])
        session.extend([Message.assistant("You're welcome."), Message.user("and the lint?")])

        answer = session.complete()  # microcompact's fold is refused: the turn goes on without it

    assert answer.content == "answer 1" and session.history[2].content == output  # kept whole
    refused = [e.message for e in events if isinstance(e, Notice) and e.code == "archive_refused"]
    assert len(refused) == session.stats.archive_refusals == 1
    path = tmp_path / "shared.sqlite"
    assert refused == [
        REFUSED_PREFIX
        + f"cannot archive an entry of 9.3 KB ({len(output)} bytes) in {path}: it would not fit under "
        "max_bytes (39.1 KB) without evicting entries a live history still reaches (37.1 KB held: "
        "session 'other-session' 37.1 KB (namespace 'other')) — nothing was stored and nothing was cut; "
        "to make room, release sessions you will not resume — store.view('other').release('other-session') "
        f"frees 37.1 KB — or open it with a larger max_bytes: DiskArchive({str(path)!r}, max_bytes=1048576) "
        "(1.0 MB)"
    ]


def test_a_session_warns_once_when_live_histories_hold_80_percent_of_the_cap(
    tmp_path: Path, fake_provider: Callable[..., object]
) -> None:
    events: list[Event] = []
    path = tmp_path / "shared.sqlite"
    with DiskArchive(path, max_bytes=60_000) as store, store.view("other") as other:
        other.pin("other-session", [other.put(f"{i} " + "o" * 8_998) for i in range(5)])  # 45 KB: 75 %
        provider = fake_provider()
        session = Session(provider.sender(), policy=SMALL, archive=store, on_event=events.append, env={})
        session.extend(_conversation(6))
        for turn in range(4):
            session.complete()  # each turn cuts, so each turn archives
            session.add(Message.user(f"next {turn} " + "q" * 1000))
        warnings = [e.message for e in events if isinstance(e, Notice) and e.code == "archive_pressure"]
    assert len(warnings) == 1, warnings
    (warning,) = warnings
    assert warning.startswith(f"⚠ CCR archive {path} is ")
    assert (
        "% full of entries live histories still reach (" in warning and " of max_bytes 58.6 KB): " in warning
    )
    assert (
        ", other sessions 43.9 KB — once it is full, a turn that must cut stops with ArchiveFullError; "
        in (warning)
    )
    assert warning.endswith(
        "to make room, release sessions you will not resume — store.view('other').release('other-session') "
        f"frees 43.9 KB — or open it with a larger max_bytes: DiskArchive({str(path)!r}, max_bytes=1048576) "
        "(1.0 MB)"
    )


def test_the_markers_of_the_outgoing_copy_stay_recallable(
    tmp_path: Path, fake_provider: Callable[..., object]
) -> None:
    big = "\n".join(f"line {n}: " + "x" * 60 for n in range(400))  # ~28 K chars: previewed on the wire only
    with DiskArchive(tmp_path / "ccr.sqlite", max_bytes=400_000) as store:
        session = Session(
            fake_provider().sender(), archive=store, policy=Policy(tool_result_max_chars=4000), env={}
        )
        session.extend([Message.user("read it"), Message.assistant("", [ToolCall("r", "read_file", "{}")])])
        session.add(Message.tool("r", big))
        session.complete()
        previewed = session.archive.live_keys
        assert len(previewed) == 1  # the history has no marker: the key comes from the outgoing preview
        (key,) = previewed
        with store.view("flood") as flood:
            for i in range(12):
                flood.put(f"{i} " + "f" * 90_000)  # other writers fill the cap many times over
        assert recall(session.archive, key).found[key] == big


def test_restore_takes_over_the_saved_pins(tmp_path: Path, fake_provider: Callable[..., object]) -> None:
    path = tmp_path / "ccr.sqlite"
    with DiskArchive(path) as store:
        first = Session(fake_provider().sender(), policy=SMALL, archive=store, env={})
        first.extend(_conversation(10))
        first.complete()
        state = first.state()
        pinned = store.stats().pinned_entries
    assert state["archive_owner"] == first.archive.owner and pinned > 0
    with DiskArchive(path) as store:
        resumed = Session(fake_provider().sender(), policy=SMALL, archive=store, env={})
        temporary = resumed.archive.owner
        resumed.restore(state)
        assert resumed.archive.owner == first.archive.owner != temporary
        assert resumed.archive.live_keys == _keys(resumed.history)  # pinned as soon as it is restored
        assert store.stats().pinned_entries == pinned  # the same pins, none left under the temporary id
        assert _recallable(resumed)


def test_every_change_of_the_history_is_pinned_at_once(
    tmp_path: Path, fake_provider: Callable[..., object]
) -> None:
    with DiskArchive(tmp_path / "ccr.sqlite") as store:
        session = Session(fake_provider().sender(), policy=SMALL, archive=store, env={})
        session.extend(_conversation(10))
        report = session.compact()  # a manual /compact, outside any turn
        assert report.level >= 3 and _keys(session.history)
        assert session.archive.live_keys == _keys(session.history)
        assert session.undo_compaction()
        assert session.archive.live_keys == _keys(session.history) == set()


class CountingDisk(DiskArchive):
    """Counts the keys each pin call sends."""

    sent = 0
    distinct: set[str]

    def pin(
        self, owner: str, added: Iterable[str] = (), removed: Iterable[str] = (), *, reset: bool = False
    ) -> None:
        added, removed = list(added), list(removed)
        self.sent += len(added) + len(removed)
        self.distinct = getattr(self, "distinct", set()) | set(added)
        super().pin(owner, added, removed, reset=reset)


def test_pin_traffic_over_a_long_session_follows_what_changed(
    tmp_path: Path, fake_provider: Callable[..., object]
) -> None:
    with CountingDisk(tmp_path / "ccr.sqlite") as store:
        session = Session(fake_provider().sender(), policy=SMALL, archive=store, env={})
        session.add(Message.system("You are terse."))
        for turn in range(120):
            session.add(Message.user(f"ask {turn} " + "q" * 700))
            session.complete()
        assert session.stats.compactions >= 10
        # every key is sent when it becomes live and at most once more when it stops being live
        assert store.sent <= 2 * len(store.distinct)
        assert _recallable(session) and store.verify() == []
