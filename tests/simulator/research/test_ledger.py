"""The exact loss ledger: occurrences, not substrings; every kind of drop counted; incremental.

The mutation tests start from a final history that keeps everything (0 lost) and
change one thing the way a faulty compaction would; the ledger must count exactly
the chars of what that change makes unrecoverable.
"""

from __future__ import annotations

import base64
import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrecover.archive import (
    RANGE_HEADER,
    MemoryArchive,
    archive_key,
    archive_range,
    marker,
    render_transcript,
)
from ctxrecover.messages import Image, Message, ToolCall
from ctxrecover.passes import apply_microcompact, emergency_truncate, keep_last, shrink_to_budget
from ctxrecover.passes.parts import archive_images, set_aside
from simulator.recorder import CountingArchive
from simulator.research import ledger as ledger_module
from simulator.research.ledger import LOSS_FIELDS, Losses, LossLedger
from simulator.research.pieces import message_pieces, parse_entry

RESULT = "".join(f"removed build/obj/{n:04d}.o\n" for n in range(200))  # 5,000 chars
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 3).decode()
ASK = "please run rm -rf build now"


def agent_conversation() -> list[Message]:
    return [
        Message.system("You are a coding agent."),
        Message.user(ASK),
        Message.assistant(
            "running both",
            tool_calls=[
                ToolCall("call_1", "bash", '{"cmd": "rm -rf build"}'),
                ToolCall("call_2", "read_file", '{"path": "build.log"}'),
            ],
        ),
        Message.tool("call_1", RESULT),
        Message.tool("call_2", RESULT),  # the same 5,000 chars again
        Message.user("here is the screen", images=(Image(data=PNG),)),
        Message.user(f'you said "{ASK}" earlier — is it done?'),
        Message.assistant("done"),
    ]


def chars_of(messages: list[Message]) -> int:
    return sum(len(value) for msg in messages for _pool, value in message_pieces(msg))


def lost(original: list[Message], final: list[Message], store: MemoryArchive | None = None) -> Losses:
    ledger = LossLedger(store)
    ledger.add_originals(original)
    ledger.observe(final)
    return ledger.losses


def replaced(history: list[Message], index: int, msg: Message | None) -> list[Message]:
    out = list(history)
    if msg is None:
        del out[index]
    else:
        out[index] = msg
    return out


# -- nothing dropped, nothing lost ------------------------------------------------------------------
def test_the_history_itself_loses_nothing() -> None:
    original = agent_conversation()
    assert lost(original, original) == Losses()
    assert lost(original, [m.replace() for m in original]) == Losses()  # equal copies are occurrences too


def test_a_dropped_range_archived_and_referenced_loses_nothing() -> None:
    original = [m for m in agent_conversation() if not m.images]  # image data: see the range index test
    for keep in (1, 2, 3, 5):
        store = MemoryArchive()
        truncated, _ = emergency_truncate(original, keep, archive=store)
        assert lost(original, truncated, store) == Losses(), keep


# -- mutations: each kind of drop is counted, exactly -----------------------------------------------
def test_a_dropped_message_quoted_in_a_kept_one_is_lost() -> None:
    original = agent_conversation()
    final = replaced(original, 1, None)
    assert ASK in final[5].content  # still quoted: a substring check would call it kept
    assert lost(original, final) == Losses(role=len("user"), content=len(ASK))


def test_one_of_two_identical_tool_results_dropped_is_lost() -> None:
    original = agent_conversation()
    final = replaced(original, 4, None)
    assert RESULT in final[3].content  # the same text survives once
    assert lost(original, final) == Losses(role=len("tool"), content=len(RESULT), call_id=len("call_2"))


def test_two_identical_results_need_two_recoverable_occurrences() -> None:
    original = agent_conversation()
    store = MemoryArchive()
    key = store.put(RESULT)  # content-addressed: one entry for both
    stub = f"[result archived: {marker(key)}]"
    final = replaced(replaced(original, 3, original[3].with_content(stub)), 4, original[4].with_content(stub))
    assert lost(original, final, store) == Losses()
    one_stub = replaced(final, 4, original[4].with_content("[result dropped]"))
    assert lost(original, one_stub, store) == Losses(content=len(RESULT))


def test_a_lost_tool_name_is_counted() -> None:
    original = agent_conversation()
    calls = (original[2].tool_calls[0], ToolCall("call_2", "grep", '{"path": "build.log"}'))
    assert lost(original, replaced(original, 2, original[2].replace(tool_calls=calls))) == Losses(
        tool_name=len("read_file")
    )


def test_a_lost_call_id_is_counted_on_the_call_and_on_the_result() -> None:
    original = agent_conversation()
    calls = (ToolCall("", "bash", '{"cmd": "rm -rf build"}'), original[2].tool_calls[1])
    assert lost(original, replaced(original, 2, original[2].replace(tool_calls=calls))) == Losses(
        call_id=len("call_1")
    )
    orphaned = original[4].replace(tool_call_id=None)
    assert lost(original, replaced(original, 4, orphaned)) == Losses(call_id=len("call_2"))


def test_lost_arguments_are_counted() -> None:
    original = agent_conversation()
    calls = (original[2].tool_calls[0], ToolCall("call_2", "read_file", "{}"))
    assert lost(original, replaced(original, 2, original[2].replace(tool_calls=calls))) == Losses(
        arguments=len('{"path": "build.log"}')
    )


def test_arguments_archived_behind_a_marker_in_their_own_place_are_not_lost() -> None:
    # A withheld tool call (SPEC §12) keeps a stub with the marker in its arguments: the entry it names
    # holds arguments, and is credited to them (it used to be offered to content only: 79 chars "lost").
    original = agent_conversation()
    store = MemoryArchive()
    key = store.put('{"path": "build.log"}')
    stub = ToolCall("call_2", "read_file", json.dumps({"withheld": f"refused by the gateway {marker(key)}"}))
    calls = (original[2].tool_calls[0], stub)
    assert lost(original, replaced(original, 2, original[2].replace(tool_calls=calls)), store) == Losses()


def test_a_lost_image_is_counted_by_its_data() -> None:
    original = agent_conversation()
    assert lost(original, replaced(original, 5, original[5].replace(images=()))) == Losses(image=len(PNG))
    by_url = [Message.user("see", images=(Image(url="https://example.com/shot.png"),))]
    assert lost(by_url, [by_url[0].replace(images=())]).image == len("https://example.com/shot.png")


def test_an_archive_entry_no_marker_reaches_is_lost() -> None:
    original = agent_conversation()
    store = MemoryArchive()
    store.put(ASK)
    store.put(render_transcript(original[1:2]))
    assert lost(original, replaced(original, 1, None), store) == Losses(role=len("user"), content=len(ASK))


def test_an_entry_that_quotes_a_dropped_message_is_not_its_occurrence() -> None:
    original = agent_conversation()
    store = MemoryArchive()
    quote = store.put(f"the user asked: {ASK}")
    final = replaced(original, 1, Message.user(f"[dropped; see {marker(quote)}]"))
    assert lost(original, final, store) == Losses(content=len(ASK))


def test_a_marker_that_points_at_nothing_is_lost_and_reported() -> None:
    original = agent_conversation()
    ledger = LossLedger(MemoryArchive())
    ledger.add_originals(original)
    ledger.observe(replaced(original, 1, original[1].with_content(f"[archived {marker('0' * 16)}]")))
    assert ledger.losses == Losses(content=len(ASK))
    assert ledger.dangling_markers == 1


def test_a_role_changed_by_compaction_is_counted() -> None:
    original = agent_conversation()
    as_user = Message.user(original[3].content)  # a tool result turned into a user message
    assert lost(original, replaced(original, 3, as_user)) == Losses(role=len("tool"), call_id=len("call_1"))


def test_deficits_name_each_lost_piece() -> None:
    original = agent_conversation()
    ledger = LossLedger()
    ledger.add_originals(original)
    ledger.observe(replaced(original, 4, None))
    assert ledger.deficits() == [("content", RESULT, 1), ("call_id", "call_2", 1), ("role", "tool", 1)]


# -- what archive entries offer --------------------------------------------------------------------
def test_a_range_index_offers_roles_ids_names_and_its_members() -> None:
    original = agent_conversation()
    store = MemoryArchive()
    key = archive_range(store, original[1:6])
    final = [original[0], Message.user(f"[5 messages archived: {marker(key)}]"), *original[6:]]
    # an index that names no marker for the image data keeps its type only: its bytes are lost
    keeps_data = marker(archive_key(PNG)) in store.get(key)
    assert lost(original, final, store) == (Losses() if keeps_data else Losses(image=len(PNG)))
    assert lost(original, [original[0], *original[6:]], store).total == chars_of(original[1:6])


def test_a_range_holding_a_message_twice_stands_for_both() -> None:
    twice = [Message.user("ok"), Message.assistant("a"), Message.user("ok"), Message.assistant("b")]
    store = MemoryArchive()
    key = archive_range(store, twice[:3])
    final = [Message.user(f"[dropped {marker(key)}]"), twice[3]]
    assert lost(twice, final, store) == Losses()


def test_result_ids_come_from_the_index_or_from_the_position_after_their_call() -> None:
    call = Message.assistant("", tool_calls=[ToolCall("c1", "read", "{}"), ToolCall("c2", "grep", "{}")])
    results = [Message.tool("c1", "one"), Message.tool("c2", "two")]
    store = MemoryArchive()
    members = {text: store.put(text) for text in ("", "{}", "one", "two")}

    def index(first_line: str, second_line: str) -> str:
        arguments = marker(members["{}"])
        calls = f"\n[tool_call c1 read: {arguments}]\n[tool_call c2 grep: {arguments}]"
        return (
            RANGE_HEADER % 3 + f"[assistant]: {marker(members[''])}{calls}\n\n"
            f"[tool]: {marker(members['one'])}{first_line}\n\n"
            f"[tool]: {marker(members['two'])}{second_line}\n\n"
        )

    original = [call, *results]
    for lines, expected in (
        (("", ""), Losses()),  # no result line: paired by position, as a reader pairs them
        (("\n[tool_result c1]", "\n[tool_result c2]"), Losses()),
        (("\n[tool_result c2]", "\n[tool_result c9]"), Losses(call_id=len("c1"))),  # named, and wrong
    ):
        key = store.put(index(*lines))
        assert lost(original, [Message.user(f"[{marker(key)}]")], store) == expected, lines


def test_a_rendered_transcript_is_read_block_by_block() -> None:
    original = agent_conversation()
    store = MemoryArchive()
    key = store.put(render_transcript(original[1:5]))
    final = [original[0], Message.user(f"[dropped {marker(key)}]"), *original[5:]]
    assert lost(original, final, store) == Losses()
    renamed = store.put(render_transcript(original[1:5]).replace("call_1 bash:", "call_1 sh:"))
    final = [original[0], Message.user(f"[dropped {marker(renamed)}]"), *original[5:]]
    assert lost(original, final, store) == Losses(tool_name=len("bash"))


def test_image_data_behind_a_marker_is_recoverable_while_it_is_stored() -> None:
    shot = [Message.user("here", images=(Image(data=PNG),)), Message.assistant("seen")]
    store = MemoryArchive()
    text = store.put("here")
    index = RANGE_HEADER % 1 + f"[user]: {marker(text)}\n[image: image/png {marker(archive_key(PNG))}]\n\n"
    final = [Message.user(f"[{marker(store.put(index))}]"), shot[1]]
    assert lost(shot, final, store) == Losses(image=len(PNG))  # named, not stored
    store.put(PNG)
    assert lost(shot, final, store) == Losses()


def test_images_moved_to_the_archive_behind_their_notes_lose_nothing() -> None:
    # archive_images leaves "[image archived — MEDIA, SIZE — … <<ccr:KEY>>]" after the text: the text before
    # it is still the message's content, and the entry behind the note (a data: URL) holds the image's data.
    original = agent_conversation()
    store = MemoryArchive()
    moved, report = archive_images(original, archive=store, keep_recent=1)
    assert report.images_archived == 1 and moved[5].images == () and moved[5].content != original[5].content
    assert lost(original, moved, store) == Losses()
    assert lost(original, moved, MemoryArchive()) == Losses(image=len(PNG))  # the note names nothing stored
    without_note = replaced(moved, 5, moved[5].replace(content=original[5].content))
    assert lost(original, without_note, store) == Losses(image=len(PNG))  # stored, but nothing reaches it


def test_a_message_set_aside_with_its_image_loses_nothing() -> None:
    original = agent_conversation()
    store = MemoryArchive()
    history, key = set_aside(original, 5, archive=store)
    assert PNG not in history[5].content and "here is the screen" not in history[5].content
    assert lost(original, history, store) == Losses()
    text_only = MemoryArchive()
    text_only.put(store.get(key) or "")  # the message's text and its image note, not the image's data
    assert lost(original, history, text_only) == Losses(image=len(PNG))


def test_a_quoted_image_note_of_a_data_url_that_is_not_the_image_offers_nothing() -> None:
    shot = [Message.user("here", images=(Image(data=PNG),))]
    store = MemoryArchive()
    other = store.put("data:image/png;base64,AAAA")
    note = f"here\n[image archived — image/png, 4 B — recoverable via @recall {marker(other)}]"
    assert lost(shot, [Message.user(note)], store) == Losses(image=len(PNG))


def test_a_tool_call_archived_as_json_keeps_its_id_name_and_arguments() -> None:
    edges, pieces = parse_entry('{"id": "c7", "name": "bash", "arguments": "{\\"cmd\\": \\"ls\\"}"}')
    assert (edges, pieces) == ([], [("call_id", "c7"), ("tool_name", "bash"), ("arguments", '{"cmd": "ls"}')])
    assert parse_entry('{"id": "c7", "name": "bash"}') == ([], [])


def test_an_entry_that_breaks_its_layout_offers_its_text_only() -> None:
    assert parse_entry(RANGE_HEADER % 2 + f"[user]: {marker('a' * 16)}\n\n") == ([("a" * 16, 0, 1)], [])
    assert parse_entry("[user]: hi\n[tool_call c1 read: {}]\n\n") == ([], [])  # a call on a user block


# -- write counts -----------------------------------------------------------------------------------
def test_write_counts_make_a_redundant_reference_count_once() -> None:
    original = agent_conversation()
    store = CountingArchive()
    ledger = LossLedger(store, track_writes=True)
    store.on_write = ledger.archived
    ledger.add_originals(original)
    inner = store.put(RESULT)
    preview = store.put(f"removed build/obj/0000.o … {marker(inner)}")
    stub = f"[summarized; recall {marker(preview)} {marker(inner)}]"  # names the entry and its inner marker
    final = replaced(replaced(original, 3, original[3].with_content(stub)), 4, None)
    ledger.observe(final)
    assert ledger.losses == Losses(role=len("tool"), content=len(RESULT), call_id=len("call_2"))
    assert lost(original, final, store) == Losses(role=len("tool"), call_id=len("call_2"))  # counted twice


def test_an_image_written_once_and_also_quoted_in_a_summary_is_kept() -> None:
    # images-2m × cloudflare-waf-403 (issue 26): archive_images writes a screenshot once and leaves its
    # note; a summary quotes the note (a content edge) and the summarized message's range keeps the note
    # (an image edge). One write stands for one occurrence, and recall of that entry gives the image back
    # however the marker was quoted: the image reader is served first.
    original = agent_conversation()
    store = CountingArchive()
    ledger = LossLedger(store, track_writes=True)
    store.on_write = ledger.archived
    ledger.add_originals(original)
    moved, _ = archive_images(original, archive=store, keep_recent=1)
    note = moved[5].content.splitlines()[-1]
    summary = Message.user(f"[summary] the user showed the screen: {note}", is_summary=True)
    final = [moved[0], summary, *moved[1:]]
    final[6] = Message.user(f"[{marker(archive_range(store, [moved[5]]))}]")
    ledger.observe(final)
    assert ledger.losses == Losses()
    assert lost(original, final, store) == Losses()


def test_an_entry_written_after_its_marker_was_seen_is_counted_once_written() -> None:
    original = agent_conversation()
    store = CountingArchive()
    ledger = LossLedger(store, track_writes=True)
    store.on_write = ledger.archived
    ledger.add_originals(original)
    final = replaced(original, 3, original[3].with_content(f"[{marker(archive_key(RESULT))}]"))
    ledger.observe(final)
    assert ledger.losses == Losses(content=len(RESULT))
    store.put(RESULT)
    assert ledger.losses == Losses()


# -- incremental: the same answer as from scratch, each message and entry examined once -----------
STEPS = st.lists(
    st.sampled_from(["feed", "feed", "feed", "micro", "truncate", "keep", "shrink", "drop"]),
    min_size=1,
    max_size=40,
)


MICRO = {"min_content": 600, "head_chars": 100, "tail_chars": 50}


def _message(i: int) -> list[Message]:
    body = f"line of output {i}\n" * (40 + 30 * (i % 4))
    if i % 3 == 0:
        return [Message.user(f"ask {i % 5}"), Message.assistant(f"answer {i % 2}")]
    return [
        Message.user(f"ask {i % 5}"),
        Message.assistant("", tool_calls=[ToolCall(f"c{i}", "read", f'{{"n": {i % 2}}}')]),
        Message.tool(f"c{i}", body),  # repeats every 4 steps: identical results
        Message.assistant(f"read {i % 3}"),
    ]


@settings(max_examples=60, deadline=None)
@given(STEPS)
def test_incremental_ledger_equals_a_fresh_one_at_every_step(steps: list[str]) -> None:
    store = CountingArchive()
    writes: list[str] = []
    ledger = LossLedger(store, track_writes=True)

    def on_write(key: str) -> None:
        writes.append(key)
        ledger.archived(key)

    store.on_write = on_write
    original: list[Message] = [Message.system("sys")]
    history = list(original)
    ledger.add_originals(original)
    for i, step in enumerate(steps):
        if step == "feed":
            fed = _message(i)
            original += fed
            ledger.add_originals(fed)
            history += fed
        elif step == "micro":
            history, _ = apply_microcompact(history, archive=store, **MICRO)
        elif step == "truncate":
            history, _ = emergency_truncate(history, 4, archive=store)
        elif step == "keep":
            history, _ = keep_last(history, 4, archive=store, per_message_cap=400)
        elif step == "shrink":
            history, _ = shrink_to_budget(history, 2000, archive=store)
        elif len(history) > 2:
            history = history[:1] + history[2:]  # a faulty pass: drops a message unarchived
        ledger.observe(history)
        fresh = LossLedger(store, track_writes=True)
        for key in writes:
            fresh.archived(key)
        fresh.add_originals(original)
        fresh.observe(history)
        assert ledger.losses == fresh.losses, (i, step)
        untracked = lost(original, history, store)
        assert all(getattr(untracked, f) <= getattr(ledger.losses, f) for f in LOSS_FIELDS)
        if "drop" not in steps[: i + 1]:
            assert ledger.losses == Losses(), (i, step)


def test_each_entry_is_read_once_and_each_message_examined_once(monkeypatch: pytest.MonkeyPatch) -> None:
    examined: Counter[int] = Counter()
    real_pieces = ledger_module.message_pieces

    def counting_pieces(msg: Message) -> list[tuple[str, str]]:
        examined[id(msg)] += 1
        return real_pieces(msg)

    monkeypatch.setattr(ledger_module, "message_pieces", counting_pieces)
    reads: Counter[str] = Counter()
    store = CountingArchive()

    class LedgerView(MemoryArchive):  # what the ledger reads, counted; the passes read the store itself
        def get(self, key: str) -> str | None:
            reads[key] += 1
            return store.get(key)

    ledger = LossLedger(LedgerView(), track_writes=True)
    store.on_write = ledger.archived
    history: list[Message] = [Message.system("sys")]
    seen: list[Message] = list(history)  # keeps every object alive, so ids stay unique
    fed_messages: list[Message] = list(history)
    ledger.add_originals(history)
    for i in range(300):
        fed = _message(i)
        fed_messages += fed
        ledger.add_originals(fed)
        history += fed
        history, _ = apply_microcompact(history, archive=store, **MICRO)
        if i % 3 == 2:
            history, _ = emergency_truncate(history, 6, archive=store)
        seen += history
        ledger.observe(history)
    assert ledger.losses == Losses()
    assert max(reads.values()) == 1  # every entry parsed once, however often it is reached
    originals = {id(m) for m in seen if m in fed_messages}
    # an original is examined when added and when first observed; any other message once
    assert all(examined[id(m)] <= 1 + (id(m) in originals) for m in seen)


def test_message_pieces_leave_out_empty_values() -> None:
    msg = Message.assistant("", tool_calls=[ToolCall("c1", "read", "")])
    assert message_pieces(msg) == [("role", "assistant"), ("call_id", "c1"), ("tool_name", "read")]
