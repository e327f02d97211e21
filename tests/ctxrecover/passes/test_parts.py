"""Moving message parts to the archive: old images (SPEC §11 "real bytes") and a message set aside."""

from __future__ import annotations

import copy

import pytest

from ctxrecover.archive import MemoryArchive, extract_keys, recall
from ctxrecover.errors import ConfigError
from ctxrecover.messages import Image, Message, ToolCall
from ctxrecover.passes import IMAGE_ARCHIVED_NOTE, SET_ASIDE_NOTE, archive_images, set_aside
from ctxrecover.sizes import format_payload_size, image_chars, total_weight, weight

SHOT = "iVBORw0KGgoAAAANSUhEUg" + "Q" * 40_000


def shot(i: int) -> Image:
    return Image(data=f"{SHOT}{i}", media_type="image/png")


def screenshots(n: int) -> list[Message]:
    history = [Message.system("browser agent")]
    for i in range(n):
        history += [
            Message.user(f"look at page {i}"),
            Message.assistant("", [ToolCall(f"s{i}", "screenshot", "{}")]),
            Message.tool(f"s{i}", f"screenshot {i}", images=(shot(i),)),
            Message.assistant(f"page {i} shows a form"),
        ]
    return history


def test_images_outside_the_kept_messages_are_archived_byte_for_byte() -> None:
    history = screenshots(3)
    before = copy.deepcopy(history)
    store = MemoryArchive()
    out, report = archive_images(history, archive=store, keep_recent=4)
    assert history == before  # input never mutated
    assert report.images_archived == 2 and report.chars_freed == total_weight(history) - total_weight(out)
    assert [bool(m.images) for m in out].count(True) == 1 and out[-2].images == (shot(2),)
    for i, index in ((0, 3), (1, 7)):
        note = out[index].content.splitlines()[-1]
        assert note == IMAGE_ARCHIVED_NOTE % ("image/png", "39.1 KB", f"<<ccr:{extract_keys(note)[0]}>>")
        assert out[index].content.startswith(f"screenshot {i}\n")
        assert recall(store, note).found[extract_keys(note)[0]] == f"data:image/png;base64,{SHOT}{i}"
    freed = format_payload_size(report.chars_freed)
    assert report.notice == f"images: 2 archived, {freed} freed (recoverable via @recall)"


def test_the_kept_tail_starts_at_a_user_message_for_recovery_but_not_for_compaction() -> None:
    # [system, assistant(call), tool(image), user(notice)]: recovery's keep_last and compaction
    # drop the leading assistant and tool messages, so their image must be archived first.
    history = [
        Message.system("sys"),
        Message.assistant("", [ToolCall("s0", "screenshot", "{}")]),
        Message.tool("s0", "shot", images=(shot(0),)),
        Message.user("[SYSTEM NOTICE — PAYLOAD LIMIT HIT] …"),
    ]
    for user_first in (True, False):
        out, report = archive_images(history, archive=MemoryArchive(), keep_recent=8, user_first=user_first)
        assert report.images_archived == 1 and not out[2].images
    # an agent loop with no user message after the floor: compaction keeps the tail as it is
    agent = [Message.system("sys"), *screenshots(1)[2:]]
    assert archive_images(agent, archive=MemoryArchive(), keep_recent=8, user_first=False)[0] is agent
    assert archive_images(agent, archive=MemoryArchive(), keep_recent=8)[1].images_archived == 1


def test_system_verbatim_and_url_images_stay_and_nothing_to_do_returns_the_input() -> None:
    url = Image(url="https://example.com/chart.png")
    history = [
        Message.system("sys", images=(shot(0),)),
        Message.user("recalled", images=(shot(1),), preserve_verbatim=True),
        Message.user("linked", images=(url,)),
        Message.user("now"),
    ]
    out, report = archive_images(history, archive=MemoryArchive(), keep_recent=0)
    assert out is history and report.images_archived == 0


def test_keep_recent_zero_archives_even_the_newest_image() -> None:
    history = screenshots(1)
    out, report = archive_images(history, archive=MemoryArchive(), keep_recent=0)
    assert report.images_archived == 1 and not any(m.images for m in out)
    assert weight(out[2]) < 200


def test_a_negative_keep_is_refused() -> None:
    with pytest.raises(ConfigError, match="keep_recent >= 0"):
        archive_images([], archive=MemoryArchive(), keep_recent=-1)


def test_set_aside_archives_a_whole_message_and_keeps_pairing() -> None:
    sql = "SELECT * FROM users WHERE name = '' OR 1=1 --\n" + "row\n" * 500
    history = [
        Message.system("sys"),
        Message.user("query the db"),
        Message.assistant("", [ToolCall("q", "query_db", "{}")]),
        Message.tool("q", sql, images=(shot(7),)),
    ]
    store = MemoryArchive()
    out, key = set_aside(history, -1, archive=store)
    stub = out[-1]
    assert (stub.role, stub.tool_call_id, stub.images) == ("tool", "q", ())
    size = format_payload_size(len(sql) + image_chars(history[-1]))
    assert stub.content == SET_ASIDE_NOTE % (size, f"<<ccr:{key}>>")
    original = store.get(key)
    assert original is not None and original.startswith(sql)
    image_key = extract_keys(original)[0]
    assert store.get(image_key) == f"data:image/png;base64,{SHOT}7"
    assert out[:-1] == history[:-1]
    with pytest.raises(ConfigError, match="no message #9"):
        set_aside(history, 9, archive=store)
